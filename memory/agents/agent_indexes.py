"""An HNSW index of its own for each agent with a large bank.

The shared HNSW indexes (migration 0008) hold every agent's memories, so finding
one agent's nearest reads about table / bank rows for each one kept: for an
agent holding a tenth of the table, ten. An agent past AGENT_OWN_INDEX_FROM
memories gets a partial index over its own rows, built concurrently by its
background pass (writes go on meanwhile); recall uses it once it is valid
(memory.agents.agent_recall). Indexes of agents that no longer exist are dropped by the
sweep. Postgres plans every query on the table against each partial index, so
the bound keeps them few: set it from the largest banks a site expects.
"""

from __future__ import annotations

import logging
import re

from django.conf import settings
from django.db import connection

log = logging.getLogger(__name__)

_NAME = re.compile(r"^agentmemory(?:key)?_hnsw_a(\d+)_(\d+)$")  # an agent's own: over its memories, over its keys
# Embedding sizes with a shared HNSW index (migration 0008); a vector of another size is scored exactly.
INDEXED_DIMS = (384, 768, 1024, 1536)
BUILD_MEMORY = "256MB"  # maintenance_work_mem for one build: a graph of ~200,000 memories of 384 dimensions


def own_index_name(*, agent_id: int, dims: int) -> str:
    return f"agentmemory_hnsw_a{int(agent_id)}_{int(dims)}"


def own_key_index_name(*, agent_id: int, dims: int) -> str:
    """The agent's own HNSW index over its memories' fact keys (memory.agents.fact_keys), built beside
    the one over its memories: the keys' shared index filtered to one agent reads as the memories' does."""
    return f"agentmemorykey_hnsw_a{int(agent_id)}_{int(dims)}"


def own_index_from() -> int:
    """Memories past which an agent gets an index of its own (settings.AGENT_RECALL)."""
    return settings.AGENT_RECALL["own_index_from"]


def agent_index_ensure(*, agent_id: int) -> str | None:
    """Build the agent's own HNSW index if its bank has passed the bound and it
    has none that is valid (a build that failed midway leaves an invalid one,
    dropped first). Runs outside any transaction (CREATE INDEX CONCURRENTLY);
    returns the index's name when the agent has one."""
    bound = own_index_from()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM (SELECT 1 FROM memory_agentmemory WHERE agent_id = %s LIMIT %s) c",
            [agent_id, bound + 1],
        )
        if cursor.fetchone()[0] <= bound:
            return None
        dims = _embedded_dims(cursor, agent_id)
        if dims not in INDEXED_DIMS:
            return None
        name = own_index_name(agent_id=agent_id, dims=dims)
        if not _ensure(cursor, name=name, table="memory_agentmemory", agent_id=agent_id, dims=dims):
            return None
        _ensure(
            cursor,
            name=own_key_index_name(agent_id=agent_id, dims=dims),
            table="memory_agentmemorykey",
            agent_id=agent_id,
            dims=dims,
        )
    return name


def _ensure(cursor, *, name: str, table: str, agent_id: int, dims: int) -> bool:
    """Build the partial HNSW index ``name`` over ``table``'s rows of the agent unless a valid one
    exists; returns whether one exists (False: it cannot be built inside a transaction)."""
    cursor.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [name])
    found = cursor.fetchone()
    if found and found[0]:
        return True
    if connection.in_atomic_block:  # (a concurrent build cannot run in a transaction: the next pass builds it)
        return False
    if found:
        cursor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
    log.info("building %s", name)
    # the graph built in memory is much faster to build than one spilled to disk: about 1 kB a row
    cursor.execute("SELECT set_config('maintenance_work_mem', %s, false)", [BUILD_MEMORY])
    try:
        cursor.execute(
            f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{name}" ON {table} '
            f"USING hnsw ((embedding::halfvec({dims})) halfvec_cosine_ops) "
            f"WHERE agent_id = {int(agent_id)} AND vector_dims(embedding) = {dims}"
        )
    finally:
        cursor.execute("RESET maintenance_work_mem")
    return True


def agent_indexes_prune() -> list[str]:
    """Drop the own indexes of agents that no longer exist, and of other sizes
    than the agent's vectors now have (its owner changed model). Returns their names."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexrelid::regclass::text FROM pg_index"
            " WHERE indrelid IN ('memory_agentmemory'::regclass, 'memory_agentmemorykey'::regclass)"
        )
        owned = [(name, int(m.group(1)), int(m.group(2))) for (name,) in cursor.fetchall() if (m := _NAME.match(name))]
        dropped = []
        for name, agent_id, dims in owned:
            if _embedded_dims(cursor, agent_id) != dims:
                cursor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
                dropped.append(name)
    return dropped


def _embedded_dims(cursor, agent_id: int) -> int | None:
    """The size of the agent's newest vector (None: it has none)."""
    cursor.execute(
        "SELECT vector_dims(embedding) FROM memory_agentmemory WHERE agent_id = %s "
        "AND embedding IS NOT NULL ORDER BY id DESC LIMIT 1",
        [agent_id],
    )
    row = cursor.fetchone()
    return row[0] if row else None
