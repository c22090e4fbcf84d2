"""An agent's background upkeep (run by the agent-pass task): embed new
memories with the owner's model, then fold runs of fine-grained memories into
summaries."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from pgvector import HalfVector

from config.errors import DomainError
from memory import embedder
from memory.agents import agent_indexes, fact_keys
from memory.agents.agent_events import memory_text, undated
from memory.models import Agent, AgentMemory, AgentMemoryKey
from memory.sentences import limit_words, most_telling, ranked, strip_preamble
from stories import providers
from stories.accounts import ai_settings
from stories.models import ProviderCall
from stories.providers import ProviderError

FINE_KINDS = ("say", "heard", "interaction", "witnessed", "observation", "custom")

RUN_WORDS_MAX = 80
RUN_INSTRUCTIONS = (
    "Fold these memories of {agent} into ONE memory: at most {words} words, past tense, third person, naming "
    "everyone. Keep facts, promises, trades and decisions; drop small talk. Answer with the memory only."
)


def run_summary(*, conn: providers.Connection | None, owner_id: int, agent: str, text: str) -> str:
    """One memory for a run of an agent's fine-grained memories (model, or offline:
    the run's most informative lines)."""
    if conn is None:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        kept = most_telling(lines, ranked(lines, names=0.0), words_max=RUN_WORDS_MAX)
        return limit_words(f"{len(lines)} moments: " + " ".join(kept), RUN_WORDS_MAX)
    messages = [
        {"role": "system", "content": RUN_INSTRUCTIONS.format(agent=agent, words=RUN_WORDS_MAX)},
        {"role": "user", "content": text},
    ]
    result = providers.complete(
        conn=conn,
        messages=messages,
        max_tokens=200,
        temperature=0.2,
        user_id=owner_id,
        purpose=ProviderCall.Purpose.AGENT,
    )
    return limit_words(strip_preamble(result.text.strip()), RUN_WORDS_MAX)


# ---------------------------------------------------------------------------- background: embed, consolidate


EMBED_BATCH = 256  # memories one pass embeds (a pass with more to do asks for another)


def agent_memories_embed(*, agent_id: int, batch: int = EMBED_BATCH) -> int:
    """Embed up to ``batch`` of the agent's memories that have no vector (a vector of another model than
    the owner's active one is cleared when the model changes: memory.embeddings.vectors_clear_other_models),
    found through an index of the pending ones (migration 0021), not by reading the bank."""
    agent = Agent.objects.select_related("world").get(pk=agent_id)
    owner = agent.world.owner_id
    pending = list(
        AgentMemory.objects.filter(agent=agent, embedding_model="").order_by("id").values_list("pk", "content")[:batch]
    )
    done = 0
    for start in range(0, len(pending), embedder.BATCH_MAX):
        chunk = pending[start : start + embedder.BATCH_MAX]
        name, vectors = embedder.embed(user_id=owner, texts=[undated(c) for _, c in chunk])
        for (pk, content), vector in zip(chunk, vectors):
            done += AgentMemory.objects.filter(pk=pk, content=content).update(
                embedding=HalfVector(vector), embedding_model=name
            )
    return done


# Marks the memories whose keys were made (those whose text is still what the keys were made from, and
# that had none: an edit meanwhile leaves the memory for the next pass) and stores their keys, in one
# statement.
_KEYS_STORE = """
WITH marked AS (
  UPDATE memory_agentmemory m SET keys_made = x.source
  FROM unnest(%(ids)s::bigint[], %(contents)s::text[], %(sources)s::text[]) AS x(id, content, source)
  WHERE m.id = x.id AND m.content = x.content AND m.keys_made = ''
  RETURNING m.id, m.agent_id
)
INSERT INTO memory_agentmemorykey (memory_id, agent_id, text, embedding_model)
SELECT marked.id, marked.agent_id, k.text, ''
FROM jsonb_to_recordset(%(keys)s::jsonb) AS k(memory bigint, text text) JOIN marked ON marked.id = k.memory
"""


def agent_keys_make(*, agent_id: int, batch: int = 256) -> tuple[int, bool]:
    """Make the fact keys (memory.agents.fact_keys) of up to ``batch`` of the agent's memories that have
    none yet: with the owner's model for background work when there is one (at most
    fact_keys.MODEL_MEMORIES_PER_RUN a pass), else, or when it fails, by the offline rules. Returns the
    memories done and whether more wait."""
    agent = Agent.objects.select_related("world").get(pk=agent_id)
    owner = agent.world.owner_id
    try:
        conn = ai_settings.connection_for_background(user_id=owner, purpose="summary")
    except DomainError:
        return 0, False  # the owner's key cannot be read: the model's work waits for a later pass
    if conn is not None:
        batch = min(batch, fact_keys.MODEL_MEMORIES_PER_RUN)
    pending = [
        fact_keys.Source(*row)
        for row in AgentMemory.objects.filter(agent=agent, keys_made="", consolidated_into__isnull=True)
        .order_by("id")
        .values_list("pk", "kind", "content", "actor", "partner", "location")[: batch + 1]
    ]
    more, pending = len(pending) > batch, pending[:batch]
    done = 0
    step = fact_keys.MODEL_BATCH if conn is not None else max(len(pending), 1)
    for start in range(0, len(pending), step):
        chunk = pending[start : start + step]
        made, source = {}, "offline"
        if conn is not None:
            try:
                made, source = fact_keys.model_keys(conn=conn, owner_id=owner, sources=chunk), "model"
            except (ProviderError, DomainError):
                conn = None  # the rules stand in for the rest of this pass
        keys = {m.id: made[m.id] if m.id in made else fact_keys.offline_keys(m) for m in chunk}
        with connection.cursor() as cursor:
            cursor.execute(
                _KEYS_STORE,
                {
                    "ids": [m.id for m in chunk],
                    "contents": [m.content for m in chunk],
                    "sources": [source] * len(chunk),
                    "keys": fact_keys.keys_json(keys),
                },
            )
        done += len(chunk)
    return done, more


def agent_keys_embed(*, agent_id: int, batch: int = 512) -> tuple[int, bool]:
    """Embed up to ``batch`` of the agent's fact keys that have no vector (as agent_memories_embed);
    returns the keys embedded and whether more wait."""
    agent = Agent.objects.select_related("world").get(pk=agent_id)
    owner = agent.world.owner_id
    pending = list(
        AgentMemoryKey.objects.filter(agent=agent, embedding_model="")
        .order_by("id")
        .values_list("pk", "text")[: batch + 1]
    )
    more, pending = len(pending) > batch, pending[:batch]
    for start in range(0, len(pending), embedder.BATCH_MAX):
        chunk = pending[start : start + embedder.BATCH_MAX]
        name, vectors = embedder.embed(user_id=owner, texts=[text for _, text in chunk])
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE memory_agentmemorykey k SET embedding = x.e::halfvec, embedding_model = %s"
                " FROM unnest(%s::bigint[], %s::text[]) AS x(id, e) WHERE k.id = x.id",
                [name, [pk for pk, _ in chunk], [HalfVector(v).to_text() for v in vectors]],
            )
    return len(pending), more


def agent_catch_up(*, agent_id: int) -> None:
    """Everything the agent's pass embeds and keys, to the end, short of consolidating (benches and
    tests that ingest a whole conversation and then ask about it)."""
    while agent_memories_embed(agent_id=agent_id):
        pass
    while agent_keys_make(agent_id=agent_id)[1]:
        pass
    while agent_keys_embed(agent_id=agent_id)[1]:
        pass


def consolidate(*, agent_id: int, now: datetime | None = None) -> int:
    """Fold runs of fine-grained memories (same partner, or same location when
    there is no partner, within the window) into one summary memory; the
    originals stay, linked, and leave recall. Returns summaries written."""
    conf = settings.AGENT_CONSOLIDATION
    now = now or timezone.now()
    agent = Agent.objects.select_related("world").get(pk=agent_id)
    candidates = list(
        AgentMemory.objects.filter(
            agent=agent,
            consolidated_into__isnull=True,
            pinned=False,
            kind__in=FINE_KINDS,
            occurred_at__lte=now - timedelta(minutes=conf["settle_minutes"]),
        ).order_by("partner", "location", "occurred_at")
    )
    groups: list[list[AgentMemory]] = []
    for memory in candidates:
        key = (memory.partner, "" if memory.partner else memory.location)
        last = groups[-1] if groups else None
        if (
            last
            and (last[0].partner, "" if last[0].partner else last[0].location) == key
            and memory.occurred_at - last[-1].occurred_at <= timedelta(minutes=conf["window_minutes"])
        ):
            last.append(memory)
        else:
            groups.append([memory])
    conn = ai_settings.connection_for_background(user_id=agent.world.owner_id, purpose="summary")
    written = 0
    for group in groups:
        if len(group) < conf["min_run"]:
            continue
        text = "\n".join(m.content for m in group)
        try:
            summary = run_summary(conn=conn, owner_id=agent.world.owner_id, agent=agent.external_id, text=text)
        except ProviderError:
            return written
        with transaction.atomic():
            ids = [m.pk for m in group]
            if AgentMemory.objects.filter(pk__in=ids, consolidated_into__isnull=True).count() != len(ids):
                continue  # another run folded some of them meanwhile
            first, last = group[0], group[-1]
            folded = AgentMemory.objects.create(
                agent=agent,
                world=agent.world,
                kind=AgentMemory.Kind.SUMMARY,
                partner=first.partner,
                actor=first.actor if len({m.actor for m in group}) == 1 else "",
                location=first.location if len({m.location for m in group}) == 1 else "",
                content=memory_text(summary),
                occurred_at=last.occurred_at,
                importance=max(m.importance for m in group),
                metadata={
                    "sources": len(group),
                    "from": first.occurred_at.isoformat(),
                    "to": last.occurred_at.isoformat(),
                },
            )
            AgentMemory.objects.filter(pk__in=ids).update(consolidated_into=folded)
            written += 1
    return written


def agent_upkeep_run(*, agent_id: int) -> dict:
    """The per-agent background pass: embed new memories, consolidate, make and embed
    the memories' fact keys, and build the agent's own HNSW index once its bank is large
    (memory.agents.agent_indexes). A failure of the owner's model, or a key that can no
    longer be read, leaves the work for the next pass. ``more``: work is left beyond
    this pass's batches (the task runs another)."""
    if not Agent.objects.filter(pk=agent_id).exists():
        return {"embedded": 0, "summaries": 0, "keyed": 0, "own_index": None, "more": False}
    try:
        embedded = agent_memories_embed(agent_id=agent_id)
    except DomainError:
        embedded = 0
    try:
        summaries = consolidate(agent_id=agent_id)
    except DomainError:
        summaries = 0
    keyed, more_keys = agent_keys_make(agent_id=agent_id)
    try:
        _, more_vectors = agent_keys_embed(agent_id=agent_id)
    except DomainError:
        more_vectors = False
    own_index = agent_indexes.agent_index_ensure(agent_id=agent_id)
    return {
        "embedded": embedded,
        "summaries": summaries,
        "keyed": keyed,
        "own_index": own_index,
        "more": more_keys or more_vectors or embedded >= EMBED_BATCH,
    }
