"""What Redis holds for convenience degrades and never costs a turn: with the session's Redis frozen
(every process stopped, as a hung host looks) the play page's turns (a session, its CSRF token, an
Idempotency-Key, server-sent events) are played and stored once each, the answer saying what could
not be kept; undo and redo, which keep their stack in Postgres, work as ever; Insights' last prompt
says it cannot be read now; nothing answers 5xx."""

import json
import uuid

import psutil
import pytest
import redis

from config import embedded, redis_pool
from config.redis_pool import redis_client
from stories.models import Action
from tests.support.events import parse_events, streamed
from tests.support.processes import wait_for

pytestmark = [pytest.mark.django_db, pytest.mark.slow, pytest.mark.alone]


@pytest.fixture
def frozen_redis(settings):
    pid = embedded.redis_pid(settings.DATA_DIR)
    if pid is None:
        pytest.skip("needs the embedded Redis (REDIS_URL names another server)")
    process = psutil.Process(pid)

    class Control:
        def freeze(self):
            process.suspend()

        def thaw(self):
            process.resume()

    control = Control()
    redis_pool._silent_until.clear()
    try:
        yield control
    finally:
        process.resume()
        redis_pool._silent_until.clear()


def page_turn(client, aid, text):
    """A turn as the play page sends it."""
    response = client.post(
        f"/api/adventures/{aid}/turns/",
        json.dumps({"mode": "do", "text": text}),
        content_type="application/json",
        HTTP_ACCEPT="text/event-stream",
        HTTP_X_CSRFTOKEN=client.cookies["csrftoken"].value,
        HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex,
    )
    assert response.status_code == 200, (response.status_code, response.content[:300])
    return parse_events(streamed(response))[-1]


def test_turns_from_the_page_are_played_once_each_while_redis_is_frozen(alice_plays, alice, frozen_redis):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    client.get("/play/")  # the page sets its CSRF cookie
    aid = alice_plays.post("/api/adventures/", {"title": "Storm", "opening": "Wind."}, format="json").json()["id"]
    frozen_redis.freeze()
    try:
        answers = [page_turn(client, aid, f"step {n}") for n in range(3)]
        undone = alice_plays.post(f"/api/adventures/{aid}/undo/")
        redone = alice_plays.post(f"/api/adventures/{aid}/redo/")
        last = alice_plays.get(f"/api/adventures/{aid}/insights/", {"turn": "last"})
    finally:
        frozen_redis.thaw()
    for name, data in answers:
        assert name == "done", data
        assert any("Idempotency-Key" in notice for notice in data["notices"]), data["notices"]
    assert [a.text for a in Action.objects.filter(adventure_id=aid, kind="do").order_by("depth")] == [
        "step 0",
        "step 1",
        "step 2",
    ], "each stored once"
    assert undone.status_code == 200 and redone.status_code == 200, (undone.json(), redone.json())
    assert last.status_code == 404 and "right now" in last.json()["detail"]
    wait_for(_answers, timeout=10, what="the site to ask Redis again (it stopped asking after a timeout)")
    name, data = page_turn(client, aid, "step 3")
    assert name == "done" and data["notices"] == [], "Redis back: the key kept again"


def _answers() -> bool:
    try:
        return redis_client().ping()
    except redis.RedisError:
        return False


def test_a_story_played_together_plays_its_turns_with_no_line_while_redis_is_frozen(
    alice_plays, bob, charlie, frozen_redis, caplog, monkeypatch
):
    """The line of a story played together lives in Redis: with Redis away each turn asks for the
    story as a story played alone does (played when free, the 409 when busy), and none is lost. The
    site waits out Redis's timeout once: its other calls fail at once (each turn once waited out a
    timeout at every call: its place in line, each live event, its last context, 20 s a turn)."""
    from tests.stories.test_turn_modes import _joined, _players_acts, _story

    monkeypatch.setattr(redis_pool, "BREAK_S", 600.0)  # no second try within the test

    aid, cards, code = _story(alice_plays)
    bob_api = _joined(bob, code, cards["Sela"])
    frozen_redis.freeze()
    try:
        played = [
            api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": text}, format="json")
            for api, text in [(alice_plays, "I wade in"), (bob_api, "I follow Mira")]
        ]
    finally:
        frozen_redis.thaw()
    assert [p.status_code for p in played] == [201, 201], [p.json() for p in played]
    assert _players_acts(aid) == [("", "I wade in"), ("Sela", "I follow Mira")]
    waited = [r.getMessage() for r in caplog.records if "imeout" in r.getMessage()]
    refused = [r.getMessage() for r in caplog.records if "did not answer moments ago" in r.getMessage()]
    assert len(waited) <= 1 and len(refused) >= 4, (waited, refused)
