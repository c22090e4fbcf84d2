"""Each user's key is spent only on that user's work and is never shown, logged or stored in clear."""

import logging
from datetime import datetime, timedelta, timezone

import pytest
import redis
from django.db import connection

from memory import agents, bank
from memory.models import Agent, World
from tests.conftest import ALICE_KEY, BOB_KEY, api_client_for
from tests.support.story import memory_reply

pytestmark = pytest.mark.django_db

MARK = {"alice": "ALICEWORLD", "bob": "BOBWORLD"}


def every_text_in_redis(url) -> str:
    client = redis.Redis.from_url(url)
    out = []
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        out.append(key.decode(errors="replace"))
        if kind == b"string":
            out.append((client.get(key) or b"").decode(errors="replace"))
        elif kind == b"list":
            out += [v.decode(errors="replace") for v in client.lrange(key, 0, -1)]
        elif kind == b"hash":
            out += [v.decode(errors="replace") for v in client.hgetall(key).values()]
        elif kind == b"set":
            out += [v.decode(errors="replace") for v in client.smembers(key)]
    return "\n".join(out)


def every_row_as_text() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        tables = [row[0] for row in cursor.fetchall()]
        out = []
        for table in tables:
            cursor.execute(f'SELECT row_to_json(t)::text FROM "{table}" t')
            out += [row[0] for row in cursor.fetchall()]
    return "\n".join(out)


def test_keys_go_only_to_their_owners_work_and_never_show(alice, bob, fake_llm, settings, caplog, admin_client):
    caplog.set_level(logging.DEBUG)
    fake_llm.reply = memory_reply
    responses = []
    users = {"alice": (alice, ALICE_KEY), "bob": (bob, BOB_KEY)}
    spans = {}
    for name, (user, key) in users.items():
        first = len(fake_llm.requests)
        api = api_client_for(user)
        responses.append(api.patch("/api/settings/", {"endpoint_url": fake_llm.url, "api_key": key, "model": "m",
                                                      "embedding_model": "e"}, format="json"))
        aid = api.post("/api/adventures/", {"title": MARK[name], "opening": f"{MARK[name]} begins."},
                       format="json").json()["id"]
        for n in range(7):
            responses.append(api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": f"{MARK[name]} step {n}"},
                                      format="json"))
            bank.run(aid)  # memory passes: summaries and embeddings with the owner's key
        responses.append(api.post("/api/settings/test/"))
        responses.append(api.get(f"/api/adventures/{aid}/export/"))
        responses.append(api.get("/api/debug/requests/"))
        responses.append(api.get("/api/settings/"))
        world = World.objects.create(owner=user, name=MARK[name])
        when = datetime(2026, 1, 1, 10, tzinfo=timezone.utc)  # long settled: consolidation may fold it
        agents.events_record(world=world, events=[
            agents.Event(type="say", actor=f"{MARK[name]}-a", target=f"{MARK[name]}-b", text=f"{MARK[name]} trade {n}",
                         nearby=[f"{MARK[name]}-b"], time=when + timedelta(minutes=n))
            for n in range(6)])
        for agent in Agent.objects.filter(world=world):
            agents.agent_pass(agent_id=agent.pk)  # embeddings and consolidation with the owner's key
        spans[name] = range(first, len(fake_llm.requests))

    assert all(r.status_code < 300 for r in responses)
    requests = fake_llm.requests
    kinds = {(name, kind) for r in requests for name in MARK if MARK[name] in str(r.body)
             for kind, needle in [("turn", "narrator"), ("memory", "write memories"), ("summary", "running summary"),
                                  ("consolidation", "Fold these memories"), ("embedding", "'input'"),
                                  ("test", "Reply with the word")] if needle in str(r.body)}
    for name in MARK:
        for kind in ("turn", "memory", "summary", "consolidation", "embedding"):
            assert (name, kind) in kinds, f"{name}'s {kind} work reached the model"
    for index, recorded in enumerate(requests):
        text = str(recorded.body)
        about = [name for name in MARK if MARK[name] in text]
        assert len(about) <= 1, f"a request mixes two users' work: {text[:200]}"
        owner = about[0] if about else next(name for name, span in spans.items() if index in span)
        assert recorded.headers["authorization"] == f"Bearer {users[owner][1]}", "spent on another user's work"

    for response in responses:
        assert ALICE_KEY not in response.content.decode() and BOB_KEY not in response.content.decode()
    assert ALICE_KEY not in caplog.text and BOB_KEY not in caplog.text
    assert ALICE_KEY not in every_text_in_redis(settings.REDIS_URL)
    assert BOB_KEY not in every_text_in_redis(settings.REDIS_URL)
    rows = every_row_as_text()
    assert ALICE_KEY not in rows and BOB_KEY not in rows
    for page in ["/admin/stories/aisettings/", f"/admin/stories/aisettings/{alice.ai_settings.pk}/change/",
                 "/admin/stories/providercall/"]:
        body = admin_client.get(page).content.decode()
        assert ALICE_KEY not in body and BOB_KEY not in body, page
