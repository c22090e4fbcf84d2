"""An MCP client session (the SDK's client) records an event and recalls it over streamable HTTP."""

import asyncio

import pytest

from memory import agents
from memory.models import AgentMemory, World
from tests.support.mcp import session_calls

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


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
