"""Sampling beyond temperature: the player's top_p, top_k, min_p, penalties and stop strings reach
the model's request when set (and only the fields the endpoint takes), named presets set them at
once, the endpoint's model list is one click away, and a settings field the site does not have is
a 400 naming it."""

import pytest

from stories.models import AISettings
from stories.prompt import sampling

pytestmark = pytest.mark.django_db


def narrator_requests(fake) -> list[dict]:
    return [r.body for r in fake.chat_requests() if "narrator" in r.body["messages"][0]["content"]]


def test_the_players_sampling_reaches_the_models_request_and_unset_fields_stay_out(owner, alice_api, memory_llm):
    changed = alice_api.patch(
        "/api/settings/",
        {"top_p": 0.9, "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1, "stop": ["\n>", "THE END"]},
        format="json",
    )
    assert changed.status_code == 200, changed.json()
    assert changed.json()["top_p"] == 0.9 and changed.json()["stop"] == ["\n>", "THE END"]
    aid = alice_api.post("/api/adventures/", {"title": "T", "opening": "Dawn."}, format="json").json()["id"]
    assert (
        alice_api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "wait"}, format="json").status_code
        == 201
    )
    sent = narrator_requests(memory_llm)[-1]
    assert (sent["top_p"], sent["top_k"], sent["min_p"], sent["repetition_penalty"]) == (0.9, 40, 0.05, 1.1)
    assert sent["stop"] == ["\n>", "THE END"]
    assert "presence_penalty" not in sent and "frequency_penalty" not in sent, "unset: not sent"

    cleared = alice_api.patch("/api/settings/", {"top_k": None, "stop": []}, format="json")
    assert cleared.status_code == 200 and cleared.json()["top_k"] is None
    assert (
        alice_api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "go"}, format="json").status_code == 201
    )
    sent = narrator_requests(memory_llm)[-1]
    assert "top_k" not in sent and "stop" not in sent and sent["top_p"] == 0.9


def test_openais_own_api_is_sent_only_the_fields_it_takes():
    ai = AISettings(top_p=0.9, top_k=40, min_p=0.1, presence_penalty=0.2, repetition_penalty=1.1, stop=["END"])
    assert sampling.request_fields(ai, "https://api.openai.com/v1") == {
        "top_p": 0.9,
        "presence_penalty": 0.2,
        "stop": ["END"],
    }
    assert sampling.request_fields(ai, "http://gpu.example.org:8000/v1")["top_k"] == 40


def test_a_preset_sets_the_sampling_and_the_players_own_value_wins(alice_api):
    presets = alice_api.get("/api/settings/presets/")
    assert presets.status_code == 200
    assert {p["name"] for p in presets.json()["presets"]} == set(sampling.PRESETS)
    applied = alice_api.patch("/api/settings/", {"preset": "creative", "temperature": 0.7}, format="json").json()
    assert applied["temperature"] == 0.7, "the value given with the preset wins"
    assert applied["top_p"] == sampling.PRESETS["creative"]["top_p"]
    assert applied["presence_penalty"] == sampling.PRESETS["creative"]["presence_penalty"]
    back = alice_api.patch("/api/settings/", {"preset": "default"}, format="json").json()
    assert back["top_p"] is None and back["temperature"] == 0.8


@pytest.mark.parametrize(
    "body, says",
    [
        ({"top_q": 0.9}, "top_q"),
        ({"temperature": 0.5, "topp": 1}, "topp"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stop": "END"}, "stop"),
        ({"stop": [""]}, "stop"),
        ({"preset": "wild"}, "preset"),
        ({"repetition_penalty": "high"}, "repetition_penalty"),
    ],
)
def test_a_settings_field_to_fix_is_a_400_naming_it_and_changes_nothing(alice_api, body, says):
    before = alice_api.get("/api/settings/").json()
    refused = alice_api.patch("/api/settings/", body, format="json")
    assert refused.status_code == 400 and says in str(refused.json()), refused.json()
    assert alice_api.get("/api/settings/").json() == before


def test_an_unknown_field_anywhere_in_a_body_is_a_400_naming_where(alice_api):
    made = alice_api.post(
        "/api/adventures/",
        {"title": "T", "cards": [{"type": "character", "name": "Bo", "colour": "red"}]},
        format="json",
    )
    assert made.status_code == 400 and "colour" in str(made.json()), made.json()
    assert alice_api.get("/api/adventures/").json() == [], "nothing was made"


def test_the_endpoints_models_are_listed(owner, alice_api):
    listed = alice_api.get("/api/settings/models/")
    assert listed.status_code == 200 and listed.json() == {"models": ["fake-model"]}


def test_listing_models_without_an_endpoint_says_what_to_set(alice_api):
    refused = alice_api.get("/api/settings/models/")
    assert 400 <= refused.status_code < 500 and "endpoint URL" in refused.json()["detail"], refused.json()
