"""Per-user rate limits answer 429 with Retry-After and store nothing."""

import pytest
import redis

from stories import limits
from stories.models import Action
from tests.support.processes import minute_with_room

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_counters(settings):
    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter(limits.PREFIX + "*"):
        client.delete(key)


def test_turns_past_the_per_minute_limit_get_429_and_store_nothing(alice_plays, settings, fake_llm):
    settings.TURNS_PER_MINUTE = 3
    minute_with_room(10)
    aid = alice_plays.post("/api/adventures/", {"title": "T", "opening": "Go."}, format="json").json()["id"]
    for _ in range(3):
        assert (
            alice_plays.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "walk"}, format="json").status_code
            == 201
        )
    stored = Action.objects.count()
    over = alice_plays.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "run"}, format="json")
    assert over.status_code == 429 and "at most 3" in over.json()["detail"]
    assert 1 <= int(over["Retry-After"]) <= 61
    assert Action.objects.count() == stored and len(fake_llm.chat_requests()) == 3


def test_model_calls_a_player_triggers_are_limited_per_user(alice_plays, bob_api, settings, fake_llm):
    settings.MODEL_CALLS_PER_MINUTE = 2
    minute_with_room(10)
    assert [alice_plays.post("/api/settings/test/").status_code for _ in range(3)] == [200, 200, 429]
    bob_api.patch("/api/settings/", {"endpoint_url": fake_llm.url, "model": "m"}, format="json")
    assert bob_api.post("/api/settings/test/").status_code == 200, "one user's limit is not another's"


def test_repeated_failed_logins_are_refused_for_a_while(alice, settings, client):
    from rest_framework.test import APIClient

    settings.LOGIN_FAILURES_MAX = 3
    api = APIClient()
    for _ in range(3):
        assert api.post("/api/auth/login/", {"username": "alice", "password": "nope"}, format="json").status_code == 401
    blocked = api.post("/api/auth/login/", {"username": "alice", "password": "alice-pass-123"}, format="json")
    assert blocked.status_code == 429 and int(blocked["Retry-After"]) > 0
    page = client.post("/accounts/login/", {"username": "alice", "password": "alice-pass-123"})
    assert page.status_code == 429 and b"Too many failed logins" in page.content
    assert client.post("/accounts/login/", {"username": "bob", "password": "x"}).status_code == 200
