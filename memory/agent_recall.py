"""Agent recall: one Postgres query scores an agent's memories by partner,
place, importance, recency, meaning (pgvector) and words (BM25), with the
weights it is tuned with; then dedupe, cooldown and a token budget."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from pgvector import HalfVector

from memory import agent_indexes, embedder, when
from memory.models import Agent, AgentMemory, World
from memory.vectors import vector_cursor
from stories import tokens as token_counter

RECALL_LIMIT_MAX = 50
CANDIDATES_PER_RESULT = 4  # ranked rows fetched per requested memory, for dedupe and the token budget

# A memory's score adds these parts (README: "Agent memory"); tuned with
# bench/locomo.py. settings.AGENT_RECALL holds the operator's knobs and may
# override any of them.
WEIGHTS = {
    "partner": 0.35,  # the memory is about the partner asked for
    "location": 0.15,  # ...happened at the location asked for
    "importance": 0.2,  # x importance (0..1)
    "recency": 0.3,  # x 0.5 ** (age / half-life)
    "recency_half_life_hours": 72,
    # with a query: reciprocal-rank fusion of the pgvector cosine ranking and the
    # BM25 full-text ranking (computed in SQL over the agent's memories), each
    # worth (rrf_k + 1) / (rrf_k + rank): 1 at rank 1
    "vector": 1.0,
    "text": 1.0,
    "rrf_k": 5,
    "bm25_k1": 1.2,
    "bm25_b": 0.75,
    # a word in more than this share of the agent's memories counts for nothing (the classic BM25
    # weight of such a word is negative); with it, RRF would rank memories by the noise of its weight
    "bm25_common_share": 0.5,
    # a memory whose actor the query names (by agent id or display name)
    "named_actor": 0.3,
    # share of the match of the memory just before and just after (within the window)
    "context": 0.25,
    "context_window_minutes": 30,
    # with a query, kind, importance and recency count this much (meaning and words lead)
    "prior_scale_with_query": 0.25,
    # the agent's own acts above what it heard or witnessed
    "kind_weights": {"say": 0.15, "interaction": 0.15, "note": 0.15, "summary": 0.12, "custom": 0.1,
                     "observation": 0.08, "heard": 0.05, "witnessed": 0.0},
    "dedupe_jaccard": 0.85,  # word overlap above which two memories count as the same
    # time (memory.when): a question asking when ranks up memories that say when (a date, "yesterday",
    # "two years ago"); a query naming a period ("in June", "last week") ranks up memories that
    # happened in it (their event time)
    "time_words": 0.6,
    "period": 0.3,
    # a second hop: the memories nearest the centre of the best first matches (their meaning), fused by
    # reciprocal rank like the first; finds the other scattered mentions of a subject ("which cities...").
    # Off: on LoCoMo it did not generalize (cross-validation chose 0 in four folds of five); an operator
    # whose agents ask for lists may turn it on (AGENT_RECALL["hop"])
    "hop": 0.0,
    "hop_seeds": 1,
    # The candidate path (a bank of more than settings.AGENT_RECALL["exact_up_to"] memories): how many
    # rows each arm reads (_CANDIDATES).
    "vector_candidates": 40,  # nearest by meaning
    "text_scan": 400,  # rows the full-text index gives, of which BM25 keeps...
    "text_candidates": 100,
    "newest_candidates": 30,  # newest, with the partner, at the location, in the period (each)
    "stats_sample": 500,  # newest memories whose word counts stand for the bank's
    "ef_search": 40,  # pgvector's hnsw.ef_search
    # measured (bench/agent_recall.py, 384 dimensions): a row the filtered HNSW scan visits costs about as
    # much as 60 of the agent's rows read through its index and compared by distance (0: always the index)
    "hnsw_row_cost": 60,
}

# Embedding sizes with an HNSW index (migration 0008); a vector of another size is scored exactly.
INDEXED_DIMS = (384, 768, 1024, 1536)


def recall_conf() -> dict:
    """The weights and the operator's knobs (settings.AGENT_RECALL wins)."""
    return {**WEIGHTS, **settings.AGENT_RECALL}


# ---------------------------------------------------------------------------- recall


@dataclass
class Recalled:
    id: int
    content: str
    kind: str
    partner: str
    location: str
    occurred_at: datetime
    score: float
    parts: dict


# Hybrid search, in one query over the agent's candidates:
# - the full-text side is BM25 computed in SQL (a word counts once per memory:
#   memories are short), with document frequencies over this agent's
#   memories, so a word every memory holds, like the partner's name, counts
#   for nothing;
# - the vector side is pgvector cosine; the two rankings are fused by
#   reciprocal rank, so neither scale dominates;
# - a memory whose actor the query names ranks up ("what did Ann say ...");
# - a line of a conversation (said or heard) takes a share of the match of
#   the lines just before and after it with the same partner, within the
#   context window: an answer is found through the question it answers;
# - partner, location, kind, importance and recency add their weights.
# The memories a recall considers: those of the agent in the window, of the kinds asked, not folded
# into a summary, and not cooling down (pinned ones never cool down).
_CONSIDERED = """m.agent_id = %(agent)s AND m.consolidated_into_id IS NULL AND m.occurred_at >= %(since)s
    AND m.kind = ANY(%(kinds)s) AND (m.pinned OR m.last_retrieved_at IS NULL OR m.last_retrieved_at < %(cooled)s)"""

_RECALL_SQL = """
WITH q AS (
  SELECT replace(plainto_tsquery('english', %(query)s)::text, '&', '|')::tsquery AS ts,
         tsvector_to_array(to_tsvector('english', %(query)s)) AS terms
), terms AS (
  SELECT t, quote_literal(t)::tsquery AS tq FROM q, unnest(q.terms) AS t
), kw AS (
  SELECT key AS kind, value::float8 AS weight FROM jsonb_each_text(%(kind_weights)s::jsonb)
), named AS MATERIALIZED (
  SELECT coalesce(array_agg(external_id), '{{}}') AS ids FROM memory_agent
  WHERE world_id = %(world)s AND (lower(external_id) = ANY(%(words)s) OR lower(display_name) = ANY(%(words)s))
){candidates}, base AS (
  SELECT m.id, m.kind, m.partner, m.location, m.occurred_at, m.importance, m.actor, m.search,
    CASE WHEN %(has_vector)s AND m.embedding_model = %(model)s
         THEN 1 - (m.embedding <=> %(vector)s::halfvec) END AS sim,
    %(has_text)s AND q.ts::text <> '' AND m.search @@ q.ts AS matches,
    greatest(length(m.search), 1)::float8 AS dl,
    -- (the date every memory starts with is the event time, not something the memory says)
    CASE WHEN %(asks_when)s AND regexp_replace(m.content, '^\\([^)]*\\) ', '') ~* %(time_re)s THEN 1 ELSE 0 END
      AS says_when,
    CASE WHEN %(has_period)s
      AND (cardinality(%(months)s::int[]) = 0 OR extract(month FROM m.occurred_at)::int = ANY(%(months)s::int[]))
      AND (cardinality(%(years)s::int[]) = 0 OR extract(year FROM m.occurred_at)::int = ANY(%(years)s::int[]))
      AND (%(period_start)s::timestamptz IS NULL OR m.occurred_at >= %(period_start)s::timestamptz)
      AND (%(period_end)s::timestamptz IS NULL OR m.occurred_at < %(period_end)s::timestamptz)
    THEN 1 ELSE 0 END AS in_period,
    CASE WHEN %(hop)s AND %(has_vector)s AND m.embedding_model = %(model)s THEN m.embedding END AS embedding
  FROM memory_agentmemory m, q
  WHERE {considered}{restrict}
), {stats}, {df}, weights AS MATERIALIZED (
  -- BM25 with every word counted once per memory (memories are short): a memory's weight is the sum
  -- of its query words' idf, scaled by its length
  SELECT terms.tq, ln(1 + (s.n - df.df + 0.5) / (df.df + 0.5)) AS idf
  FROM terms JOIN df USING (t), stats s
  WHERE df.df <= greatest(%(common)s * s.n, 1)  -- a word most memories hold tells them apart by noise only
), texted AS (
  SELECT base.*, CASE WHEN base.matches THEN coalesce(
      (SELECT sum(w.idf) FROM weights w WHERE base.search @@ w.tq) * (%(k1)s + 1)
      / (1 + %(k1)s * (1 - %(b)s + %(b)s * base.dl / s.avgdl)), 0) ELSE 0 END AS tr
  FROM base, stats s
), ranked AS (
  SELECT id, kind, partner, location, occurred_at, importance, actor, sim, says_when, in_period, embedding, tr,
    rank() OVER (ORDER BY sim DESC NULLS LAST) AS r_vector,
    rank() OVER (ORDER BY tr DESC) AS r_text
  FROM texted
), fused AS (
  SELECT ranked.*,
    CASE WHEN sim IS NOT NULL THEN %(w_vector)s * (%(rrf_k)s + 1) / (%(rrf_k)s + r_vector) ELSE 0 END AS s_vector,
    CASE WHEN tr > 0 THEN %(w_text)s * (%(rrf_k)s + 1) / (%(rrf_k)s + r_text) ELSE 0 END AS s_text,
    CASE WHEN actor <> '' AND actor = ANY(named.ids) THEN %(w_named)s ELSE 0 END AS s_named
  FROM ranked, named
), seeds AS (
  SELECT embedding FROM fused WHERE embedding IS NOT NULL AND s_vector + s_text > 0
  ORDER BY s_vector + s_text + s_named DESC, id LIMIT %(hop_seeds)s
), hop AS MATERIALIZED (
  SELECT avg(embedding::vector)::halfvec AS v FROM seeds
), hopped AS (
  SELECT fused.*, CASE WHEN fused.embedding IS NOT NULL AND hop.v IS NOT NULL
                       THEN rank() OVER (ORDER BY fused.embedding <=> hop.v) END AS r_hop
  FROM fused, hop
), neighbours AS (
  SELECT hopped.*,
    lag(occurred_at) OVER w AS prev_at, lag(s_vector + s_text + s_named) OVER w AS prev_match,
    lead(occurred_at) OVER w AS next_at, lead(s_vector + s_text + s_named) OVER w AS next_match
  FROM hopped WINDOW w AS (PARTITION BY partner, kind IN ('say', 'heard') ORDER BY occurred_at, id)
), scored AS (
  SELECT id, n.kind, partner, location, occurred_at, s_vector, s_text, s_named,
    CASE WHEN %(partner)s <> '' AND partner = %(partner)s THEN %(w_partner)s ELSE 0 END AS s_partner,
    CASE WHEN %(location)s <> '' AND location = %(location)s THEN %(w_location)s ELSE 0 END AS s_location,
    %(prior)s * COALESCE(kw.weight, 0) AS s_kind,
    %(prior)s * %(w_importance)s * importance AS s_importance,
    %(prior)s * %(w_recency)s * power(0.5, greatest(extract(epoch FROM (%(now)s - occurred_at)), 0) / %(half_life)s)
      AS s_recency,
    CASE WHEN n.kind IN ('say', 'heard') THEN
      %(w_context)s * (CASE WHEN prev_at >= occurred_at - %(context_window)s THEN prev_match ELSE 0 END
                       + CASE WHEN next_at <= occurred_at + %(context_window)s THEN next_match ELSE 0 END)
    ELSE 0 END AS s_context,
    %(w_time_words)s * says_when + %(w_period)s * in_period AS s_time,
    CASE WHEN r_hop IS NOT NULL THEN %(w_hop)s * (%(rrf_k)s + 1) / (%(rrf_k)s + r_hop) ELSE 0 END AS s_hop
  FROM neighbours n LEFT JOIN kw ON kw.kind = n.kind
), top AS (
  SELECT *, s_partner + s_location + s_kind + s_importance + s_recency + s_vector + s_text + s_named + s_context
            + s_time + s_hop AS total
  FROM scored ORDER BY total DESC, occurred_at DESC, id LIMIT %(candidates)s
)
SELECT top.id, m.content, top.kind, top.partner, top.location, top.occurred_at,
       s_partner, s_location, s_kind, s_importance, s_recency, s_vector, s_text, s_named, s_context, s_time, s_hop
FROM top JOIN memory_agentmemory m ON m.id = top.id
ORDER BY total DESC, top.occurred_at DESC, top.id
"""

# Exact scoring: every memory considered is scored, and BM25's statistics are theirs.
_EXACT = {
    "candidates": "", "restrict": "",
    "stats": "stats AS (SELECT count(*)::float8 AS n, greatest(avg(dl)::float8, 1) AS avgdl FROM base)",
    "df": "df AS (SELECT t, count(*)::float8 AS df FROM base b, terms WHERE b.matches AND b.search @@ terms.tq"
          " GROUP BY t)",
}

# The candidate path, for large banks: the same scoring over the memories that could rank, fetched
# from indexes; each arm reads a bounded number of rows, whatever the bank holds:
# - the nearest by meaning: through the agent's own HNSW index when it has one (memory.agent_indexes),
#   else the shared one of the vector's size (pgvector's iterative scan, filtered to the agent), or,
#   for a bank too small a share of the table for that filter to be cheap, by distance over the bank
#   itself ({vector_order});
# - the best by BM25 among the first rows the full-text (GIN) index gives for the words that tell
#   memories apart, with the statistics of the agent's newest memories standing for the bank's
#   (the first statement computes them);
# - the newest, the newest with the partner, at the location, and in the period the query names;
# - for the context share, the lines just before and after each conversational candidate.
_CANDIDATES = """, sample_stats AS (
  SELECT %(sample_n)s::float8 AS n, %(sample_avgdl)s::float8 AS avgdl
), sample_df AS (
  SELECT t, df FROM unnest(%(sample_terms)s::text[], %(sample_dfs)s::float8[]) AS x(t, df)
), vec AS MATERIALIZED (
  SELECT m.id FROM memory_agentmemory m
  WHERE %(has_vector)s AND {considered_vec} AND vector_dims(m.embedding) = {dims} AND m.embedding_model = %(model)s
  ORDER BY {vector_order} LIMIT %(vector_candidates)s
), txt AS MATERIALIZED (
  SELECT m.id, m.search, greatest(length(m.search), 1)::float8 AS dl FROM memory_agentmemory m
  WHERE %(has_text)s AND m.search @@ %(telling)s::tsquery AND {considered} LIMIT %(text_scan)s
), txt_best AS (
  SELECT txt.id FROM txt, terms JOIN sample_df USING (t), sample_stats s
  WHERE txt.search @@ terms.tq AND sample_df.df <= greatest(%(common)s * s.n, 1)
  GROUP BY txt.id, txt.dl, s.avgdl
  ORDER BY sum(ln(1 + (s.n - sample_df.df + 0.5) / (sample_df.df + 0.5)))
           / (1 + %(k1)s * (1 - %(b)s + %(b)s * txt.dl / s.avgdl)) DESC, txt.id
  LIMIT %(text_candidates)s
), newest AS (
  (SELECT m.id FROM memory_agentmemory m WHERE {considered}
   ORDER BY m.occurred_at DESC LIMIT %(newest_candidates)s)
  UNION ALL
  (SELECT m.id FROM memory_agentmemory m WHERE %(partner)s <> '' AND m.partner = %(partner)s AND {considered}
   ORDER BY m.occurred_at DESC LIMIT %(newest_candidates)s)
  UNION ALL
  (SELECT m.id FROM memory_agentmemory m WHERE %(location)s <> '' AND m.location = %(location)s AND {considered}
   ORDER BY m.occurred_at DESC LIMIT %(newest_candidates)s)
  UNION ALL
  (SELECT m.id FROM memory_agentmemory m WHERE %(period_start)s::timestamptz IS NOT NULL
     AND m.occurred_at >= %(period_start)s::timestamptz
     AND m.occurred_at < coalesce(%(period_end)s::timestamptz, 'infinity') AND {considered}
   ORDER BY m.occurred_at DESC LIMIT %(newest_candidates)s)
), cand AS (
  SELECT id FROM vec UNION SELECT id FROM txt_best UNION SELECT id FROM newest
), around AS (
  SELECT x.id FROM memory_agentmemory c JOIN cand USING (id), LATERAL (
    (SELECT m.id FROM memory_agentmemory m
     WHERE m.partner = c.partner AND m.kind IN ('say', 'heard') AND {considered}
       AND m.occurred_at >= c.occurred_at - %(context_window)s AND (m.occurred_at, m.id) < (c.occurred_at, c.id)
     ORDER BY m.occurred_at DESC, m.id DESC LIMIT 1)
    UNION ALL
    (SELECT m.id FROM memory_agentmemory m
     WHERE m.partner = c.partner AND m.kind IN ('say', 'heard') AND {considered}
       AND m.occurred_at <= c.occurred_at + %(context_window)s AND (m.occurred_at, m.id) > (c.occurred_at, c.id)
     ORDER BY m.occurred_at, m.id LIMIT 1)
  ) x
  WHERE %(w_context)s > 0 AND c.kind IN ('say', 'heard')
)"""


def _recall_sql(*, candidates: bool, dims: int, through_index: bool, own_index_of: int | None = None) -> str:
    parts = dict(_EXACT)
    if candidates:
        if own_index_of is not None:  # the agent's own index (memory.agent_indexes): its id, as its predicate says
            vector_order, considered_vec = (f"m.embedding::halfvec({dims}) <=> %(vector)s::halfvec({dims})",
                                            _CONSIDERED.replace("m.agent_id = %(agent)s",
                                                                f"m.agent_id = {int(own_index_of)}", 1))
        elif through_index:  # (agent_id + 0: the agent's rows are filtered in the HNSW scan, not fetched whole)
            vector_order, considered_vec = (f"m.embedding::halfvec({dims}) <=> %(vector)s::halfvec({dims})",
                                            _CONSIDERED.replace("m.agent_id =", "m.agent_id + 0 =", 1))
        else:
            vector_order, considered_vec = "m.embedding <=> %(vector)s::halfvec", _CONSIDERED
        parts = {
            "candidates": _CANDIDATES.format(considered=_CONSIDERED, considered_vec=considered_vec,
                                             vector_order=vector_order, dims=int(dims)),
            "restrict": "\n    AND m.id = ANY(ARRAY(SELECT id FROM cand UNION SELECT id FROM around))",
            "stats": "stats AS (SELECT * FROM sample_stats)",
            "df": "df AS (SELECT t, df FROM sample_df)",
        }
    return _RECALL_SQL.format(considered=_CONSIDERED, **parts)


# The first statement of a recall, in its transaction: how many memories the agent holds (counted up
# to the larger of the bounds below), BM25's statistics from its newest memories when the bank takes
# the candidate path, and this transaction's planner and pgvector settings. Through the HNSW index,
# finding the agent's k nearest reads about k x table / bank rows; over the bank, the bank: the index
# is the cheaper way past sqrt(hnsw_row_cost x k x table) memories (the "through" bound).
_PREPARE_SQL = """
WITH t AS (
  SELECT greatest(reltuples, 0)::float8 AS rows FROM pg_class WHERE oid = 'memory_agentmemory'::regclass
), bound AS (
  SELECT ceil(sqrt(%(hnsw_row_cost)s * %(vector_candidates)s * rows))::bigint AS through FROM t
), h AS (
  SELECT count(*) AS held FROM (
    SELECT 1 FROM memory_agentmemory WHERE agent_id = %(agent)s
    LIMIT (SELECT greatest(%(exact_up_to)s, through) + 1 FROM bound)) c
), sample AS (
  SELECT m.search, greatest(length(m.search), 1)::float8 AS dl FROM memory_agentmemory m
  WHERE (SELECT held FROM h) > %(exact_up_to)s AND {considered}
  ORDER BY m.occurred_at DESC LIMIT %(stats_sample)s
), terms AS (
  SELECT DISTINCT t FROM unnest(tsvector_to_array(to_tsvector('english', %(query)s))) AS t
)
SELECT h.held, bound.through,
       coalesce((SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%(own_index)s)), false),
       (SELECT count(*) FROM sample), (SELECT greatest(avg(dl), 1) FROM sample),
       (SELECT coalesce(array_agg(t ORDER BY t), '{{}}') FROM terms),
       (SELECT coalesce(array_agg((SELECT count(*) FROM sample s WHERE s.search @@ quote_literal(t)::tsquery)
                                  ORDER BY t), '{{}}') FROM terms),
       set_config('hnsw.iterative_scan', 'relaxed_order', true), set_config('hnsw.ef_search', %(ef_search)s, true),
       set_config('hnsw.max_scan_tuples', greatest(20000, 4 * bound.through / greatest(%(hnsw_row_cost)s, 1))::text, true),
       -- the arms' plans depend on the words and the vector (a cached generic plan would not know them)
       set_config('plan_cache_mode', 'force_custom_plan', true)
FROM h, bound
""".format(considered=_CONSIDERED)


def _tsquery_literal(words: list[str]) -> str:
    """'a' | 'b' (lexemes quoted as tsquery input wants them), or '' for none."""
    return " | ".join("'" + w.replace("\\", "\\\\").replace("'", "''") + "'" for w in words)


def _query_words(text: str) -> list[str]:
    """Words of a query that could be an agent's id or name ("Ann's" and "ann." name ann)."""
    words = set()
    for word in re.findall(r"[\w.@-]+", text.lower()):
        words.update({word, word.strip(".-@")})
    return sorted(w for w in words if w)


def _normal(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9']+", text.lower()))


def _ranking(*, world: World, agent: Agent, partner: str, location: str, query: str, since: datetime | None,
             kinds: list[str] | None, limit: int, cooldown_s: int | None, now: datetime, conf: dict) -> dict:
    """The ranked statement's parameters (the query embedded here)."""
    cooldown = conf["cooldown_seconds"] if cooldown_s is None else cooldown_s
    vector, model = None, ""
    time = when.cues(query, now)
    if query.strip():
        try:
            model, (vector,) = embedder.embed(user_id=world.owner_id, texts=[query])
        except embedder.EmbeddingUnavailable:
            vector = None
    return {
        "partner": partner, "location": location, "query": query,
        "kind_weights": json.dumps(conf["kind_weights"]),
        "w_partner": conf["partner"], "w_location": conf["location"], "w_importance": conf["importance"],
        "w_recency": conf["recency"], "half_life": conf["recency_half_life_hours"] * 3600.0,
        "w_vector": conf["vector"], "w_text": conf["text"], "rrf_k": float(conf["rrf_k"]), "now": now,
        "prior": conf["prior_scale_with_query"] if query.strip() else 1.0,
        "has_vector": vector is not None, "model": model, "vector": HalfVector(vector) if vector is not None else None,
        "dims": len(vector) if vector is not None else None,
        "has_text": bool(query.strip()), "agent": agent.pk, "world": world.pk,
        "words": _query_words(query), "w_named": conf["named_actor"], "k1": conf["bm25_k1"], "b": conf["bm25_b"],
        "w_context": conf["context"], "context_window": timedelta(minutes=conf["context_window_minutes"]),
        "since": since or now - timedelta(days=conf["window_days"]),
        "kinds": kinds or [k for k in AgentMemory.Kind.values],
        "cooled": now - timedelta(seconds=cooldown), "candidates": limit * CANDIDATES_PER_RESULT,
        "asks_when": time.asks_when, "time_re": when.TIME_EXPRESSION_SQL, "w_time_words": conf["time_words"],
        "has_period": time.names_a_period, "months": time.months, "years": time.years,
        "period_start": time.start, "period_end": time.end, "w_period": conf["period"],
        "hop": conf["hop"] > 0, "w_hop": conf["hop"], "hop_seeds": conf["hop_seeds"],
        "common": conf["bm25_common_share"],
        **{key: conf[key] for key in ("vector_candidates", "text_scan", "text_candidates", "newest_candidates",
                                      "stats_sample")},
    }


def _ranked_statement(cursor, params: dict, conf: dict) -> tuple[bool, str]:
    """Runs the first statement (the bank's size, BM25's sampled statistics,
    this transaction's settings), adds what it learnt to ``params`` and returns
    whether the candidate path ranks this bank, and the ranked statement. Call
    inside a transaction: the settings last until it ends."""
    dims = params["dims"]
    own_index = agent_indexes.own_index_name(agent_id=params["agent"], dims=dims or INDEXED_DIMS[0])
    cursor.execute(_PREPARE_SQL, {**params, "exact_up_to": conf["exact_up_to"], "ef_search": str(conf["ef_search"]),
                                  "hnsw_row_cost": conf["hnsw_row_cost"], "own_index": own_index})
    held, through, owned, sample_n, sample_avgdl, terms, dfs, *_ = cursor.fetchone()
    candidates = held > conf["exact_up_to"] and (dims is None or dims in INDEXED_DIMS)
    telling = [t for t, df in zip(terms, dfs) if df <= max(conf["bm25_common_share"] * sample_n, 1)]
    params.update({"sample_n": float(sample_n), "sample_avgdl": float(sample_avgdl or 1), "sample_terms": terms,
                   "sample_dfs": [float(d) for d in dfs], "telling": _tsquery_literal(telling) or None})
    return candidates, _recall_sql(candidates=candidates, dims=dims or INDEXED_DIMS[0], through_index=held > through,
                                   own_index_of=params["agent"] if owned and dims else None)


def agent_recall(*, world: World, agent: Agent, partner: str = "", location: str = "", query: str = "",
           since: datetime | None = None, kinds: list[str] | None = None, limit: int = 3,
           token_budget: int | None = None, cooldown_s: int | None = None, now: datetime | None = None,
           record: bool = True) -> tuple[list[Recalled], str]:
    """The memories that matter now, ranked inside Postgres (a statement that
    sizes the bank, then the ranked one: exact over a small bank, over candidates
    from indexes for a large one), near-duplicates collapsed and cut to the
    token budget; returns them and a ready-to-inject "Relevant memories" block.
    Updates retrieval stats when ``record``."""
    conf = recall_conf()
    now = now or timezone.now()
    limit = max(1, min(limit, RECALL_LIMIT_MAX))
    if token_budget is None:
        token_budget = conf["token_budget"]
    params = _ranking(world=world, agent=agent, partner=partner, location=location, query=query, since=since,
                      kinds=kinds, limit=limit, cooldown_s=cooldown_s, now=now, conf=conf)
    with transaction.atomic(savepoint=False), vector_cursor() as cursor:
        _, sql = _ranked_statement(cursor, params, conf)
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    kept: list[Recalled] = []
    seen: list[set[str]] = []
    used = 0
    for pk, content, kind, partner_, location_, occurred, *parts in rows:
        words = _normal(content)
        if any(len(words & other) / max(len(words | other), 1) >= conf["dedupe_jaccard"] for other in seen):
            continue
        cost = token_counter.count(content) + 8
        if used + cost > token_budget:
            continue
        names = ("partner", "location", "kind", "importance", "recency", "vector", "text", "named", "context", "time",
                 "hop")
        scored = {n: round(float(v), 4) for n, v in zip(names, parts)}
        kept.append(Recalled(pk, content, kind, partner_, location_, occurred, round(sum(scored.values()), 4), scored))
        seen.append(words)
        used += cost
        if len(kept) == limit:
            break
    if record and kept:
        AgentMemory.objects.filter(pk__in=[m.id for m in kept]).update(
            last_retrieved_at=now, retrieval_count=F("retrieval_count") + 1)
    block = ""
    if kept:
        lines = []
        for m in kept:
            where = f", {m.location}" if m.location else ""
            lines.append(f"- [{m.occurred_at:%Y-%m-%d %H:%M}{where}] {m.content}")
        block = "Relevant memories:\n" + "\n".join(lines)
    return kept, block


def recall_explain(*, world: World, agent: Agent, partner: str = "", location: str = "", query: str = "",
                   since: datetime | None = None, kinds: list[str] | None = None, limit: int = 3,
                   cooldown_s: int | None = None, now: datetime | None = None) -> dict:
    """How a recall would run, from Postgres's own account (EXPLAIN ANALYZE; it
    changes nothing): the path ("exact" or "candidates"), the rows read from the
    memory table (index and table rows each scan returned or filtered out), the
    indexes used and the plan. For operators and bench/agent_recall.py."""
    conf = recall_conf()
    params = _ranking(world=world, agent=agent, partner=partner, location=location, query=query, since=since,
                      kinds=kinds, limit=max(1, min(limit, RECALL_LIMIT_MAX)), cooldown_s=cooldown_s,
                      now=now or timezone.now(), conf=conf)
    with transaction.atomic(savepoint=False), vector_cursor() as cursor:
        candidates, sql = _ranked_statement(cursor, params, conf)
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        (plan,), = cursor.fetchall()
    if isinstance(plan, str):
        plan = json.loads(plan)
    rows_read, indexes = 0, set()

    def walk(node: dict) -> None:
        nonlocal rows_read
        if node.get("Relation Name") == "memory_agentmemory":
            loops = node.get("Actual Loops", 1)
            rows_read += (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
                          + node.get("Rows Removed by Index Recheck", 0)) * loops
        if node.get("Index Name"):
            indexes.add(node["Index Name"])
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return {"path": "candidates" if candidates else "exact", "rows_read": rows_read, "indexes": sorted(indexes),
            "plan": plan}
