"""What Redis holds for convenience degrades and never costs a turn: with the session's Redis frozen
(every process stopped, as a hung host looks) the play page's turns (a session, its CSRF token, an
Idempotency-Key, server-sent events) are played and stored once each, the answer saying what could
not be kept; undo and redo, which keep their stack in Postgres, work as ever; Insights' last prompt
says it cannot be read now; nothing answers 5xx."""

import json
import uuid

import psutil
import pytest

from config import embedded
from stories.models import Action
from tests.support.events import parse_events, streamed

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
    try:
        yield control
    finally:
        process.resume()


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
    name, data = page_turn(client, aid, "step 3")
    assert name == "done" and data["notices"] == [], "Redis back: the key kept again"
