"""A world as JSON, streamed in pieces (a world may hold millions of memories)."""

from __future__ import annotations

from memory.models import Agent, AgentMemory, AgentMemoryKey, World

# ---------------------------------------------------------------------------- export

_EXPORT_FIELDS = (
    "id",
    "kind",
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
)


def world_export_chunks(*, world: World, chunk: int = 2000):
    """The world as JSON text, in pieces: agents in order, each with its memories
    (oldest first) and each memory with its fact keys. Three queries in all (agents,
    then server-side cursors over the memories and over their keys, in the same
    order), and at most ``chunk`` rows of each held at once."""
    from django.core.serializers.json import DjangoJSONEncoder

    encode = DjangoJSONEncoder(ensure_ascii=False).encode
    yield '{"world": ' + encode({"id": world.pk, "name": world.name}) + ', "agents": ['
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
