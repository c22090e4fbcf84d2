"""A turn whose action was stored but whose reply failed is never stored twice: the page sends an
Idempotency-Key per action, and the same key sent again uses the action already stored."""

import uuid

import pytest

from stories.models import Action
from tests.support.fake_llm import Reply

pytestmark = pytest.mark.django_db
# keys live in Redis for 10 minutes: each run of the tests makes its own
KEYS = {name: f"{name}-{uuid.uuid4().hex}" for name in ("k-1", "k-2", "k-3")}


def narrator(body) -> bool:
    return "narrator" in body["messages"][0]["content"]


@pytest.fixture
def inn(owner, alice_api):
    return alice_api.post("/api/adventures/", {"title": "Inn", "opening": "Rain."}, format="json").json()["id"]


def turn(api, aid, text, key=None):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key is not None else {}
    return api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": text}, format="json", **headers)


def test_the_same_key_after_a_failed_reply_uses_the_stored_action(inn, alice_api, memory_llm):
    memory_llm.queue(Reply(status=401, when=narrator))
    failed = turn(alice_api, inn, "knock on the door", key=KEYS["k-1"])
    assert 400 <= failed.status_code < 600 and failed.status_code != 409, failed.json()
    stored = failed.json()["stored_actions"]
    assert [a["text"] for a in stored] == ["knock on the door"]

    again = turn(alice_api, inn, "knock on the door", key=KEYS["k-1"])
    assert again.status_code == 201, again.json()
    assert again.json()["actions"][0]["id"] == stored[0]["id"], "the stored action, not a new one"
    assert Action.objects.filter(adventure_id=inn, text="knock on the door").count() == 1
    story = [a["text"] for a in alice_api.get(f"/api/adventures/{inn}/story/").json()["actions"]]
    assert story.count("knock on the door") == 1 and len(story) == 3, story


def test_a_key_whose_turn_was_answered_is_a_409_and_stores_nothing(inn, alice_api):
    assert turn(alice_api, inn, "wait", key=KEYS["k-2"]).status_code == 201
    before = Action.objects.filter(adventure_id=inn).count()
    again = turn(alice_api, inn, "wait", key=KEYS["k-2"])
    assert again.status_code == 409 and "already played" in again.json()["detail"], again.json()
    assert Action.objects.filter(adventure_id=inn).count() == before


def test_without_a_key_or_with_a_new_one_each_send_is_its_own_action(inn, alice_api):
    assert turn(alice_api, inn, "wait").status_code == 201
    assert turn(alice_api, inn, "wait", key=KEYS["k-3"]).status_code == 201
    assert Action.objects.filter(adventure_id=inn, text="wait").count() == 2


@pytest.mark.parametrize("key", ["", "has space", "x" * 65, "é"])
def test_a_malformed_key_is_a_400_saying_its_shape(inn, alice_api, key):
    refused = turn(alice_api, inn, "wait", key=key)
    if key == "":
        assert refused.status_code == 201, "an empty header is no key"
        return
    assert refused.status_code == 400 and "Idempotency-Key" in refused.json()["detail"], refused.json()
    assert not Action.objects.filter(adventure_id=inn, text="wait").exists()
