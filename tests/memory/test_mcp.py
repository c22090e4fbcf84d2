"""An MCP client session (the SDK's client) records an event and recalls it over streamable HTTP."""

import asyncio
import socket
import subprocess
import sys

import pytest

from memory import agents
from memory.models import AgentMemory, World
from tests.support.processes import ROOT, child_env, free_port, stop_process, child_database_url, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def mcp_server(tmp_path):
    port = free_port()
    log = open(tmp_path / "mcp.log", "wb")
    proc = subprocess.Popen([sys.executable, "manage.py", "runmcp", "--port", str(port)], cwd=ROOT,
                            env=child_env(DATABASE_URL=child_database_url()), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)

    def listening():
        assert proc.poll() is None, (tmp_path / "mcp.log").read_text()
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    wait_for(listening, timeout=60, what="the MCP server")
    yield f"http://127.0.0.1:{port}/mcp"
    stop_process(proc)
    log.close()


async def session_calls(url, token, calls):
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    results = []
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = await session.list_tools()
                results.append(sorted(t.name for t in tools.tools))
                for name, arguments in calls:
                    results.append(await session.call_tool(name, arguments))
    return results


def test_an_mcp_client_records_an_event_and_recalls_it(mcp_server, alice):
    world = World.objects.create(owner=alice, name="Town")
    _, raw = agents.token_create(world=world)
    tools, recorded, recalled, noted, bad = asyncio.run(session_calls(mcp_server, raw, [
        ("record_event", {"type": "say", "actor": "ann", "target": "bo", "location": "square",
                          "text": "The festival moves to Friday.", "nearby": ["bo"]}),
        ("recall", {"agent": "bo", "query": "when is the festival?", "limit": 2}),
        ("remember", {"agent": "bo", "content": "Bring apples to the festival.", "pinned": True}),
        ("record_event", {"type": "say", "actor": "ann", "text": ""}),
    ]))
    assert tools == ["recall", "record_event", "remember"]
    assert recorded.structured_content == {"memories": 2}
    assert "Friday" in recalled.structured_content["text"]
    assert recalled.structured_content["text"].startswith("Relevant memories:")
    assert noted.structured_content["kind"] == "note"
    assert bad.is_error and "text" in bad.content[0].text
    assert AgentMemory.objects.filter(world=world).count() == 3


def test_a_revoked_or_foreign_token_gets_nothing(mcp_server, alice):
    from django.utils import timezone

    world = World.objects.create(owner=alice, name="Town")
    token, raw = agents.token_create(world=world)
    token.revoked_at = timezone.now()
    token.save()
    (_, refused) = asyncio.run(session_calls(mcp_server, raw, [
        ("record_event", {"type": "say", "actor": "ann", "text": "hello"})]))
    assert refused.is_error and "revoked" in refused.content[0].text
    assert not AgentMemory.objects.exists()
