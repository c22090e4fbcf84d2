"""Each user's key is spent only on that user's work and is never shown, logged or stored in clear."""

import json
import logging
import re
from datetime import datetime, timedelta, timezone

import pytest
import redis
from django.db import connection

from config.celery import QUEUES
from memory.agents import agent_events, agent_upkeep
from memory.models import Agent, World
from memory.story import memory_pass
from tests.conftest import ALICE_KEY, BOB_KEY, api_client_for
from tests.support.story import memory_reply

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


def marked_reply(body, n):
    """The fake model echoes whose work it was given, so every later request can be traced to an owner."""
    text = json.dumps(body)
    marks = " ".join(mark for mark in MARK.values() if mark in text)
    # in every sentence (the fact keys of a summary it writes are its sentences, embedded one by one)
    reply = re.sub(r"([.!?])(\s+|$)", rf" {marks}\1\2", memory_reply(body, n))
    return reply if marks in reply else f"{reply} {marks}"


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_over_a_hundred_mixed_jobs_on_real_workers_spend_only_their_owners_key(alice, bob, fake_llm, settings):
    from tests.support.processes import Worker, wait_for

    fake_llm.reply = marked_reply
    workers = [Worker(concurrency=2, extra_env={"JOB_RETRY_BACKOFF_S": "1"}) for _ in range(2)]
    try:
        for w in workers:
            w.wait_ready()
        users = {"alice": (alice, ALICE_KEY), "bob": (bob, BOB_KEY)}
        plan = []
        for name, (user, key) in users.items():
            api = api_client_for(user)
            assert (
                api.patch(
                    "/api/settings/",
                    {"endpoint_url": fake_llm.url, "api_key": key, "model": "m", "embedding_model": "e"},
                    format="json",
                ).status_code
                == 200
            )
            adventures = [
                api.post(
                    "/api/adventures/",
                    {"title": f"{MARK[name]} {k}", "opening": f"{MARK[name]} begins {k}."},
                    format="json",
                ).json()["id"]
                for k in range(2)
            ]
            world = api.post("/api/worlds/", {"name": MARK[name]}, format="json").json()["id"]
            plan.append((name, api, adventures, world))
        jobs = 0
        when = datetime(2026, 1, 1, 10, tzinfo=timezone.utc)  # long settled: consolidation folds it
        for round_ in range(15):  # alice's and bob's turns and events interleave on the shared pool
            for name, api, adventures, world in plan:
                for aid in adventures:
                    response = api.post(
                        f"/api/adventures/{aid}/turns/",
                        {"mode": "do", "text": f"{MARK[name]} step {round_}"},
                        format="json",
                    )
                    assert response.status_code == 201, response.content
                    jobs += 2  # the turn, and the memory pass it enqueues to the pool
                if round_ % 5 == 0:
                    events = [
                        {
                            "type": "say",
                            "actor": f"{MARK[name]}-a",
                            "target": f"{MARK[name]}-b",
                            "text": f"{MARK[name]} trade {round_}.{i}",
                            "nearby": [f"{MARK[name]}-b"],
                            "time": (when + timedelta(minutes=round_ * 10 + i)).isoformat(),
                        }
                        for i in range(6)
                    ]
                    assert (
                        api.post(f"/api/worlds/{world}/events/", {"events": events}, format="json").status_code == 201
                    )
                    jobs += 2  # an agent pass for each agent
        client = redis.Redis.from_url(settings.REDIS_URL)
        seen = {"count": -1, "since": 0.0}

        def settled():
            import time

            count = len(fake_llm.requests)
            if count != seen["count"] or any(client.llen(name) for name in QUEUES):
                seen.update(count=count, since=time.monotonic())
                return False
            return time.monotonic() - seen["since"] > 2.5

        wait_for(settled, timeout=240, interval=0.5, what="the pool to finish every job")
    finally:
        for w in workers:
            w.stop()

    requests = fake_llm.requests
    assert jobs >= 120 and len(requests) >= 120, (jobs, len(requests))
    kinds = set()
    for recorded in requests:
        text = json.dumps(recorded.body)
        owners = [name for name in MARK if MARK[name] in text]
        assert len(owners) == 1, f"a request is not one user's work: {text[:300]}"
        assert recorded.headers["authorization"] == f"Bearer {users[owners[0]][1]}", "spent on another user's work"
        for kind, needle in [
            ("turn", "narrator"),
            ("memory", "write memories"),
            ("summary", "running summary"),
            ("consolidation", "Fold these memories"),
            ("facts", "For each numbered memory"),
            ("embedding", '"input"'),
        ]:
            if needle in text:
                kinds.add((owners[0], kind))
    assert kinds == {
        (name, kind) for name in MARK for kind in ("turn", "memory", "summary", "consolidation", "facts", "embedding")
    }
    for key in (ALICE_KEY, BOB_KEY):
        assert key not in every_text_in_redis(settings.REDIS_URL)
        assert key not in every_row_as_text()
        for w in workers:
            assert key not in w.log()


@pytest.mark.django_db
def test_keys_go_only_to_their_owners_work_and_never_show(alice, bob, fake_llm, settings, caplog, admin_client):
    caplog.set_level(logging.DEBUG)
    fake_llm.reply = memory_reply
    responses = []
    users = {"alice": (alice, ALICE_KEY), "bob": (bob, BOB_KEY)}
    spans = {}
    for name, (user, key) in users.items():
        first = len(fake_llm.requests)
        api = api_client_for(user)
        responses.append(
            api.patch(
                "/api/settings/",
                {"endpoint_url": fake_llm.url, "api_key": key, "model": "m", "embedding_model": "e"},
                format="json",
            )
        )
        aid = api.post(
            "/api/adventures/", {"title": MARK[name], "opening": f"{MARK[name]} begins."}, format="json"
        ).json()["id"]
        for n in range(7):
            responses.append(
                api.post(
                    f"/api/adventures/{aid}/turns/", {"mode": "do", "text": f"{MARK[name]} step {n}"}, format="json"
                )
            )
            memory_pass.run(aid)  # memory passes: summaries and embeddings with the owner's key
        responses.append(api.post("/api/settings/test/"))
        responses.append(api.get(f"/api/adventures/{aid}/export/"))
        responses.append(api.get("/api/debug/requests/"))
        responses.append(api.get("/api/settings/"))
        world = World.objects.create(owner=user, name=MARK[name])
        when = datetime(2026, 1, 1, 10, tzinfo=timezone.utc)  # long settled: consolidation may fold it
        agent_events.events_record(
            world=world,
            events=[
                agent_events.Event(
                    type="say",
                    actor=f"{MARK[name]}-a",
                    target=f"{MARK[name]}-b",
                    text=f"{MARK[name]} trade {n}",
                    nearby=[f"{MARK[name]}-b"],
                    time=when + timedelta(minutes=n),
                )
                for n in range(6)
            ],
        )
        for agent in Agent.objects.filter(world=world):
            agent_upkeep.agent_upkeep_run(agent_id=agent.pk)  # embeddings and consolidation with the owner's key
        spans[name] = range(first, len(fake_llm.requests))

    assert all(r.status_code < 300 for r in responses)
    requests = fake_llm.requests
    kinds = {
        (name, kind)
        for r in requests
        for name in MARK
        if MARK[name] in str(r.body)
        for kind, needle in [
            ("turn", "narrator"),
            ("memory", "write memories"),
            ("summary", "running summary"),
            ("consolidation", "Fold these memories"),
            ("embedding", "'input'"),
            ("test", "Reply with the word"),
        ]
        if needle in str(r.body)
    }
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
    for page in [
        "/admin/stories/aisettings/",
        f"/admin/stories/aisettings/{alice.ai_settings.pk}/change/",
        "/admin/stories/providercall/",
    ]:
        body = admin_client.get(page).content.decode()
        assert ALICE_KEY not in body and BOB_KEY not in body, page


@pytest.mark.django_db
def test_a_key_goes_only_to_the_endpoint_it_was_entered_for(alice, fake_llm):
    """A session or token alone must not be able to send the saved key to a host of its choosing."""
    from stories.models import AISettings
    from tests.support.fake_llm import FakeLLM

    elsewhere = FakeLLM()
    try:
        api = api_client_for(alice)
        saved = api.patch(
            "/api/settings/", {"endpoint_url": fake_llm.url, "api_key": ALICE_KEY, "model": "m"}, format="json"
        ).json()
        assert saved["has_api_key"] and not saved["api_key_cleared"]
        # another path on the same scheme, host and port keeps the key (and an explicit default port is that port)
        moved = api.patch("/api/settings/", {"endpoint_url": fake_llm.url + "/"}, format="json").json()
        assert moved["has_api_key"] and not moved["api_key_cleared"]
        # another port (or host, or scheme) without a new key: the key is removed, and the answer says so
        moved = api.patch("/api/settings/", {"endpoint_url": elsewhere.url}, format="json").json()
        assert moved["api_key_cleared"] and not moved["has_api_key"] and moved["api_key_last4"] == ""
        assert api.post("/api/settings/test/").status_code == 200
        sent = [r.headers.get("authorization", "") for r in elsewhere.requests]
        assert sent and not any(ALICE_KEY in h for h in sent), "the old key reached the new endpoint"
        # moving back does not bring the key back either
        back = api.patch("/api/settings/", {"endpoint_url": fake_llm.url}, format="json").json()
        assert not back["has_api_key"]
        # a new key in the same request as the move is kept, bound to the new endpoint
        both = api.patch(
            "/api/settings/", {"endpoint_url": elsewhere.url, "api_key": ALICE_KEY + "b"}, format="json"
        ).json()
        assert both["has_api_key"] and not both["api_key_cleared"]
        api.post("/api/settings/test/")
        assert elsewhere.requests[-1].headers["authorization"] == f"Bearer {ALICE_KEY}b"
        # a row moved behind the API (an admin, a script) does not carry the key along
        AISettings.objects.filter(user=alice).update(endpoint_url=fake_llm.url)
        before = len(fake_llm.requests)
        api.post("/api/settings/test/")
        assert fake_llm.requests[before:] and all(
            ALICE_KEY not in r.headers.get("authorization", "") for r in fake_llm.requests[before:]
        )
    finally:
        elsewhere.stop()
