"""Past what a web process can start promptly, a turn is refused at once with 503
and Retry-After, before anything is stored; a turn that finds a place free (or
waits for one within its time) plays as usual. On the real server (uvicorn)."""

import http.client
import json
import threading

import pytest

from stories.models import Action
from tests.support.processes import Site, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _adventure(api, opening):
    response = api.post("/api/adventures/", {"title": "Gate", "opening": opening}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def _turn(site, token, aid, text):
    """A streamed turn: (status, headers, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", site.port, timeout=60)
    conn.request(
        "POST",
        f"/api/adventures/{aid}/turns/",
        body=json.dumps({"mode": "do", "text": text}),
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json", "Accept": "text/event-stream"},
    )
    response = conn.getresponse()
    return response.status, dict(response.getheaders()), response.read()


@pytest.fixture
def slow_recall(alice_plays, fake_llm):
    """alice's turns embed their query with her own (fake) embedding model, which answers only when
    released: a turn's first step is held while the test looks at the site."""
    response = alice_plays.patch("/api/settings/", {"embedding_model": "fake-embed"}, format="json")
    assert response.status_code == 200, response.content
    entered, release, answer = threading.Semaphore(0), threading.Event(), fake_llm._embeddings
    in_step = {"now": 0, "most": 0}

    def held(handler, body):
        with fake_llm.lock:
            in_step["now"] += 1
            in_step["most"] = max(in_step["most"], in_step["now"])
        entered.release()
        release.wait(30)
        with fake_llm.lock:
            in_step["now"] -= 1
        return answer(handler, body)

    fake_llm._embeddings = held
    yield entered, release, in_step
    release.set()


def _play_in_background(site, token, aid, text, into):
    thread = threading.Thread(target=lambda: into.append(_turn(site, token, aid, text)))
    thread.start()
    return thread


def test_a_turn_past_the_process_places_is_refused_at_once_with_503_and_stores_nothing(
    tmp_path, alice, alice_plays, slow_recall
):
    from stories.accounts.auth import api_token_for

    entered, release, _ = slow_recall
    site = Site(tmp_path / "site", TURN_STARTS_MAX="1", TURN_STARTS_QUEUED="0", TURN_START_WAIT_MS="60000")
    try:
        token = api_token_for(alice)
        first, second = _adventure(alice_plays, "The hall."), _adventure(alice_plays, "The yard.")
        played: list = []
        thread = _play_in_background(site, token, first, "look", played)
        assert entered.acquire(timeout=30), "the first turn reached its recall"
        status, headers, body = _turn(site, token, second, "wave")
        assert status == 503, body
        answer = json.loads(body)
        assert answer["error"] == "busy" and "nothing was stored" in answer["detail"]
        assert 1 <= int(headers["Retry-After"]) <= 3, "told when its place should be free: in a second or two"
        assert played == [], "the refusal came while the first turn's first step was still held"
        assert list(Action.objects.filter(adventure_id=second).values_list("text", flat=True)) == ["The yard."]
        release.set()
        thread.join(60)
        assert played[0][0] == 200 and b"event: done" in played[0][2]
        status, _, body = _turn(site, token, second, "wave")
        assert status == 200 and b"event: done" in body, "once a place is free the refused player plays"
        assert list(Action.objects.filter(adventure_id=second, kind="do").values_list("text", flat=True)) == ["wave"]
    finally:
        site.stop()


def test_a_turn_that_waits_for_a_place_plays_when_one_comes_free(tmp_path, alice, alice_plays, slow_recall):
    from stories.accounts.auth import api_token_for

    entered, release, in_step = slow_recall
    site = Site(tmp_path / "site", TURN_STARTS_MAX="1", TURN_STARTS_QUEUED="4", TURN_START_WAIT_MS="60000")
    try:
        token = api_token_for(alice)
        rooms = [_adventure(alice_plays, f"Room {n}.") for n in range(3)]
        played: list = []
        threads = [_play_in_background(site, token, room, "look", played) for room in rooms]
        assert entered.acquire(timeout=30)
        release.set()
        for thread in threads:
            thread.join(60)
        assert [status for status, _, _ in played] == [200, 200, 200]
        assert all(b"event: done" in body for _, _, body in played)
        assert in_step["most"] == 1, "one place: the waiting turns began their first steps one at a time"
        wait_for(
            lambda: Action.objects.filter(adventure_id__in=rooms, kind="do").count() == 3,
            timeout=10,
            what="every action stored once",
        )
    finally:
        site.stop()
