"""No request holds a database connection while it waits on anything outside the site: a player
whose model endpoint accepts and never answers keeps many calls waiting on it (connection tests,
model lists, a memory or summary written again, an agent's recall with the owner's embedding
model) and another player's requests are answered meanwhile, on the real server with its bounded
pool. Each such call ends by the site's deadline, is tried once, and an account has a few of them
at once at most."""

import http.client
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from rest_framework.authtoken.models import Token

from stories.accounts import ai_settings
from tests.stories.test_import_jobs import document
from tests.support.processes import Site, wait_for
from tests.support.silent import SilentEndpoint

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

DEADLINE_S = 3  # REQUEST_MODEL_DEADLINE_S of the site under test


def call(port, method, path, token, body=None, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    response = conn.getresponse()
    data = response.read()
    return response.status, dict(response.getheaders()), json.loads(data or b"null")


@pytest.fixture
def silent():
    endpoint = SilentEndpoint()
    yield endpoint
    endpoint.stop()


def _token(user):
    return Token.objects.get_or_create(user=user)[0].key


def test_thirty_calls_to_a_silent_endpoint_leave_another_player_served(tmp_path, alice, bob, silent):
    ai_settings.ai_settings_update(user_id=alice.pk, endpoint_url=silent.url, model="m", api_key="sk-alice-1234")
    alice_token, bob_token = _token(alice), _token(bob)
    site = Site(
        tmp_path / "site",
        DB_POOL_SIZE="4",
        REQUEST_MODEL_DEADLINE_S=str(DEADLINE_S),
        OUTBOUND_CALLS_AT_ONCE="40",  # every call of this test waits on the endpoint at once
        PROVIDER_READ_TIMEOUT="120",
    )
    try:
        calls = [("POST", "/api/settings/test/")] * 20 + [("GET", "/api/settings/models/")] * 10
        with ThreadPoolExecutor(len(calls)) as pool:
            waiting = [pool.submit(call, site.port, m, p, alice_token) for m, p in calls]
            wait_for(lambda: silent.connections >= len(calls), timeout=30, what="every call to reach the endpoint")
            others = [call(site.port, "GET", "/api/adventures/", bob_token, timeout=10)[0] for _ in range(16)]
            others.append(call(site.port, "PATCH", "/api/settings/", bob_token, {"temperature": 0.7}, timeout=10)[0])
            answers = [f.result() for f in waiting]
        assert others == [200] * 17, "another player is served while thirty calls wait on a silent endpoint"
        for status, _, body in answers:
            assert status == 424 and body["error"] == "timeout", body
            assert "did not answer in time" in body["detail"]
        assert silent.connections == len(calls), "each call was tried once, not retried"
    finally:
        site.stop()
        site.wait_disconnected()


def test_an_account_has_a_few_calls_at_once_and_the_rest_are_refused_at_once(tmp_path, alice, bob, silent, fake_llm):
    ai_settings.ai_settings_update(user_id=alice.pk, endpoint_url=silent.url, model="m")
    ai_settings.ai_settings_update(user_id=bob.pk, endpoint_url=fake_llm.url, model="fake-model")
    alice_token, bob_token = _token(alice), _token(bob)
    site = Site(tmp_path / "site", REQUEST_MODEL_DEADLINE_S=str(DEADLINE_S), OUTBOUND_CALLS_AT_ONCE="2")
    try:
        with ThreadPoolExecutor(2) as pool:
            held = [pool.submit(call, site.port, "POST", "/api/settings/test/", alice_token) for _ in range(2)]
            wait_for(lambda: silent.connections >= 2, timeout=30, what="two calls to wait on the endpoint")
            status, headers, body = call(site.port, "GET", "/api/settings/models/", alice_token)
            assert status == 429 and int(headers["Retry-After"]) >= 1, body
            assert "at once" in body["detail"]
            bobs = call(site.port, "POST", "/api/settings/test/", bob_token)
            assert bobs[0] == 200 and bobs[2]["ok"] is True, "another account's places are its own"
            assert [f.result()[0] for f in held] == [424, 424]
        status, _, body = call(site.port, "POST", "/api/settings/test/", alice_token)
        assert status == 424 and body["error"] == "timeout", "the places come back when the calls end"
    finally:
        site.stop()
        site.wait_disconnected()


def test_healthz_says_when_the_pool_cannot_give_a_connection(tmp_path, alice, django_db_blocker):
    """One pooled connection, held by an import submission that waits on a lock this test holds:
    /healthz answers 503 naming the pool, and 200 again once the connection is back."""
    from django.db import connection

    from play.imports import SUBMIT_LOCK_SPACE

    token = _token(alice)
    site = Site(tmp_path / "site", DB_POOL_SIZE="1", DB_POOL_TIMEOUT="1", DB_QUERY_TIMEOUT="30")
    try:
        big = document(2_100)  # past IMPORT_INLINE_ROWS: a submission that takes the lock
        with connection.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [SUBMIT_LOCK_SPACE, alice.pk])
            with ThreadPoolExecutor(1) as pool:
                submitted = pool.submit(call, site.port, "POST", "/api/adventures/import/", token, big)

                def pool_reported():
                    status, _, body = call(site.port, "GET", "/healthz", token)
                    return (status, body) if not body["database"].get("pool", {}).get("ok", True) else None

                status, body = wait_for(pool_reported, timeout=30, what="/healthz to report the pool")
                assert status == 503 and any("pool" in line for line in body["down"]), body
                cursor.execute("ROLLBACK")
                submitted.result()
        status, _, body = call(site.port, "GET", "/healthz", token)
        assert body["database"]["pool"]["ok"] is True, body
    finally:
        site.stop()
        site.wait_disconnected()


# ---------------------------------------------------------------------------- every call a request waits on


@pytest.fixture
def short_deadline(settings):
    settings.REQUEST_MODEL_DEADLINE_S = 1
    settings.PROVIDER_READ_TIMEOUT = 120.0  # a background call would wait this long, three times
    return settings


def test_a_memory_or_summary_written_again_on_a_silent_model_ends_by_the_deadline_tried_once(
    adventure, memory_llm, alice_api, silent, short_deadline
):
    from memory.models import Memory
    from memory.story import memory_pass
    from tests.support.story import grow

    grow(adventure, 12)
    memory_pass.run(adventure.pk)
    memory = Memory.objects.filter(adventure=adventure, source_start=1, character__isnull=True).first()
    before = (memory.text, adventure.story_summary)
    ai_settings.ai_settings_update(user_id=adventure.owner_id, endpoint_url=silent.url)
    for path in (f"memories/{memory.pk}/regenerate/", "summary/regenerate/"):
        answer = alice_api.post(f"/api/adventures/{adventure.pk}/{path}")
        assert answer.status_code == 424, (path, answer.json())
        assert "did not answer in time" in answer.json()["detail"]
    assert silent.connections == 2, "each tried once"
    memory.refresh_from_db()
    adventure.refresh_from_db()
    assert (memory.text, adventure.story_summary) == before, "nothing lost to a call that failed"


def test_a_turn_and_an_agent_recall_whose_embedding_model_stalls_are_answered_by_the_deadline(
    alice_plays, fake_llm, short_deadline, alice
):
    """The owner's embedding model takes 5 s for a query (the deadline is 1 s): the turn is played
    with its recall falling back (said in recall_note), and the agent's recall answers, each query
    tried once."""
    from tests.support.fake_llm import Reply

    aid = alice_plays.post("/api/adventures/", {"title": "T", "opening": "A road."}, format="json").json()["id"]
    world = alice_plays.post("/api/worlds/", {"name": "Town"}, format="json").json()
    alice_plays.post(
        f"/api/worlds/{world['id']}/events/", {"type": "say", "actor": "ann", "text": "The well is dry."}, format="json"
    )
    ai_settings.ai_settings_update(user_id=alice.pk, embedding_model="fake-embed")
    stalls = [Reply(delay=5, when=lambda body: "input" in body) for _ in range(4)]
    fake_llm.queue(*stalls)
    turn = alice_plays.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "look at the well"}, format="json")
    assert turn.status_code == 201, turn.json()
    assert turn.json()["recall_note"], "the player is told recall fell back"
    recall = alice_plays.post(f"/api/worlds/{world['id']}/agents/ann/recall/", {"query": "the well"}, format="json")
    assert recall.status_code == 200 and recall.json()["memories"], recall.json()
    embeds = [r for r in fake_llm.requests if r.path.endswith("/embeddings") and "well" in str(r.body["input"])]
    assert len(embeds) == 2, "each query embedding tried once"
