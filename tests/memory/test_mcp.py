"""An MCP client session (the SDK's client) records an event and recalls it over streamable HTTP."""

import asyncio

import pytest

from memory.agents import agent_events, worlds
from memory.models import AgentMemory, World
from tests.support.mcp import session_calls
from tests.support.processes import minute_with_room

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_an_mcp_client_records_an_event_and_recalls_it(mcp_server, alice):
    world = World.objects.create(owner=alice, name="Town")
    _, raw = worlds.token_create(world=world)
    tools, recorded, recalled, noted, bad = asyncio.run(
        session_calls(
            mcp_server,
            raw,
            [
                (
                    "record_event",
                    {
                        "type": "say",
                        "actor": "ann",
                        "target": "bo",
                        "location": "square",
                        "text": "The festival moves to Friday.",
                        "nearby": ["bo"],
                    },
                ),
                ("recall", {"agent": "bo", "query": "when is the festival?", "limit": 2}),
                ("remember", {"agent": "bo", "content": "Bring apples to the festival.", "pinned": True}),
                ("record_event", {"type": "say", "actor": "ann", "text": ""}),
            ],
        )
    )
    assert tools == ["forget", "recall", "record_event", "remember"]
    assert recorded.structured_content == {"memories": 2}
    assert "Friday" in recalled.structured_content["text"]
    assert recalled.structured_content["text"].startswith("Relevant memories:")
    assert noted.structured_content["kind"] == "note"
    assert bad.is_error and "text" in bad.content[0].text
    assert AgentMemory.objects.filter(world=world).count() == 3


def test_a_revoked_or_foreign_token_gets_nothing(mcp_server, alice):
    from django.utils import timezone

    world = World.objects.create(owner=alice, name="Town")
    token, raw = worlds.token_create(world=world)
    token.revoked_at = timezone.now()
    token.save()
    (_, refused) = asyncio.run(
        session_calls(mcp_server, raw, [("record_event", {"type": "say", "actor": "ann", "text": "hello"})])
    )
    assert refused.is_error and "revoked" in refused.content[0].text
    assert not AgentMemory.objects.exists()


def test_mcp_recall_takes_the_rest_options_and_errors_are_sentences(mcp_server, alice):
    from datetime import timedelta

    from django.utils import timezone

    world = World.objects.create(owner=alice, name="Town")
    old = timezone.now() - timedelta(days=3)
    agent_events.events_record(
        world=world,
        events=[
            agent_events.Event(type="say", actor="ann", target="bo", text="the bridge is out", nearby=["bo"], time=old),
            agent_events.Event(type="observe", actor="bo", text="the bridge is rebuilt"),
        ],
    )
    _, raw = worlds.token_create(world=world)
    since = (timezone.now() - timedelta(days=1)).isoformat()
    _, first, again, recent, heard, bad = asyncio.run(
        session_calls(
            mcp_server,
            raw,
            [
                ("recall", {"agent": "bo", "query": "bridge", "limit": 5}),
                ("recall", {"agent": "bo", "query": "bridge", "limit": 5}),
                ("recall", {"agent": "bo", "query": "bridge", "limit": 5, "since": since, "cooldown_seconds": 0}),
                ("recall", {"agent": "bo", "query": "bridge", "limit": 5, "kinds": ["heard"], "cooldown_seconds": 0}),
                ("recall", {"agent": "bo", "kinds": ["gossip"]}),
            ],
        )
    )
    assert [m["content"].split(") ", 1)[1] for m in recent.structured_content["memories"]] == [
        "bo noticed: the bridge is rebuilt"
    ]
    assert [m["kind"] for m in heard.structured_content["memories"]] == ["heard"]
    assert len(first.structured_content["memories"]) == 2 and again.structured_content["memories"] == [], (
        "the cooldown holds back what was just returned"
    )
    assert bad.is_error and 'kinds: item 1: "gossip" is not a valid choice.' in bad.content[0].text
    assert "ErrorDetail" not in bad.content[0].text


@pytest.mark.django_db(transaction=True)
def test_mcp_opens_no_idle_stream_and_its_answers_carry_the_security_headers(mcp_server):
    import httpx2

    started = __import__("time").monotonic()
    response = httpx2.get(mcp_server, headers={"Accept": "text/event-stream"}, timeout=10)
    assert response.status_code == 405 and "POST" in response.headers["allow"]
    assert __import__("time").monotonic() - started < 5, "GET /mcp answered at once, no stream held open"
    assert response.headers["x-content-type-options"] == "nosniff"
    posted = httpx2.post(
        mcp_server,
        content=b"{}",
        timeout=10,
        headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
    )
    assert posted.status_code < 500 and posted.headers["x-content-type-options"] == "nosniff"
    assert "default-src 'none'" in posted.headers["content-security-policy"]


@pytest.mark.django_db(transaction=True)
def test_mcp_cuts_off_headers_that_never_finish(mcp_server):
    """The MCP port speaks the site's protocol: headers still unfinished REQUEST_HEADER_TIMEOUT
    seconds (2 here) after the connection opened are answered 408 and the connection closed."""
    import socket
    import time
    from urllib.parse import urlsplit

    port = urlsplit(mcp_server).port
    stuck = [socket.create_connection(("127.0.0.1", port), timeout=15) for _ in range(20)]
    started = time.monotonic()
    for sock in stuck:
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    for sock in stuck:
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
        sock.close()
        assert answer.startswith(b"HTTP/1.1 408") and b"nosniff" in answer, answer
    assert time.monotonic() - started < 8


def test_mcp_and_rest_answer_a_recall_alike_and_name_an_unknown_agent_alike(mcp_server, alice, client):
    from rest_framework.test import APIClient

    world = World.objects.create(owner=alice, name="Town")
    agent_events.events_record(
        world=world,
        events=[agent_events.Event(type="say", actor="ann", target="bo", text="the well is dry", nearby=["bo"])],
    )
    _, raw = worlds.token_create(world=world)
    asks = {"query": "the well", "limit": 3, "cooldown_seconds": 0}
    _, over_mcp, unknown_mcp = asyncio.run(
        session_calls(mcp_server, raw, [("recall", {"agent": "bo", **asks}), ("recall", {"agent": "cy", **asks})])
    )
    rest = APIClient()
    rest.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    over_rest = rest.post(f"/api/worlds/{world.pk}/agents/bo/recall/", asks, format="json")
    unknown_rest = rest.post(f"/api/worlds/{world.pk}/agents/cy/recall/", asks, format="json")
    assert over_rest.status_code == 200, over_rest.content
    mcp_answer, rest_answer = over_mcp.structured_content, over_rest.json()
    assert mcp_answer["text"] == rest_answer["text"] and "the well is dry" in mcp_answer["text"]
    strip = [{k: v for k, v in m.items() if k not in ("score", "parts")} for m in rest_answer["memories"]]
    assert [{k: v for k, v in m.items() if k not in ("score", "parts")} for m in mcp_answer["memories"]] == strip
    assert set(mcp_answer["memories"][0]) == set(rest_answer["memories"][0]) >= {"score", "parts", "occurred_at"}
    assert unknown_rest.status_code == 404 and unknown_mcp.is_error
    assert unknown_rest.json()["detail"] in unknown_mcp.content[0].text and "'cy'" in unknown_rest.json()["detail"]


def test_mcp_arguments_of_the_wrong_shape_are_answered_in_sentences(mcp_server, alice):
    world = World.objects.create(owner=alice, name="Town")
    _, raw = worlds.token_create(world=world)
    wrong_type, missing, not_a_date = asyncio.run(
        session_calls(
            mcp_server,
            raw,
            [
                ("recall", {"agent": "bo", "query": "bridge", "limit": "many"}),
                ("recall", {"query": "bridge"}),
                ("recall", {"agent": "bo", "since": "last week"}),
            ],
        )
    )[1:]
    for answer in (wrong_type, missing, not_a_date):
        assert answer.is_error
        text = answer.content[0].text
        assert "validation error" not in text and "input_value" not in text and "pydantic" not in text, text
    assert "limit: must be a whole number" in wrong_type.content[0].text
    assert "agent: required" in missing.content[0].text
    assert "since:" in not_a_date.content[0].text


def test_an_agent_forgets_a_memory_over_mcp_and_its_keys_go_with_it(mcp_server, alice):
    from rest_framework.test import APIClient

    from memory.agents import agent_upkeep
    from memory.models import AgentMemoryKey

    world = World.objects.create(owner=alice, name="Town")
    elsewhere = World.objects.create(owner=alice, name="Elsewhere")
    agent_events.events_record(
        world=world,
        events=[
            agent_events.Event(
                type="say", actor="ann", target="bo", text="I hid the key under the oak.", nearby=["bo"]
            ),
            agent_events.Event(type="say", actor="ann", target="bo", text="The mill opens at dawn.", nearby=["bo"]),
        ],
    )
    bo = worlds.access_agent(world=world, external_id="bo")
    agent_upkeep.agent_catch_up(agent_id=bo.pk)
    hidden, mill = (AgentMemory.objects.get(agent=bo, content__contains=word) for word in ("oak", "mill"))
    assert AgentMemoryKey.objects.filter(memory=hidden).exists()
    _, raw = worlds.token_create(world=world)
    _, foreign = worlds.token_create(world=elsewhere)
    (_, from_elsewhere) = asyncio.run(
        session_calls(mcp_server, foreign, [("forget", {"agent": "bo", "memory_id": hidden.pk})])
    )
    _, forgot, again, not_an_id = asyncio.run(
        session_calls(
            mcp_server,
            raw,
            [
                ("forget", {"agent": "bo", "memory_id": hidden.pk}),
                ("forget", {"agent": "bo", "memory_id": hidden.pk}),
                ("forget", {"agent": "bo", "memory_id": 0}),
            ],
        )
    )
    assert from_elsewhere.is_error and "'bo'" in from_elsewhere.content[0].text, "another world's token: no such agent"
    assert forgot.structured_content == {"forgotten": hidden.pk}
    assert not AgentMemory.objects.filter(pk=hidden.pk).exists()
    assert not AgentMemoryKey.objects.filter(memory_id=hidden.pk).exists(), "its keys are gone with it"
    assert AgentMemory.objects.filter(pk=mill.pk).exists() and AgentMemoryKey.objects.filter(memory=mill).exists()
    rest = APIClient()
    rest.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    over_rest = rest.delete(f"/api/worlds/{world.pk}/agents/bo/memories/{hidden.pk}/")
    assert over_rest.status_code == 404 and again.is_error
    assert again.is_error and f"memory_id: not found: no memory {hidden.pk}" in again.content[0].text
    assert not_an_id.is_error and "memory_id" in not_an_id.content[0].text
    recalled = rest.post(f"/api/worlds/{world.pk}/agents/bo/recall/", {"query": "where is the key?"}, format="json")
    assert "oak" not in recalled.json()["text"], "a forgotten memory is never recalled"


def test_mcp_writes_count_toward_the_worlds_events_a_minute(mcp_server, alice, settings):
    """remember, forget and record_event each count toward the world's WORLD_EVENTS_PER_MINUTE (the MCP
    server's own, 600 by default: the world's minute is spent here as 598 events would spend it)."""

    from stories import limits

    world = World.objects.create(owner=alice, name="Town")
    agent_events.events_record(
        world=world,
        events=[
            agent_events.Event(type="observe", actor="ann", text=text) for text in ("the well is dry", "the mill burns")
        ],
    )
    dry, burns = (
        AgentMemory.objects.get(world=world, content__contains=text) for text in ("well is dry", "mill burns")
    )
    _, raw = worlds.token_create(world=world)
    settings.WORLD_EVENTS_PER_MINUTE = 600  # as the server counts (the suite turns limits off in-process)
    # the count is per minute: the calls below must all fall in one (a turn of the minute midway split
    # them between two counts), so with under 10 s of this one left they start in the next
    minute_with_room(10)
    limits.world_events(world_id=world.pk, count=598)
    _, noted, forgot, refused_note, refused_forget, refused_event = asyncio.run(
        session_calls(
            mcp_server,
            raw,
            [
                ("remember", {"agent": "ann", "content": "the 599th event of the minute"}),
                ("forget", {"agent": "ann", "memory_id": dry.pk}),
                ("remember", {"agent": "ann", "content": "one too many"}),
                ("forget", {"agent": "ann", "memory_id": burns.pk}),
                ("record_event", {"type": "observe", "actor": "ann", "text": "and one more"}),
            ],
        )
    )
    assert not noted.is_error and forgot.structured_content == {"forgotten": dry.pk}
    for refused in (refused_note, refused_forget, refused_event):
        assert refused.is_error and "at most 600 a minute for this world" in refused.content[0].text
    assert sorted(AgentMemory.objects.filter(world=world).values_list("pk", flat=True)) == sorted(
        [burns.pk, noted.structured_content["id"]]
    ), "a refused call stores and deletes nothing"
