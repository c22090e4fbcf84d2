"""The memory engine over MCP (streamable HTTP): record_event, recall and
remember tools for agent frameworks, authenticated by a world token sent as
``Authorization: Bearer wt_...``. Each call acts only on that token's world.
Served by `manage.py runmcp` (uvicorn) at /mcp."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from rest_framework import serializers as drf

from memory import agents
from memory import agent_serializers as s
from memory.models import World

INSTRUCTIONS = (
    "Long-term memory for agents in a shared world. Call record_event for what agents say, do and observe; "
    "call recall before acting to get the few memories that matter now (a ready-to-use 'Relevant memories' "
    "text); call remember to keep a note."
)


class ToolInputError(ToolError):
    """Shown to the calling agent as the tool's error message."""


def _world_for(ctx: Context) -> World:
    request = ctx.request_context.request
    header = request.headers.get("authorization", "") if request is not None else ""
    scheme, _, raw = header.partition(" ")
    if scheme.lower() != "bearer" or not raw.startswith(agents.TOKEN_PREFIX):
        raise ToolInputError("send a world token: Authorization: Bearer wt_...")
    token = agents.token_resolve(raw.strip())
    if token is None:
        raise ToolInputError("unknown or revoked world token")
    return token.world


def _check(serializer_class, data: dict) -> dict:
    serializer = serializer_class(data=data)
    if not serializer.is_valid():
        raise ToolInputError(str(drf.ValidationError(serializer.errors).detail))
    return serializer.validated_data


def build_server() -> MCPServer:
    server = MCPServer(name="everlore-memory", instructions=INSTRUCTIONS)

    @server.tool(description="Record what happened: type is say, interact, observe, or a custom type with a "
                             "template. Listeners and bystanders in `nearby` get memories of it too.")
    async def record_event(ctx: Context, type: str, actor: str, text: str, target: str = "", location: str = "",
                           nearby: list[str] | None = None, time: str | None = None,
                           importance: float | None = None, template: str = "") -> dict[str, Any]:
        def run():
            world = _world_for(ctx)
            event = _check(s.EventSerializer, {"type": type, "actor": actor, "text": text, "target": target,
                                               "location": location, "nearby": nearby or [], "time": time,
                                               "importance": importance, "template": template})
            from workers.tasks import enqueue_agent_pass

            created = agents.events_record(world=world, events=[agents.Event(**event)])
            for agent_id in {m.agent_id for m in created}:
                enqueue_agent_pass(agent_id)
            return {"memories": len(created)}

        return await sync_to_async(run, thread_sensitive=True)()

    @server.tool(description="The memories that matter now for `agent`: ranked by partner, location, kind, "
                             "importance, recency and (with `query`) meaning and words. Returns a ready-to-use "
                             "text block and the memories with their scores.")
    async def recall(ctx: Context, agent: str, query: str = "", partner: str = "", location: str = "",
                     limit: int = 3, token_budget: int | None = None) -> dict[str, Any]:
        def run():
            world = _world_for(ctx)
            data = _check(s.RecallInputSerializer, {"query": query, "partner": partner, "location": location,
                                                    "limit": limit, "token_budget": token_budget})
            try:
                who = agents.access_agent(world=world, external_id=agent)
            except Exception:
                raise ToolInputError(f"no agent {agent!r} in this world yet; record an event first") from None
            found, block = agents.recall(world=world, agent=who, partner=data["partner"], location=data["location"],
                                         query=data["query"], limit=data["limit"], token_budget=data["token_budget"])
            return {"text": block, "memories": [{"id": m.id, "content": m.content, "kind": m.kind,
                                                 "score": m.score} for m in found]}

        return await sync_to_async(run, thread_sensitive=True)()

    @server.tool(description="Keep a note in `agent`'s memory (pinned notes are never evicted).")
    async def remember(ctx: Context, agent: str, content: str, partner: str = "", location: str = "",
                       importance: float = 0.7, pinned: bool = False) -> dict[str, Any]:
        def run():
            world = _world_for(ctx)
            data = _check(s.RememberSerializer, {"content": content, "partner": partner, "location": location,
                                                 "importance": importance, "pinned": pinned})
            who, _ = agents.Agent.objects.get_or_create(world=world, external_id=agent[:100],
                                                        defaults={"display_name": agent[:200]})
            memory = agents.remember(world=world, agent=who, **data)
            return {"id": memory.pk, "kind": memory.kind}

        return await sync_to_async(run, thread_sensitive=True)()

    return server


def asgi_app(*, port: int):
    hosts = [h for h in settings.ALLOWED_HOSTS if h != "*"]
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection="*" not in settings.ALLOWED_HOSTS,
        allowed_hosts=[f"{h}:{port}" for h in hosts] + hosts + [f"{h}:*" for h in hosts],
        allowed_origins=[f"http://{h}:{port}" for h in hosts] + list(settings.CSRF_TRUSTED_ORIGINS),
    )
    return build_server().streamable_http_app(streamable_http_path="/mcp", stateless_http=True,
                                              json_response=True, transport_security=security)
