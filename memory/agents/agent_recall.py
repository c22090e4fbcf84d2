"""Agent recall: Postgres scores an agent's memories by partner, place,
importance, recency, meaning (pgvector) and words (BM25), with the weights it is
tuned with (exactly for a small bank, over candidates read from indexes for a
large one: memory.agents.agent_recall_sql); then dedupe, cooldown and a token budget."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F
from django.utils import timezone
from pgvector import HalfVector

from memory import embedder
from memory.agents import agent_indexes, agent_words, when
from memory.agents.agent_indexes import INDEXED_DIMS
from memory.agents.agent_recall_conf import recall_conf
from memory.agents.agent_recall_sql import PREPARE_SQL, SCORE_PARTS, recall_sql, tsquery_literal
from memory.models import Agent, AgentMemory, World
from memory.vectors import vector_cursor
from stories.prompt import tokens as token_counter

RECALL_LIMIT_MAX = 50
CANDIDATES_PER_RESULT = 4  # ranked rows fetched per requested memory, for dedupe and the token budget

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


def _query_words(text: str) -> list[str]:
    """Words of a query that could be an agent's id or name ("Ann's" and "ann." name ann)."""
    words = set()
    for word in re.findall(r"[\w.@-]+", text.lower()):
        words.update({word, word.strip(".-@")})
    return sorted(w for w in words if w)


_NOT_PLURAL = {
    "does",
    "was",
    "has",
    "is",
    "this",
    "his",
    "its",
    "always",
    "perhaps",
    "across",
    "towards",
    "whereas",
    "unless",
    "thus",
    "yes",
    "us",
    "plus",
    "less",
    "news",
    "besides",
    "afterwards",
}


def asks_for_many(query: str) -> bool:
    """A question asking for several things: "how many ...", "both", "names of", or what/which
    followed within three words by a plural ("which cities has...", "what video games does...")."""
    text = query.strip().lower()
    if re.match(r"^(how many|what are the names)\b", text) or re.search(r"\b(both|names of)\b", text):
        return True
    m = re.match(r"^(what|which)\s+(.*)", text)
    if not m:
        return False
    words = re.findall(r"[a-z'/]+", m.group(2))[:3]
    return any(len(w) > 3 and w.endswith("s") and "'" not in w and w.split("/")[0] not in _NOT_PLURAL for w in words)


def _normal(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9']+", text.lower()))


def _ranking(
    *,
    world: World,
    agent: Agent,
    partner: str,
    location: str,
    query: str,
    since: datetime | None,
    kinds: list[str] | None,
    limit: int,
    cooldown_s: int | None,
    now: datetime,
    conf: dict,
) -> dict:
    """The ranked statement's parameters (the query embedded here)."""
    cooldown = conf["cooldown_seconds"] if cooldown_s is None else cooldown_s
    vector, model = None, ""
    time = when.cues(query, now)
    if query.strip():
        try:
            model, (vector,) = embedder.embed(user_id=world.owner_id, texts=[query], for_request=True)
        except embedder.EmbeddingUnavailable:
            vector = None
    return {
        "partner": partner,
        "location": location,
        "query": query,
        "kind_weights": json.dumps(conf["kind_weights"]),
        "w_partner": conf["partner"],
        "w_location": conf["location"],
        "w_importance": conf["importance"],
        "w_recency": conf["recency"],
        "half_life": conf["recency_half_life_hours"] * 3600.0,
        "w_vector": conf["vector"] * (conf["list_vector"] if asks_for_many(query) else 1.0),
        "w_keys": float(conf["keys"]),
        "w_text": conf["text"],
        "rrf_k": float(conf["rrf_k"]),
        "now": now,
        "prior": conf["prior_scale_with_query"] if query.strip() else 1.0,
        "has_vector": vector is not None,
        "model": model,
        "vector": HalfVector(vector) if vector is not None else None,
        "dims": len(vector) if vector is not None else None,
        "has_text": bool(query.strip()),
        "agent": agent.pk,
        "world": world.pk,
        "words": _query_words(query),
        "w_named": conf["named_actor"],
        "k1": conf["bm25_k1"],
        "b": conf["bm25_b"],
        "w_context": conf["context"],
        "context_window": timedelta(minutes=conf["context_window_minutes"]),
        "since": since or now - timedelta(days=conf["window_days"]),
        "kinds": kinds or [k for k in AgentMemory.Kind.values],
        "kinds_key": agent_words.kinds_key(kinds or AgentMemory.Kind.values),
        "cooled": now - timedelta(seconds=cooldown),
        "candidates": limit * CANDIDATES_PER_RESULT,
        "asks_when": time.asks_when,
        "time_re": when.TIME_EXPRESSION_SQL,
        "w_time_words": conf["time_words"],
        "has_period": time.names_a_period,
        "months": time.months,
        "years": time.years,
        "period_start": time.start,
        "period_end": time.end,
        "w_period": conf["period"],
        **_hop(conf, query),
        "w_asks": conf["asks"],
        "w_answers": conf["answers"],
        "common": conf["bm25_common_share"],
        **{
            key: conf[key]
            for key in ("vector_candidates", "text_scan", "text_candidates", "newest_candidates", "stats_sample")
        },
    }


def _hop(conf: dict, query: str) -> dict:
    """The second hop's parameters: ``hop`` for every query, or ``list_hop`` for one asking for many."""
    weight = conf["hop"] or (conf["list_hop"] if asks_for_many(query) else 0.0)
    return {"hop": weight > 0, "w_hop": weight, "hop_seeds": conf["hop_seeds"]}


def _ranked_statement(cursor, params: dict, conf: dict, *, store: bool = True) -> tuple[bool, str]:
    """Runs the first statement (the bank's size, BM25's sampled statistics,
    this transaction's settings), adds what it learnt to ``params`` and returns
    whether the candidate path ranks this bank, and the ranked statement. Call
    inside a transaction: the settings last until it ends."""
    dims = params["dims"]
    own_index = agent_indexes.own_index_name(agent_id=params["agent"], dims=dims or INDEXED_DIMS[0])
    cursor.execute(
        PREPARE_SQL,
        {
            **params,
            "exact_up_to": conf["exact_up_to"],
            "ef_search": str(conf["ef_search"]),
            "count_at_least": conf["count_at_least"],
            "hnsw_row_cost": conf["hnsw_row_cost"],
            "own_index": own_index,
            "own_key_index": agent_indexes.own_key_index_name(agent_id=params["agent"], dims=dims or INDEXED_DIMS[0]),
        },
    )
    held, through, owned, key_owned, terms, stored, stored_dfs, *_ = cursor.fetchone()
    candidates = held > conf["exact_up_to"] and (dims is None or dims in INDEXED_DIMS)
    # exact scoring: the statistics are the bank's own, counted in the ranked statement
    sample = (
        None
        if held <= conf["exact_up_to"]
        else agent_words.word_stats(
            cursor, params, held=held, terms=terms, stored=stored, stored_dfs=stored_dfs, store=store
        )
    )
    sample_n, sample_avgdl = (sample.n, sample.avgdl) if sample else (0, 1.0)
    dfs = sample.dfs if sample else [0] * len(terms)
    telling = [t for t, df in zip(terms, dfs) if df <= max(conf["bm25_common_share"] * sample_n, 1)]
    # about how many of the bank's memories hold a telling word (ranks of the text matches outside its arm)
    matched = held * min(1.0, sum(df for t, df in zip(terms, dfs) if t in telling) / max(sample_n, 1))
    params.update(
        {
            "held": held,
            "matched": matched,
            "sample_n": float(sample_n),
            "sample_avgdl": float(sample_avgdl),
            "sample_terms": terms,
            "sample_dfs": [float(d) for d in dfs],
            "telling": tsquery_literal(telling) or None,
        }
    )
    return candidates, recall_sql(
        candidates=candidates,
        dims=dims or INDEXED_DIMS[0],
        through_index=held > through,
        own_index_of=params["agent"] if owned and dims else None,
        own_key_index_of=params["agent"] if key_owned and dims else None,
    )


def agent_recall(
    *,
    world: World,
    agent: Agent,
    partner: str = "",
    location: str = "",
    query: str = "",
    since: datetime | None = None,
    kinds: list[str] | None = None,
    limit: int = 3,
    token_budget: int | None = None,
    cooldown_s: int | None = None,
    now: datetime | None = None,
    record: bool = True,
) -> tuple[list[Recalled], str]:
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
    params = _ranking(
        world=world,
        agent=agent,
        partner=partner,
        location=location,
        query=query,
        since=since,
        kinds=kinds,
        limit=limit,
        cooldown_s=cooldown_s,
        now=now,
        conf=conf,
    )
    with transaction.atomic(savepoint=False), vector_cursor() as cursor:
        _, sql = _ranked_statement(cursor, params, conf)
        cursor.execute(sql, params)
        columns = [column.name for column in cursor.description]
        rows = [dict(zip(columns, row)) for row in cursor.fetchall()]
    kept: list[Recalled] = []
    seen: list[set[str]] = []
    used = 0
    for row in rows:
        content = row["content"]
        words = _normal(content)
        if any(len(words & other) / max(len(words | other), 1) >= conf["dedupe_jaccard"] for other in seen):
            continue
        cost = token_counter.count(content) + 8
        if used + cost > token_budget:
            continue
        scored = {part: round(float(row[f"s_{part}"]), 4) for part in SCORE_PARTS}
        kept.append(
            Recalled(
                row["id"],
                content,
                row["kind"],
                row["partner"],
                row["location"],
                row["occurred_at"],
                round(sum(scored.values()), 4),
                scored,
            )
        )
        seen.append(words)
        used += cost
        if len(kept) == limit:
            break
    if record and kept:
        AgentMemory.objects.filter(pk__in=[m.id for m in kept]).update(
            last_retrieved_at=now, retrieval_count=F("retrieval_count") + 1
        )
    block = ""
    if kept:
        lines = []
        for m in kept:
            where = f", {m.location}" if m.location else ""
            lines.append(f"- [{m.occurred_at:%Y-%m-%d %H:%M}{where}] {m.content}")
        block = "Relevant memories:\n" + "\n".join(lines)
    return kept, block


def recall_explain(
    *,
    world: World,
    agent: Agent,
    partner: str = "",
    location: str = "",
    query: str = "",
    since: datetime | None = None,
    kinds: list[str] | None = None,
    limit: int = 3,
    cooldown_s: int | None = None,
    now: datetime | None = None,
) -> dict:
    """How a recall would run, from Postgres's own account (EXPLAIN ANALYZE; it
    changes nothing): the path ("exact" or "candidates"), the rows read from the
    memory table (index and table rows each scan returned or filtered out), the
    indexes used and the plan. For operators and bench/agent_recall.py."""
    conf = recall_conf()
    params = _ranking(
        world=world,
        agent=agent,
        partner=partner,
        location=location,
        query=query,
        since=since,
        kinds=kinds,
        limit=max(1, min(limit, RECALL_LIMIT_MAX)),
        cooldown_s=cooldown_s,
        now=now or timezone.now(),
        conf=conf,
    )
    with transaction.atomic(savepoint=False), vector_cursor() as cursor:
        candidates, sql = _ranked_statement(cursor, params, conf, store=False)
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        ((plan,),) = cursor.fetchall()
    if isinstance(plan, str):
        plan = json.loads(plan)
    rows_read, indexes = 0, set()

    def walk(node: dict) -> None:
        nonlocal rows_read
        if node.get("Relation Name") == "memory_agentmemory":
            loops = node.get("Actual Loops", 1)
            rows_read += (
                node.get("Actual Rows", 0)
                + node.get("Rows Removed by Filter", 0)
                + node.get("Rows Removed by Index Recheck", 0)
            ) * loops
        if node.get("Index Name"):
            indexes.add(node["Index Name"])
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return {
        "path": "candidates" if candidates else "exact",
        "rows_read": rows_read,
        "indexes": sorted(indexes),
        "plan": plan,
    }
