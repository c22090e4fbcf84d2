"""BM25's word statistics for a large agent bank (the candidate path of
memory.agents.agent_recall), stored per agent in the database so that every
process ranks one query alike: a uniform sample of the bank's memories (of the
kinds asked), its size, its mean length and, per word, in how many of its
memories the word is.

A stored sample serves while the bank holds within ``STALE_SHARE`` of the
memories it held when the sample was taken, for ``KEPT_SECONDS`` at most; then
the next recall takes it anew, one process at a time (an advisory lock tried,
never waited for: a recall that finds another taking it ranks with the stored
one, or, when there is none yet, with a sample it reads and does not store).
"""

from __future__ import annotations

from dataclasses import dataclass

from config import advisory_locks
from memory.models import AgentWordSample

STALE_SHARE = 0.02
KEPT_SECONDS = 300
LOCK_SPACE = advisory_locks.AGENT_WORD_SAMPLE

# The stored sample of the kinds asked and its counts of the query's words, in the query words' order;
# read by memory.agents.agent_recall_sql.PREPARE_SQL in the recall's first statement.
STORED_CTE = """
stored AS (
  SELECT w.id, w.held, w.n, w.avgdl, extract(epoch FROM now() - w.taken_at)::float8 AS age
  FROM memory_agentwordsample w
  WHERE w.agent_id = %(agent)s AND w.kinds = %(kinds_key)s AND w.sample_size = %(stats_sample)s
), stored_dfs AS (
  SELECT coalesce(array_agg(coalesce(c.df, 0) ORDER BY qt.t), '{}') AS dfs
  FROM qt LEFT JOIN memory_agentwordcount c ON c.sample_id = (SELECT id FROM stored) AND c.term = qt.t
)"""

_SAMPLE = """s AS (
  SELECT tsvector_to_array(m.search) AS words, greatest(length(m.search), 1)::float8 AS dl
  FROM memory_agentmemory m
  WHERE m.agent_id = %(agent)s AND m.consolidated_into_id IS NULL AND m.kind = ANY(%(kinds)s)
  ORDER BY hashint8(m.id) LIMIT %(stats_sample)s
)"""

_DFS = """(SELECT coalesce(array_agg((SELECT count(*) FROM s WHERE q.t = ANY(s.words)) ORDER BY q.i), '{}')
          FROM unnest(%(terms)s::text[]) WITH ORDINALITY AS q(t, i))"""

_READ = f"WITH {_SAMPLE} SELECT count(*), coalesce(avg(dl), 1.0), {_DFS} FROM s"

_FORGET = """
DELETE FROM memory_agentwordcount c USING memory_agentwordsample w
WHERE c.sample_id = w.id AND w.agent_id = %(agent)s AND w.kinds = %(kinds_key)s AND w.sample_size = %(stats_sample)s
"""

_TAKE = f"""
WITH {_SAMPLE}, w AS (
  INSERT INTO memory_agentwordsample (agent_id, kinds, sample_size, held, n, avgdl, taken_at)
  SELECT %(agent)s, %(kinds_key)s, %(stats_sample)s, %(held)s, count(*), coalesce(avg(dl), 1.0), now() FROM s
  ON CONFLICT (agent_id, kinds, sample_size)
  DO UPDATE SET held = EXCLUDED.held, n = EXCLUDED.n, avgdl = EXCLUDED.avgdl, taken_at = EXCLUDED.taken_at
  RETURNING id, n, avgdl
), counted AS (
  INSERT INTO memory_agentwordcount (sample_id, term, df)
  SELECT w.id, t, count(*) FROM w, s, unnest(s.words) AS t GROUP BY w.id, t
)
SELECT w.n, w.avgdl, {_DFS} FROM w
"""


@dataclass(frozen=True)
class WordStats:
    """How many memories the statistics count, their mean length in words, and in how many of them each
    of the query's words is (in the query words' order)."""

    n: int
    avgdl: float
    dfs: list[int]


def kinds_key(kinds: list[str]) -> str:
    return ",".join(sorted(set(kinds)))


def fresh(stored: dict | None, held: int) -> bool:
    return (
        stored is not None
        and abs(held - stored["held"]) <= STALE_SHARE * stored["held"]
        and stored["age"] <= KEPT_SECONDS
    )


def word_stats(
    cursor, params: dict, *, held: int, terms: list[str], stored: dict | None, stored_dfs: list[int], store: bool = True
) -> WordStats:
    """The statistics a recall ranks with: the stored ones while fresh, else taken anew and stored
    (``store`` False: read and not stored, as an explanation that changes nothing wants). Call inside
    the recall's transaction: what is stored commits with it."""
    if fresh(stored, held):
        return WordStats(stored["n"], stored["avgdl"], [int(d) for d in stored_dfs])
    args = {**params, "held": held, "terms": terms}
    if store:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", [LOCK_SPACE, params["agent"]])
        ((mine,),) = cursor.fetchall()
        if mine:
            cursor.execute(_FORGET, args)
            cursor.execute(_TAKE, args)
            n, avgdl, dfs = cursor.fetchone()
            return WordStats(n, avgdl, list(dfs))
        if stored is not None:  # another recall is taking it: the stored one, a little stale, serves
            return WordStats(stored["n"], stored["avgdl"], [int(d) for d in stored_dfs])
    cursor.execute(_READ, args)
    n, avgdl, dfs = cursor.fetchone()
    return WordStats(n, avgdl, list(dfs))


def forget(**where) -> None:
    """The stored statistics of the agents ``where`` names (``agent_id=`` or ``agent__world=``) go: their
    words counted memories that were removed or rewritten (the next large recall samples anew)."""
    AgentWordSample.objects.filter(**where).delete()
