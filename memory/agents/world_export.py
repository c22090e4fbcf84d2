"""A world as JSON, both ways: its export, streamed in pieces (a world may hold millions of
memories), and an export read back into a new world (one request, bounded)."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction

from config import jobs
from config.errors import InvalidRequest
from memory.models import Agent, AgentMemory, AgentMemoryKey, World

# ---------------------------------------------------------------------------- export


class _Encoder(DjangoJSONEncoder):
    """Django's JSON, but times to the microsecond (Django cuts them to the millisecond, so memories of
    the same second could come back from an import in another order)."""

    def default(self, o):
        if isinstance(o, datetime):
            return o.isoformat().replace("+00:00", "Z")
        return super().default(o)


_EXPORT_FIELDS = (
    "id",
    "kind",
    "actor",
    "partner",
    "location",
    "content",
    "metadata",
    "importance",
    "pinned",
    "occurred_at",
    "created_at",
    "last_retrieved_at",
    "retrieval_count",
    "consolidated_into_id",
    "keys_made",
)


def world_export_chunks(*, world: World, chunk: int = 2000):
    """The world as JSON text, in pieces: agents in order, each with its memories
    (oldest first) and each memory with its fact keys. Three queries in all (agents,
    then server-side cursors over the memories and over their keys, in the same
    order), and at most ``chunk`` rows of each held at once."""
    encode = _Encoder(ensure_ascii=False).encode
    yield (
        '{"world": '
        + encode({"id": world.pk, "name": world.name, "agent_capacity": world.agent_capacity})
        + ', "agents": ['
    )
    agents = list(
        Agent.objects.filter(world=world).order_by("external_id", "id").values_list("id", "external_id", "display_name")
    )
    memories = (
        AgentMemory.objects.filter(world=world)
        .order_by("agent__external_id", "agent_id", "occurred_at", "id")
        .values_list("agent_id", *_EXPORT_FIELDS)
        .iterator(chunk_size=chunk)
    )
    keys = (
        AgentMemoryKey.objects.filter(memory__world=world)
        .order_by("memory__agent__external_id", "memory__agent_id", "memory__occurred_at", "memory_id", "id")
        .values_list("memory_id", "text")
        .iterator(chunk_size=chunk)
    )
    key = next(keys, None)
    pending = next(memories, None)
    for n, (agent_id, external_id, display_name) in enumerate(agents):
        head = encode({"external_id": external_id, "display_name": display_name})[:-1]
        parts = [("," if n else "") + head + ', "memories": [']
        first = True
        while pending is not None and pending[0] == agent_id:
            row = dict(zip(_EXPORT_FIELDS, pending[1:]))
            row["consolidated_into"] = row.pop("consolidated_into_id")
            row["keys"] = []
            while key is not None and key[0] == row["id"]:
                row["keys"].append(key[1])
                key = next(keys, None)
            parts.append(("" if first else ",") + encode(row))
            first = False
            if len(parts) >= 200:
                yield "".join(parts)
                parts = []
            pending = next(memories, None)
        parts.append("]}")
        yield "".join(parts)
    yield "]}"


# ---------------------------------------------------------------------------- import


def world_import(*, owner_id: int, document: dict) -> tuple[World, dict]:
    """A new world of ``owner_id``'s from ``document`` (a world's export, validated by
    memory.agents.agent_serializers.WorldImportSerializer): its agents, their memories with their
    links (consolidated_into), retrieval history and fact keys, in one transaction. Vectors are not
    in an export: the agents' passes embed the memories and keys (and make the keys of a memory that
    has none yet). InvalidRequest, with nothing stored, when an agent holds more memories than the
    world's capacity or the world more than WORLD_MEMORIES_MAX. Returns the world and what it holds."""
    head = document["world"]
    capacity = head.get("agent_capacity") or World._meta.get_field("agent_capacity").default
    total = sum(len(a["memories"]) for a in document["agents"])
    if total > settings.WORLD_MEMORIES_MAX:
        raise InvalidRequest(
            f"this world holds {total:,} memories, over a world's limit of {settings.WORLD_MEMORIES_MAX:,}"
        )
    for agent in document["agents"]:
        if len(agent["memories"]) > capacity:
            raise InvalidRequest(
                f"agent {agent['external_id']} holds {len(agent['memories']):,} memories, over the world's "
                f"agent_capacity of {capacity:,}: raise world.agent_capacity in the document"
            )
    with transaction.atomic():
        world = World.objects.create(owner_id=owner_id, name=head["name"], agent_capacity=capacity)
        agents = Agent.objects.bulk_create(
            [
                Agent(world=world, external_id=a["external_id"], display_name=a["display_name"] or a["external_id"])
                for a in document["agents"]
            ]
        )
        rows = [(agent, m) for agent, a in zip(agents, document["agents"]) for m in a["memories"]]
        memories = AgentMemory.objects.bulk_create(
            [
                AgentMemory(
                    agent=agent,
                    world=world,
                    kind=m["kind"],
                    actor=m["actor"],
                    partner=m["partner"],
                    location=m["location"],
                    content=m["content"],
                    metadata=m["metadata"],
                    importance=m["importance"],
                    pinned=m["pinned"],
                    occurred_at=m["occurred_at"],
                    last_retrieved_at=m["last_retrieved_at"],
                    retrieval_count=m["retrieval_count"],
                    # keys given are kept as made; a memory that says none were made gets them from its pass
                    keys_made=m["keys_made"] or ("offline" if m["keys"] else ""),
                )
                for agent, m in rows
            ]
        )
        made = {m["id"]: memory for (_, m), memory in zip(rows, memories)}
        folded = []
        for (_, m), memory in zip(rows, memories):
            if m["consolidated_into"] is not None:
                memory.consolidated_into = made[m["consolidated_into"]]
                folded.append(memory)
        AgentMemory.objects.bulk_update(folded, ["consolidated_into"], batch_size=2000)
        keys = AgentMemoryKey.objects.bulk_create(
            [
                AgentMemoryKey(memory=memory, agent=memory.agent, text=text)
                for (_, m), memory in zip(rows, memories)
                for text in m["keys"]
            ],
            batch_size=5000,
        )
        for agent in agents:
            jobs.agent_pass_after_commit(agent_id=agent.pk)  # embeds the memories and keys
    return world, {"agents": len(agents), "memories": len(memories), "keys": len(keys)}
