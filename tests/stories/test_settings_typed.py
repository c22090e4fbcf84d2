"""Load models and Test connection use what the Settings form holds before it is saved; the stored
key still goes only to the endpoint it was entered for."""

import pytest

from tests.conftest import ALICE_KEY

pytestmark = pytest.mark.django_db


def test_a_typed_endpoint_and_model_are_tested_and_listed_without_being_saved(alice_api, fake_llm):
    typed = {"endpoint_url": fake_llm.url, "model": "fake-model", "api_key": "sk-typed-0001"}
    tested = alice_api.post("/api/settings/test/", typed, format="json")
    assert tested.status_code == 200, tested.json()
    assert tested.json()["ok"] is True
    assert fake_llm.chat_requests()[-1].headers["authorization"] == "Bearer sk-typed-0001"
    listed = alice_api.post("/api/settings/models/", typed, format="json")
    assert listed.status_code == 200 and listed.json()["models"], listed.json()
    stored = alice_api.get("/api/settings/").json()
    assert stored["endpoint_url"] == "" and stored["model"] == "" and stored["has_api_key"] is False


def test_nothing_typed_means_the_saved_values_and_none_saved_says_what_to_set(alice_api, alice_plays, fake_llm):
    assert alice_plays.post("/api/settings/test/", {}, format="json").status_code == 200
    assert fake_llm.chat_requests()[-1].headers["authorization"] == f"Bearer {ALICE_KEY}"
    empty = alice_plays.post("/api/settings/test/", {"endpoint_url": ""}, format="json")
    assert empty.status_code in (400, 424) and "endpoint URL" in empty.json()["detail"]
    no_model = alice_plays.post("/api/settings/test/", {"model": ""}, format="json")
    assert "model" in no_model.json()["detail"]


def test_the_stored_key_never_goes_to_a_typed_endpoint_elsewhere(alice_plays, fake_llm):
    from tests.support.fake_llm import FakeLLM

    other = FakeLLM()
    try:
        tried = alice_plays.post("/api/settings/test/", {"endpoint_url": other.url}, format="json")
        assert tried.status_code == 200, tried.json()
        sent = other.chat_requests()[-1].headers.get("authorization", "")
        assert ALICE_KEY not in sent, "the saved key went to an endpoint it was not entered for"
        same = alice_plays.post("/api/settings/test/", {"endpoint_url": fake_llm.url + "/"}, format="json")
        assert same.status_code == 200
        assert fake_llm.chat_requests()[-1].headers["authorization"] == f"Bearer {ALICE_KEY}", "same endpoint: its key"
    finally:
        other.stop()


def test_a_typed_endpoint_of_the_wrong_shape_is_a_400_naming_it(alice_api):
    bad = alice_api.post("/api/settings/test/", {"endpoint_url": "ftp://example.com/v1"}, format="json")
    assert bad.status_code == 400 and "endpoint_url" in str(bad.json())
