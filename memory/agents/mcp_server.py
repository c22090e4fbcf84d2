"""The memory engine over MCP (streamable HTTP): record_event, recall and
remember tools for agent frameworks, authenticated by a world token sent as
``Authorization: Bearer wt_...``. Each call acts only on that token's world.
Served by `manage.py runmcp` (uvicorn) at /mcp."""

from __future__ import annotations

import json
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import ValidationError

from config.asgi_guard import BodyGuard, SecurityHeaders
from config.errors import NotFound, as_domain_error
from config.input_guard import check_value
from memory.agents import agent_events, agent_recall_asked, worlds
from memory.agents import agent_serializers as s
from memory.models import WorldToken

INSTRUCTIONS = (
    "Long-term memory for agents in a shared world. Call record_event for what agents say, do and observe; "
    "call recall before acting to get the few memories that matter now (a ready-to-use 'Relevant memories' "
    "text); call remember to keep a note."
)


class ToolInputError(ToolError):
    """Shown to the calling agent as the tool's error message."""


def _token_for(ctx: Context) -> WorldToken:
    request = ctx.request_context.request
    header = request.headers.get("authorization", "") if request is not None else ""
    scheme, _, raw = header.partition(" ")
    if scheme.lower() != "bearer" or not raw.startswith(worlds.TOKEN_PREFIX):
        raise ToolInputError("send a world token: Authorization: Bearer wt_...")
    try:
        return worlds.token_authenticate(raw.strip())
    except worlds.TokenRefused as exc:
        raise ToolInputError(str(exc)) from None


def _sentence(errors) -> str:
    """DRF's error structure as plain sentences: "text: This field is required."."""
    if isinstance(errors, dict):
        return "; ".join(
            _sentence(value)
            if name == "non_field_errors"
            else f"item {name + 1}: {_sentence(value)}"
            if isinstance(name, int)
            else f"{name}: {_sentence(value)}"
            for name, value in errors.items()
        )
    if isinstance(errors, list):
        return " ".join(_sentence(item) for item in errors)
    return str(errors)


def _guarded(run, **arguments):
    """Run a tool's body: arguments Postgres cannot store and domain errors
    (bad input, a rate limit, a full world) come back as the tool's error text."""
    try:
        check_value(arguments, where="the arguments")
    except ValueError as exc:
        raise ToolInputError(str(exc)) from None
    try:
        return run()
    except Exception as exc:  # the one mapping (config.errors): domain errors and outages, as text
        error = as_domain_error(exc)
        if error is None:
            raise
        raise ToolInputError(error.message) from None


def _agent_name(agent: str) -> str:
    if not agent.strip() or len(agent) > 100:
        raise ToolInputError("agent: give the agent's id, 1 to 100 characters")
    return agent


def _check(serializer_class, data: dict) -> dict:
    serializer = serializer_class(data=data)
    if not serializer.is_valid():
        raise ToolInputError(_sentence(serializer.errors))
    return serializer.validated_data


def _argument_sentence(name: str, error: ValidationError) -> str:
    """The SDK's check of a tool's arguments, as sentences naming each argument to fix (never the
    validator's dump): "recall: limit: must be a whole number (got "many")"."""
    said = []
    for err in error.errors():
        where = ".".join(str(part) for part in err["loc"]) or "arguments"
        kind = err.get("type", "")
        if kind == "missing":
            said.append(f"{where}: required")
        elif kind == "extra_forbidden":
            said.append(f"{where}: no such argument")
        else:
            got = json.dumps(err.get("input"), default=str)[:40]
            said.append(f"{where}: {_ARGUMENT_SAYS.get(kind.split('_')[0], 'not a valid value')} (got {got})")
    return f"{name}: " + "; ".join(said)


_ARGUMENT_SAYS = {
    "int": "must be a whole number",
    "float": "must be a number",
    "string": "must be text",
    "bool": "must be true or false",
    "list": "must be a list",
    "dict": "must be an object",
    "datetime": "must be a date and time (ISO 8601)",
}


class _Server(MCPServer):
    async def call_tool(self, name, arguments, context=None):
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(_argument_sentence(name, exc.__cause__)) from exc.__cause__
            raise


def build_server() -> MCPServer:
    server = _Server(name="everlore-memory", instructions=INSTRUCTIONS)

    @server.tool(
        description="Record what happened: type is say, interact, observe, or a custom type with a "
        "template. Listeners and bystanders in `nearby` get memories of it too."
    )
    async def record_event(
        ctx: Context,
        type: str,
        actor: str,
        text: str,
        target: str = "",
        location: str = "",
        nearby: list[str] | None = None,
        time: str | None = None,
        importance: float | None = None,
        template: str = "",
    ) -> dict[str, Any]:
        def run():
            token = _token_for(ctx)
            event = _check(
                s.EventSerializer,
                {
                    "type": type,
                    "actor": actor,
                    "text": text,
                    "target": target,
                    "location": location,
                    "nearby": nearby or [],
                    "time": time,
                    "importance": importance,
                    "template": template,
                },
            )
            agent_events.events_allowance(world=token.world, token=token, count=1)
            created = agent_events.events_record(world=token.world, events=[agent_events.Event(**event)])
            return {"memories": len(created)}

        return await sync_to_async(_guarded, thread_sensitive=True)(
            run,
            type=type,
            actor=actor,
            text=text,
            target=target,
            location=location,
            nearby=nearby,
            time=time,
            template=template,
        )

    @server.tool(
        description="The memories that matter now for `agent`: ranked by partner, location, kind, "
        "importance, recency and (with `query`) meaning and words. Returns a ready-to-use "
        "text block and the memories with their scores. Options as the REST recall: "
        "`since` (ISO time), `kinds`, `cooldown_seconds`, `token_budget`."
    )
    async def recall(
        ctx: Context,
        agent: str,
        query: str = "",
        partner: str = "",
        location: str = "",
        limit: int = 3,
        token_budget: int | None = None,
        since: str | None = None,
        kinds: list[str] | None = None,
        cooldown_seconds: int | None = None,
    ) -> dict[str, Any]:
        def run():
            token = _token_for(ctx)
            data = _check(
                s.RecallInputSerializer,
                {
                    "query": query,
                    "partner": partner,
                    "location": location,
                    "limit": limit,
                    "token_budget": token_budget,
                    "since": since,
                    "cooldown_seconds": cooldown_seconds,
                    **({"kinds": kinds} if kinds is not None else {}),
                },
            )
            who = worlds.access_agent(world=token.world, external_id=_agent_name(agent))
            return agent_recall_asked.recall_asked(world=token.world, agent=who, data=data)

        return await sync_to_async(_guarded, thread_sensitive=True)(
            run, agent=agent, query=query, partner=partner, location=location, since=since, kinds=kinds
        )

    @server.tool(description="Keep a note in `agent`'s memory (pinned notes are never evicted).")
    async def remember(
        ctx: Context,
        agent: str,
        content: str,
        partner: str = "",
        location: str = "",
        importance: float = 0.7,
        pinned: bool = False,
    ) -> dict[str, Any]:
        def run():
            token = _token_for(ctx)
            name = _agent_name(agent)
            data = _check(
                s.RememberSerializer,
                {
                    "content": content,
                    "partner": partner,
                    "location": location,
                    "importance": importance,
                    "pinned": pinned,
                },
            )
            agent_events.events_allowance(world=token.world, token=token, count=1)
            who = worlds.agent_for_note(world=token.world, external_id=name)
            memory = agent_events.remember(world=token.world, agent=who, **data)
            return {"id": memory.pk, "kind": memory.kind}

        return await sync_to_async(_guarded, thread_sensitive=True)(
            run, agent=agent, content=content, partner=partner, location=location
        )

    @server.tool(
        description="Forget one of `agent`'s memories for good (by the `id` recall or remember gave): it "
        "and its fact keys are deleted, as REST's DELETE of the memory does."
    )
    async def forget(ctx: Context, agent: str, memory_id: int) -> dict[str, Any]:
        def run():
            token = _token_for(ctx)
            if isinstance(memory_id, bool) or not 0 < memory_id < 2**63:
                raise ToolInputError("memory_id: give the id of one of the agent's memories (a whole number from 1)")
            who = worlds.access_agent(world=token.world, external_id=_agent_name(agent))
            try:
                memory = worlds.access_agent_memory(agent=who, memory_id=memory_id)
            except NotFound:  # the argument to fix named; the same words whether the id is another's or none
                raise ToolInputError(
                    f"memory_id: not found: no memory {memory_id} among {agent!r}'s memories"
                ) from None
            agent_events.events_allowance(world=token.world, token=token, count=1)
            worlds.agent_memory_delete(memory=memory)
            return {"forgotten": memory_id}

        return await sync_to_async(_guarded, thread_sensitive=True)(run, agent=agent)

    return server


def asgi_app(*, port: int):
    hosts = [h for h in settings.ALLOWED_HOSTS if h != "*"]
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection="*" not in settings.ALLOWED_HOSTS,
        allowed_hosts=[f"{h}:{port}" for h in hosts] + hosts + [f"{h}:*" for h in hosts],
        allowed_origins=[f"http://{h}:{port}" for h in hosts] + list(settings.CSRF_TRUSTED_ORIGINS),
    )
    app = build_server().streamable_http_app(
        streamable_http_path="/mcp", stateless_http=True, json_response=True, transport_security=security
    )
    # Bodies bounded in size and time (a trickled body is a 408, as on the web port), no idle
    # server-sent stream to hold open, and the site's security headers on every answer.
    return SecurityHeaders(BodyGuard(_no_idle_streams(app)))


def _no_idle_streams(app):
    """GET /mcp would open a server-to-client stream that a stateless server never writes to, held
    open forever by anyone (no token needed). The transport allows a 405 instead: tools are
    called by POST, each answered in its own response."""

    async def guarded(scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "GET":
            body = json.dumps(
                {
                    "detail": "this server answers each POST in its response; it opens no "
                    "event stream (GET is not supported)"
                }
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 405,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"allow", b"POST, DELETE"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return None
        return await app(scope, receive, send)

    return guarded
