"""Worlds, their tokens and agents: access checks, the world token as a
credential (REST and MCP ask the same function), and what an owner changes
by hand (world settings, agents, one memory). Every write here is one service
that writes only the fields it changes."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from config import jobs
from config.errors import Conflict, DomainError, NotFound
from memory.agents import agent_words
from memory.models import Agent, AgentMemory, AgentMemoryKey, World, WorldToken

TOKEN_PREFIX = "wt_"

# ---------------------------------------------------------------------------- worlds and tokens


def access_world(*, user_id: int | None, token: WorldToken | None, world_id: int) -> World:
    """The world if the caller owns it or holds a live token of it; NotFound otherwise."""
    world = World.objects.filter(pk=world_id).first()
    if world is None:
        raise NotFound()
    if token is not None:
        if token.world_id != world.pk:
            raise NotFound()
    elif world.owner_id != user_id:
        raise NotFound()
    return world


def token_create(*, world: World, name: str = "") -> tuple[WorldToken, str]:
    """A new token; the raw value is returned once and never stored. A world holds at most
    WORLD_TOKENS_MAX live tokens (Conflict past it; the world's row is locked while counting, so
    two requests at once cannot both take the last place)."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        World.objects.select_for_update().filter(pk=world.pk).first()
        live = WorldToken.objects.filter(world=world, revoked_at__isnull=True).count()
        if live >= settings.WORLD_TOKENS_MAX:
            raise Conflict(
                f"this world already has {live} live tokens, its limit is {settings.WORLD_TOKENS_MAX}: "
                "revoke one (DELETE .../tokens/{id}/) before making another",
                code="world_tokens_full",
            )
        token = WorldToken.objects.create(world=world, name=name, key_hash=_hash(raw), prefix=raw[:10])
    return token, raw


def token_resolve(raw: str) -> WorldToken | None:
    """The live token for a raw value (None if unknown or revoked)."""
    token = (
        WorldToken.objects.select_related("world__owner").filter(key_hash=_hash(raw), revoked_at__isnull=True).first()
    )
    if token is not None and (token.last_used_at is None or timezone.now() - token.last_used_at > timedelta(minutes=1)):
        WorldToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    return token


class TokenRefused(DomainError):
    """A world token that may not act: unknown, revoked, or its owner suspended (401)."""

    status = 401
    code = "token_refused"


def token_authenticate(raw: str) -> WorldToken:
    """The live token for ``raw`` whose owner may act now (stories.accounts.auth.account_active,
    the same rule as logins, sessions and API tokens). REST and MCP both ask here.
    Raises TokenRefused with the reason."""
    from stories.accounts.auth import account_active

    token = token_resolve(raw) if raw.startswith(TOKEN_PREFIX) else None
    if token is None:
        raise TokenRefused("unknown or revoked world token")
    if not account_active(token.world.owner):
        raise TokenRefused("the world's owner account is suspended")
    return token


def _hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def access_agent(*, world: World, external_id: str) -> Agent:
    """The agent of ``world`` (itself access-checked) by its id; NotFound, saying so, when the world
    has none by that id yet (REST and MCP ask here)."""
    agent = Agent.objects.filter(world=world, external_id=external_id).first()
    if agent is None:
        raise NotFound(f"no agent {external_id!r} in this world yet; record an event first")
    return agent


# ---------------------------------------------------------------------------- what the owner changes


def world_create(*, owner_id: int, **fields) -> World:
    return World.objects.create(owner_id=owner_id, **fields)


def world_update(*, world: World, **fields) -> World:
    """Write only the fields given (a concurrent change of another field is kept)."""
    for name, value in fields.items():
        setattr(world, name, value)
    if fields:
        world.save(update_fields=list(fields))
    return world


def world_delete(*, world: World) -> None:
    """The world goes with its agents, tokens and memories. Its row is locked
    first, so an agent pass writing for it finishes before the delete gathers
    what to remove."""
    with transaction.atomic():
        World.objects.select_for_update().filter(pk=world.pk).exists()
        world.delete()


def token_revoke(*, world: World, token_id: int) -> None:
    """Revoke a live token of ``world`` (it stops working at once); NotFound for any other id."""
    if not WorldToken.objects.filter(pk=token_id, world=world, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    ):
        raise NotFound()


def agent_for_note(*, world: World, external_id: str) -> Agent:
    """The agent, created on first use (an agent may write a note before any event names it)."""
    agent, _ = Agent.objects.get_or_create(world=world, external_id=external_id, defaults={"display_name": external_id})
    return agent


def agent_delete(*, agent: Agent) -> None:
    """The agent goes with all its memories."""
    agent.delete()


def access_agent_memory(*, agent: Agent, memory_id: int) -> AgentMemory:
    """One memory of ``agent``; NotFound for an id that is not one of its memories (another agent's or
    another world's reads as none, with the same answer as an id no one has)."""
    memory = AgentMemory.objects.filter(pk=memory_id, agent=agent).first()
    if memory is None:
        raise NotFound()
    return memory


def agent_memory_update(*, memory: AgentMemory, **fields) -> AgentMemory:
    """Change a memory's fields (content, pinned, importance, ...); writes only
    those. New content clears the vector and the fact keys, and asks for the
    agent's pass, which embeds it and makes its keys again."""
    if "content" in fields:
        fields.update(embedding=None, embedding_model="", keys_made="")
    for name, value in fields.items():
        setattr(memory, name, value)
    with transaction.atomic():
        if "content" in fields:
            AgentMemoryKey.objects.filter(memory=memory).delete()
        if fields:
            memory.save(update_fields=[*fields, "updated_at"])
    if "content" in fields:
        agent_words.forget(agent_id=memory.agent_id)
        jobs.agent_pass_after_commit(agent_id=memory.agent_id)
    return memory


def agent_memory_delete(*, memory: AgentMemory) -> None:
    memory.delete()
    agent_words.forget(agent_id=memory.agent_id)


def world_memories_delete(*, world: World) -> None:
    """Every agent memory of the world goes (moderation); agents and tokens stay."""
    AgentMemory.objects.filter(world=world).delete()
    agent_words.forget(agent__world=world)
