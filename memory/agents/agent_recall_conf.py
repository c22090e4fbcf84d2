"""Agent recall's weights and the operator's knobs: what each part of a memory's score
(memory.agents.agent_recall_sql.SCORE_PARTS) weighs, the planner's knobs of the candidate path, and
settings.AGENT_RECALL checked against them (a mistyped key or a value of the wrong type is refused)."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

# A memory's score adds these parts (docs/agent-memory.md); tuned with
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
    # a memory's meaning is matched as itself and, for this share, as its best fact key
    # (memory.agents.fact_keys: its statements one by one, "I" and "you" named); 0: keys are not read
    "keys": 0.7,
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
    "kind_weights": {
        "say": 0.15,
        "interaction": 0.15,
        "note": 0.15,
        "summary": 0.12,
        "custom": 0.1,
        "observation": 0.08,
        "heard": 0.05,
        "witnessed": 0.0,
    },
    "dedupe_jaccard": 0.85,  # word overlap above which two memories count as the same
    # time (memory.agents.when): a question asking when ranks up memories that say when (a date, "yesterday",
    # "two years ago"); a query naming a period ("in June", "last week") ranks up memories that
    # happened in it (their event time)
    "time_words": 0.6,  # every fold chose 0.6 once fact keys were in (0.9 before)
    "period": 0.3,
    # a second hop: the memories nearest the centre of the best first matches (their meaning), fused by
    # reciprocal rank like the first; finds the other scattered mentions of a subject ("which cities...").
    # Off: on LoCoMo it did not generalize (cross-validation chose 0 in four folds of five); an operator
    # whose agents ask for lists may turn it on (AGENT_RECALL["hop"])
    "hop": 0.0,
    # the second hop for a question that asks for many things only ("which cities...", "how many
    # games...": asks_for_many): once fact keys were in, four folds of five chose 0.3; once such a
    # question ranked by meaning more (list_vector), every fold chose 0 (docs/benchmarks.md)
    "list_hop": 0.0,
    # a question asking for many things ranks by meaning this many times more: the things it lists
    # share a meaning with the kind it names ("activities", "instruments") more than its words; four
    # folds of five chose 1.5 (of 1, 1.5, 2)
    "list_vector": 1.5,
    "hop_seeds": 1,
    # a line that only asks (its last sentence a question) tells no fact: it counts this much less
    "asks": 0.3,
    # ...and the line after it, which answers it, takes this much more of its match (on top of the
    # context share: 0.25 x (1 + 1.5)); four folds of five chose asks 0.3 and answers 1.5 once list
    # questions ranked by meaning more (answers 1.0 before: docs/benchmarks.md)
    "answers": 1.5,
    # The candidate path (a bank of more than settings.AGENT_RECALL["exact_up_to"] memories): how many
    # rows each arm reads (memory.agents.agent_recall_sql).
    "vector_candidates": 40,  # nearest by meaning
    "text_scan": 400,  # rows the full-text index gives, of which BM25 keeps...
    "text_candidates": 100,
    "newest_candidates": 30,  # newest, with the partner, at the location, in the period (each)
    # memories whose word counts stand for the bank's: a uniform sample (the newest alone would make the
    # words of older days, their dates among them, look rare)
    "stats_sample": 1000,
    # the bank is counted up to at least this many memories (over candidates, the vector ranks of those
    # outside the nearest arm are spread over the bank's size)
    "count_at_least": 5000,
    "ef_search": 40,  # pgvector's hnsw.ef_search
    # measured (bench/agent_recall.py, 384 dimensions): a row the filtered HNSW scan visits costs about as
    # much as 60 of the agent's rows read through its index and compared by distance (0: always the index)
    "hnsw_row_cost": 60,
}


# The weights that make each score part (memory.agents.agent_recall_sql.SCORE_PARTS); a part with all its
# weights at 0 adds nothing (tests/memory/test_recall_parts.py takes each part alone).
PART_WEIGHTS = {
    "partner": ("partner",),
    "location": ("location",),
    "kind": ("kind_weights",),
    "importance": ("importance",),
    "recency": ("recency",),
    "vector": ("vector",),
    "text": ("text",),
    "named": ("named_actor",),
    "context": ("context",),
    "time": ("time_words", "period"),
    "hop": ("hop", "list_hop"),
    "asks": ("asks",),
}

KNOBS = {"window_days": int, "cooldown_seconds": int, "token_budget": int, "exact_up_to": int, "own_index_from": int}


def recall_conf_problems(overrides: dict) -> list[str]:
    """What is wrong with settings.AGENT_RECALL: a key that is neither a weight nor a knob (a
    mistyped key would otherwise be ignored), or a value of another type than the weight it sets."""
    problems = []
    for key, value in overrides.items():
        if key in KNOBS:
            expected = KNOBS[key]
        elif key in WEIGHTS:
            expected = type(WEIGHTS[key])
        else:
            problems.append(
                f"AGENT_RECALL[{key!r}] is not a recall weight or knob (known: {', '.join(sorted([*WEIGHTS, *KNOBS]))})"
            )
            continue
        numeric = expected in (int, float) and isinstance(value, (int, float)) and not isinstance(value, bool)
        if not (numeric or isinstance(value, expected)):
            problems.append(f"AGENT_RECALL[{key!r}] is a {type(value).__name__}; it takes a {expected.__name__}")
        elif expected is dict and set(value) - set(WEIGHTS[key]):
            problems.append(
                f"AGENT_RECALL[{key!r}] names unknown kinds: {', '.join(sorted(set(value) - set(WEIGHTS[key])))}"
            )
    return problems


def recall_conf() -> dict:
    """The weights and the operator's knobs (settings.AGENT_RECALL wins). ImproperlyConfigured when
    AGENT_RECALL holds an unknown key or a value of the wrong type (`manage.py check` says so too)."""
    problems = recall_conf_problems(settings.AGENT_RECALL)
    if problems:
        raise ImproperlyConfigured("; ".join(problems))
    return {**WEIGHTS, **settings.AGENT_RECALL}
