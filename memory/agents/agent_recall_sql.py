"""The statements of agent recall (memory.agents.agent_recall): the first, which sizes
the bank and samples its word statistics, and the ranked one, exact or over
candidates read from indexes."""

from __future__ import annotations

from memory.agents import agent_words

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
#   context window: an answer is found through the question it answers, and
#   the line after a question takes a larger share of its match (it is the
#   reply), while a line that only asks (its last sentence a question) counts
#   for less, since it tells no fact;
# - partner, location, kind, importance and recency add their weights.
# The memories a recall considers: those of the agent in the window, of the kinds asked, not folded
# into a summary, and not cooling down (pinned ones never cool down).
_CONSIDERED = """m.agent_id = %(agent)s AND m.consolidated_into_id IS NULL AND m.occurred_at >= %(since)s
    AND m.kind = ANY(%(kinds)s) AND (m.pinned OR m.last_retrieved_at IS NULL OR m.last_retrieved_at < %(cooled)s)"""

# The parts of a memory's score, each a column s_<part> of the "scored" step below: the total is
# their sum and the answer names each (read by column name; a test ranks by each part alone).
SCORE_PARTS = (
    "partner",
    "location",
    "kind",
    "importance",
    "recency",
    "vector",
    "text",
    "named",
    "context",
    "time",
    "hop",
    "asks",
)

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
){candidates}, keyed AS MATERIALIZED (
  -- each memory's best fact key (memory.agents.fact_keys) by meaning
  SELECT k.memory_id, max(1 - (k.embedding <=> %(vector)s::halfvec)) AS sim
  FROM memory_agentmemorykey k
  WHERE %(has_vector)s AND %(w_keys)s > 0 AND k.embedding_model = %(model)s AND {key_scope}
  GROUP BY k.memory_id
), base AS (
  SELECT m.id, m.kind, m.partner, m.location, m.occurred_at, m.importance, m.actor, m.search, {near} AS near,
    {best_text} AS best_text,
    -- a memory's meaning matches a question as itself and, for the share w_keys, as its best key
    CASE WHEN %(has_vector)s AND m.embedding_model = %(model)s
         THEN CASE WHEN keyed.sim IS NULL THEN 1 - (m.embedding <=> %(vector)s::halfvec)
                   ELSE (1 - %(w_keys)s) * (1 - (m.embedding <=> %(vector)s::halfvec)) + %(w_keys)s * keyed.sim END
    END AS sim,
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
    CASE WHEN %(hop)s AND %(has_vector)s AND m.embedding_model = %(model)s THEN m.embedding END AS embedding,
    -- its last sentence a question (a "?" ending the text or before a closing quote, bracket or space:
    -- not one inside a link, "page?id=3")
    strpos(m.content, '?') > 0 AND m.content ~ '\\?(["”’'')\\]\\s][^.!?]*)?$' AS asks
  FROM memory_agentmemory m CROSS JOIN q LEFT JOIN keyed ON keyed.memory_id = m.id
  WHERE {considered}{restrict}
), {stats}, {df}, weights AS MATERIALIZED (
  -- BM25 with every word counted once per memory (memories are short): a memory's weight is the sum
  -- of its query words' idf, scaled by its length
  SELECT terms.tq, ln(1 + (s.n - df.df + 0.5) / (df.df + 0.5)) AS idf
  FROM terms JOIN df USING (t), stats s
  WHERE df.df <= greatest(%(common)s * s.n, 1)  -- a word most memories hold tells them apart by noise only
), texted AS {texted} (
  SELECT base.*, CASE WHEN base.matches THEN coalesce(
      (SELECT sum(w.idf) FROM weights w WHERE base.search @@ w.tq) * (%(k1)s + 1)
      / (1 + %(k1)s * (1 - %(b)s + %(b)s * base.dl / s.avgdl)), 0) ELSE 0 END AS tr
  FROM base, stats s
), floored AS (
  -- over candidates: at or above the worst of an arm's own rows (the nearest by meaning, the best by
  -- words), a candidate ranks among them (an arm may miss a few, another arm brings them); below it, the
  -- candidates are spread over the ranks of the rest of the bank (or of its matches), as far apart as
  -- the bank outnumbers them. Scoring the whole bank, every row is its arm's own.
  SELECT texted.*, coalesce(sim >= min(sim) FILTER (WHERE near) OVER (), true) AS near_enough,
         coalesce(tr >= min(tr) FILTER (WHERE best_text) OVER (), true) AS text_enough
  FROM texted
), ranked AS (
  SELECT id, kind, partner, location, occurred_at, importance, actor, sim, says_when, in_period, embedding, tr, asks,
    CASE WHEN near_enough THEN rank() OVER (PARTITION BY near_enough ORDER BY sim DESC NULLS LAST)
         ELSE count(*) FILTER (WHERE near_enough) OVER ()
              + rank() OVER (PARTITION BY near_enough ORDER BY sim DESC NULLS LAST)
              * greatest(1, (%(held)s - count(*) FILTER (WHERE near_enough) OVER ())::float8
                            / count(*) OVER (PARTITION BY near_enough)) END AS r_vector,
    CASE WHEN text_enough THEN rank() OVER (PARTITION BY text_enough ORDER BY tr DESC)
         ELSE count(*) FILTER (WHERE text_enough) OVER ()
              + rank() OVER (PARTITION BY text_enough ORDER BY tr DESC)
              * greatest(1, (%(matched)s - count(*) FILTER (WHERE text_enough) OVER ())::float8
                            / greatest(count(*) FILTER (WHERE tr > 0) OVER (PARTITION BY text_enough), 1)) END
      AS r_text
  FROM floored
), fused AS (
  SELECT ranked.*,
    CASE WHEN sim IS NOT NULL THEN %(w_vector)s * (%(rrf_k)s + 1) / (%(rrf_k)s + r_vector) ELSE 0 END AS s_vector,
    CASE WHEN tr > 0 THEN %(w_text)s * (%(rrf_k)s + 1) / (%(rrf_k)s + r_text) ELSE 0 END AS s_text,
    CASE WHEN actor <> '' AND actor = ANY(named.ids) THEN %(w_named)s ELSE 0 END AS s_named
  FROM ranked, named
), seeds AS (
  SELECT embedding FROM fused WHERE %(hop)s AND embedding IS NOT NULL AND s_vector + s_text > 0
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
    coalesce(lag(asks) OVER w, false) AS prev_asks,
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
      %(w_context)s * (CASE WHEN prev_at >= occurred_at - %(context_window)s
                            THEN prev_match * (1 + %(w_answers)s * prev_asks::int) ELSE 0 END
                       + CASE WHEN next_at <= occurred_at + %(context_window)s THEN next_match ELSE 0 END)
    ELSE 0 END AS s_context,
    %(w_time_words)s * says_when + %(w_period)s * in_period AS s_time,
    CASE WHEN r_hop IS NOT NULL THEN %(w_hop)s * (%(rrf_k)s + 1) / (%(rrf_k)s + r_hop) ELSE 0 END AS s_hop,
    -%(w_asks)s * asks::int AS s_asks
  FROM neighbours n LEFT JOIN kw ON kw.kind = n.kind
), top AS (
  SELECT *, {total} AS total
  FROM scored ORDER BY total DESC, occurred_at DESC, id LIMIT %(candidates)s
)
SELECT top.id, m.content, top.kind, top.partner, top.location, top.occurred_at, {part_columns}
FROM top JOIN memory_agentmemory m ON m.id = top.id
ORDER BY total DESC, top.occurred_at DESC, top.id
"""

# Exact scoring: every memory considered is scored, and BM25's statistics are theirs.
_EXACT = {
    "candidates": "",
    "key_scope": "k.agent_id = %(agent)s",
    "restrict": "",
    "near": "true",
    "best_text": "true",
    "texted": "NOT MATERIALIZED",
    "stats": "stats AS (SELECT count(*)::float8 AS n, greatest(avg(dl)::float8, 1) AS avgdl FROM base)",
    "df": "df AS (SELECT t, count(*)::float8 AS df FROM base b, terms WHERE b.matches AND b.search @@ terms.tq"
    " GROUP BY t)",
}

# The candidate path, for large banks: the same scoring over the memories that could rank, fetched
# from indexes; each arm reads a bounded number of rows, whatever the bank holds:
# - the nearest by meaning: through the agent's own HNSW index when it has one (memory.agents.agent_indexes),
#   else the shared one of the vector's size (pgvector's iterative scan, filtered to the agent), or,
#   for a bank too small a share of the table for that filter to be cheap, by distance over the bank
#   itself ({vector_order});
# - the best by BM25 among the first rows the full-text (GIN) index gives for the words that tell
#   memories apart, with the statistics of a sample of the agent's memories standing for the bank's
#   (the first statement computes them);
# - the newest, the newest with the partner, at the location, and in the period the query names;
# - for the context share, the lines just before and after each conversational candidate that the
#   meaning or the words brought in (the newest lend their neighbours next to nothing).
_CANDIDATES = """, sample_stats AS (
  SELECT %(sample_n)s::float8 AS n, %(sample_avgdl)s::float8 AS avgdl
), sample_df AS (
  SELECT t, df FROM unnest(%(sample_terms)s::text[], %(sample_dfs)s::float8[]) AS x(t, df)
), vec AS MATERIALIZED (
  SELECT m.id FROM memory_agentmemory m
  WHERE %(has_vector)s AND {considered_vec} AND vector_dims(m.embedding) = {dims} AND m.embedding_model = %(model)s
  ORDER BY {vector_order} LIMIT %(vector_candidates)s
), kvec AS MATERIALIZED (
  -- the memories whose fact keys are nearest by meaning
  SELECT k.memory_id AS id FROM memory_agentmemorykey k JOIN memory_agentmemory m ON m.id = k.memory_id
  WHERE %(has_vector)s AND %(w_keys)s > 0 AND {key_agent} AND vector_dims(k.embedding) = {dims}
    AND k.embedding_model = %(model)s AND {considered}
  ORDER BY {key_order} LIMIT %(vector_candidates)s
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
  SELECT id FROM vec UNION SELECT id FROM kvec UNION SELECT id FROM txt_best UNION SELECT id FROM newest
), around AS (
  SELECT x.id FROM memory_agentmemory c
  JOIN (SELECT id FROM vec UNION SELECT id FROM kvec UNION SELECT id FROM txt_best) matched USING (id),
  LATERAL (
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


def recall_sql(
    *,
    candidates: bool,
    dims: int,
    through_index: bool,
    own_index_of: int | None = None,
    own_key_index_of: int | None = None,
) -> str:
    parts = dict(_EXACT)
    if candidates:
        if (
            own_index_of is not None
        ):  # the agent's own index (memory.agents.agent_indexes): its id, as its predicate says
            vector_order, considered_vec = (
                f"m.embedding::halfvec({dims}) <=> %(vector)s::halfvec({dims})",
                _CONSIDERED.replace("m.agent_id = %(agent)s", f"m.agent_id = {int(own_index_of)}", 1),
            )
        elif through_index:  # (agent_id + 0: the agent's rows are filtered in the HNSW scan, not fetched whole)
            vector_order, considered_vec = (
                f"m.embedding::halfvec({dims}) <=> %(vector)s::halfvec({dims})",
                _CONSIDERED.replace("m.agent_id =", "m.agent_id + 0 =", 1),
            )
        else:
            vector_order, considered_vec = "m.embedding <=> %(vector)s::halfvec", _CONSIDERED
        parts = {
            "candidates": _CANDIDATES.format(
                considered=_CONSIDERED,
                considered_vec=considered_vec,
                vector_order=vector_order,
                dims=int(dims),
                # the keys' HNSW index (migration 0021), filtered to the agent in the scan, when the bank
                # is large enough for it to read less than the agent's keys in order
                # the agent's own index over its keys (memory.agents.agent_indexes: its id, as its predicate
                # says), else the shared one filtered in the scan when the bank is large, else its keys in order
                key_agent=f"k.agent_id = {int(own_key_index_of)}"
                if own_key_index_of is not None
                else "k.agent_id + 0 = %(agent)s"
                if through_index or own_index_of
                else "k.agent_id = %(agent)s",
                key_order=f"k.embedding::halfvec({int(dims)}) <=> %(vector)s::halfvec({int(dims)})",
            ),
            "restrict": "\n    AND m.id = ANY(ARRAY(SELECT id FROM cand UNION SELECT id FROM around))",
            # the keys of the candidates only, not of the lines around them (those lend their match as
            # the memory itself matches): half the keys read; 100,000 memories: p95 26.2 -> 23.5 ms
            "key_scope": "k.memory_id = ANY(ARRAY(SELECT id FROM cand))",
            "near": "m.id = ANY(ARRAY(SELECT id FROM vec UNION SELECT id FROM kvec))",
            "best_text": "m.id = ANY(ARRAY(SELECT id FROM txt_best))",
            "stats": "stats AS (SELECT * FROM sample_stats)",
            # each candidate's BM25 sum once, though the steps after read it thrice (over a whole bank,
            # inlined is the faster)
            "texted": "MATERIALIZED",
            "df": "df AS (SELECT t, df FROM sample_df)",
        }
    return _RECALL_SQL.format(
        considered=_CONSIDERED,
        total=" + ".join(f"s_{p}" for p in SCORE_PARTS),
        part_columns=", ".join(f"s_{p}" for p in SCORE_PARTS),
        **parts,
    )


# The first statement of a recall, in its transaction: how many memories the agent holds (counted up
# to the larger of the bounds below), the query's words, the stored word statistics of a sample of its
# memories for the candidate path's BM25 (memory.agents.agent_words), and this transaction's planner and pgvector
# settings. Through the HNSW index, finding the agent's k nearest reads about k x table / bank rows;
# over the bank, the bank: the index is the cheaper way past sqrt(hnsw_row_cost x k x table) memories
# (the "through" bound).
PREPARE_SQL = """
WITH t AS (
  SELECT greatest(reltuples, 0)::float8 AS rows FROM pg_class WHERE oid = 'memory_agentmemory'::regclass
), bound AS (
  SELECT ceil(sqrt(%(hnsw_row_cost)s * %(vector_candidates)s * t.rows))::bigint AS through,
         coalesce(i.indisvalid, false) AS owned, c.reltuples AS own_rows
  FROM t LEFT JOIN pg_index i ON i.indexrelid = to_regclass(%(own_index)s) LEFT JOIN pg_class c ON c.oid = i.indexrelid
), h AS (
  -- an agent with an index of its own is past every bound (memory.agents.agent_indexes), and that index's row
  -- count is its bank's size: its bank is not counted
  SELECT CASE WHEN (SELECT owned FROM bound)
    THEN (SELECT greatest(own_rows::bigint, %(exact_up_to)s + 1) FROM bound)
    ELSE (SELECT count(*) FROM (
      SELECT 1 FROM memory_agentmemory WHERE agent_id = %(agent)s
      LIMIT (SELECT greatest(%(exact_up_to)s, through, %(count_at_least)s) + 1 FROM bound)) c) END AS held
), qt AS (
  SELECT DISTINCT t FROM unnest(tsvector_to_array(to_tsvector('english', %(query)s))) AS t
), {stored}
SELECT h.held, bound.through, bound.owned,
       coalesce((SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%(own_key_index)s)), false),
       (SELECT coalesce(array_agg(t ORDER BY t), '{{}}') FROM qt),
       (SELECT row_to_json(stored) FROM stored), (SELECT dfs FROM stored_dfs),
       set_config('hnsw.iterative_scan', 'relaxed_order', true), set_config('hnsw.ef_search', %(ef_search)s, true),
       set_config('hnsw.max_scan_tuples', greatest(20000, 4 * bound.through / greatest(%(hnsw_row_cost)s, 1))::text, true),
       -- the arms' plans depend on the words and the vector (a cached generic plan would not know them)
       set_config('plan_cache_mode', 'force_custom_plan', true)
FROM h, bound
""".format(stored=agent_words.STORED_CTE)


def tsquery_literal(words: list[str]) -> str:
    """'a' | 'b' (lexemes quoted as tsquery input wants them), or '' for none."""
    return " | ".join("'" + w.replace("\\", "\\\\").replace("'", "''") + "'" for w in words)
