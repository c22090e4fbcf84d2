"""A model and a sampling preset per adventure: a turn of that adventure asks its own model with its
preset's sampling; the player's other adventures keep their Settings; an export carries them."""

import pytest

from stories.prompt import sampling

pytestmark = pytest.mark.django_db


def _turn(api, aid):
    made = api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "look around"}, format="json")
    assert made.status_code == 201, made.json()


def test_an_adventure_plays_with_its_own_model_and_preset_and_the_others_with_the_settings(alice_plays, fake_llm):
    own = alice_plays.post("/api/adventures/", {"title": "Own", "opening": "Dawn."}, format="json").json()["id"]
    plain = alice_plays.post("/api/adventures/", {"title": "Plain", "opening": "Dusk."}, format="json").json()["id"]
    changed = alice_plays.patch(
        f"/api/adventures/{own}/", {"model": "storyteller-70b", "sampling_preset": "creative"}, format="json"
    )
    assert changed.status_code == 200, changed.json()
    assert (changed.json()["model"], changed.json()["sampling_preset"]) == ("storyteller-70b", "creative")

    _turn(alice_plays, own)
    asked = fake_llm.chat_requests()[-1].body
    assert asked["model"] == "storyteller-70b"
    assert asked["temperature"] == sampling.PRESETS["creative"]["temperature"]
    assert asked.get("top_p") == sampling.PRESETS["creative"]["top_p"]

    _turn(alice_plays, plain)
    asked = fake_llm.chat_requests()[-1].body
    assert asked["model"] == "fake-model" and asked["temperature"] == 0.8, "the Settings' model and sampling"
    assert alice_plays.get("/api/settings/").json()["model"] == "fake-model", "the Settings are unchanged"

    insights = alice_plays.get(f"/api/adventures/{own}/insights/")
    assert insights.status_code == 200

    exported = alice_plays.get(f"/api/adventures/{own}/export/").json()
    assert exported["adventure"]["model"] == "storyteller-70b"
    again = alice_plays.post("/api/adventures/import/", exported, format="json")
    assert again.status_code in (201, 202), again.json()


def test_an_unknown_preset_is_a_400_naming_it_and_changes_nothing(alice_plays):
    aid = alice_plays.post("/api/adventures/", {"title": "T", "opening": "Dawn."}, format="json").json()["id"]
    refused = alice_plays.patch(f"/api/adventures/{aid}/", {"sampling_preset": "wild"}, format="json")
    assert refused.status_code == 400 and "sampling_preset" in str(refused.json())
    assert alice_plays.get(f"/api/adventures/{aid}/").json()["sampling_preset"] == ""
