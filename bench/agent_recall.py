"""Agent recall at scale: how recall's cost grows with an agent's bank.

One world table of --rows agent memories (1,000,000 by default: the agents
measured plus filler agents sharing the table), made directly in SQL: a dozen random words from a vocabulary of 90, and as
the memory's vector the normalised sum of the words' vectors from the local
model, so that memories sharing words are near in meaning, as real ones are
(random unit vectors have no neighbourhoods, which no embedding model makes,
and would measure the HNSW index at its worst). For agents holding each of --sizes memories, --queries
questions are asked: the recall's SQL alone (both its statements, timed), and
through the recall API (in-process, query embedding with the local model
included); the rows one recall reads come from Postgres's own EXPLAIN ANALYZE.
Each size is measured as shipped (exact scoring up to AGENT_RECALL
["exact_up_to"] memories, candidates from indexes above) and with exact
scoring forced, beside. Then bench/locomo.py --candidates scores LoCoMo with
exact scoring and with the candidate path forced on. The data is kept between
runs (a second run only measures).

    .venv/bin/python bench/agent_recall.py [--sizes 2000 20000 100000] [--rows 1000000] [--queries 40]
                                           [--skip-exact] [--skip-locomo]

Targets (issue 17): SQL p95 <= 25 ms at 100,000 memories; LoCoMo with the
candidate path within 0.5 points of exact scoring. Ends with one line of JSON:
a list of {"memories", "sql_p95_ms", "api_p95_ms"}, one per bank size (as shipped).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from _setup import django_setup, percentile, print_table, save

WORDS = (
    "river bridge market lantern festival harbor garden tower forest castle village storm winter summer "
    "bread apple sword shield letter map coin horse boat song dance painting pottery camping hiking "
    "studio business loan rent friend sister brother mother father teacher doctor guard merchant "
    "travel trip city rome paris london school class exam job interview tattoo puppy cat dog gift "
    "birthday wedding party dinner lunch breakfast coffee tea book movie game music concert"
).split()


def _fill(world_id: int, agent_id: int, count: int, seed: int, word_vectors: list[list[float]]) -> None:
    """``count`` memories for one agent, in SQL: a dozen random words, the normalised sum of the words'
    vectors (from the local model) as the memory's vector, a time in the last year."""
    from django.db import connection

    from memory.embedder import LOCAL_MODEL

    with connection.cursor() as cursor:
        cursor.execute("SELECT setseed(%s)", [(seed % 1_999) / 2_000])
        cursor.execute(
            """
            INSERT INTO memory_agentmemory (agent_id, world_id, partner, actor, location, kind, content, metadata,
                embedding, embedding_model, importance, pinned, occurred_at, created_at, updated_at,
                retrieval_count)
            SELECT %(agent)s, %(world)s, 'p' || (g %% 7), 'a' || (g %% 5), '', 'say', said.content, '{}'::jsonb,
                   l2_normalize(said.meaning)::halfvec, %(model)s, random(), false,
                   now() - random() * interval '360 days', now(), now(), 0
            FROM generate_series(1, %(count)s) AS g,
            LATERAL (SELECT array_agg(1 + floor(random() * %(n)s)::int) AS picks
                     FROM generate_series(1, 12) WHERE g > 0) AS p,
            LATERAL (SELECT string_agg((%(words)s::text[])[i], ' ') AS content,
                            sum((%(vectors)s::vector[])[i]) AS meaning
                     FROM unnest(p.picks) AS i) AS said
        """,
            {
                "agent": agent_id,
                "world": world_id,
                "words": list(WORDS),
                "n": len(WORDS),
                "count": count,
                "model": LOCAL_MODEL,
                "vectors": ["[" + ",".join(f"{x:.5f}" for x in v) + "]" for v in word_vectors],
            },
        )


def _keys(agent_id: int, word_vectors: list[list[float]], batch: int = 20_000) -> int:
    """Two fact keys (memory.agents.fact_keys) for each of up to ``batch`` of the agent's memories that
    have none, as its pass would have made and embedded them: five of the memory's words and the
    normalised sum of their vectors. Returns the memories keyed by this call."""
    from django.db import connection

    from memory.embedder import LOCAL_MODEL

    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH marked AS (
              UPDATE memory_agentmemory SET keys_made = 'offline'
              WHERE id IN (SELECT id FROM memory_agentmemory WHERE agent_id = %(agent)s AND keys_made = ''
                           ORDER BY id LIMIT %(batch)s)
              RETURNING id, agent_id, content
            )
            INSERT INTO memory_agentmemorykey (memory_id, agent_id, text, embedding, embedding_model)
            SELECT marked.id, marked.agent_id, k.text, l2_normalize(k.meaning)::halfvec, %(model)s
            FROM marked, generate_series(1, 2) AS n,
            LATERAL (SELECT string_agg(w, ' ') AS text,
                            sum((%(vectors)s::vector[])[array_position(%(words)s::text[], w)]) AS meaning
                     FROM (SELECT w FROM unnest(string_to_array(marked.content, ' ')) AS w
                           WHERE n > 0 ORDER BY random() LIMIT 5) AS five) AS k
            """,
            {
                "agent": agent_id,
                "batch": batch,
                "model": LOCAL_MODEL,
                "words": list(WORDS),
                "vectors": ["[" + ",".join(f"{x:.5f}" for x in v) + "]" for v in word_vectors],
            },
        )
        return cursor.rowcount // 2


def _locomo() -> dict:
    """bench/locomo.py --candidates in its own process: exact and candidate-path figures (its JSON line)."""
    import os

    # LoCoMo's banks in a table of their own: in the million-row table a bank of a few hundred is too
    # small a share for the HNSW scan the forced path asks for (recall would read it in order instead)
    env = {**os.environ, "DATA_DIR": str(Path(__file__).resolve().parent.parent / ".data" / "bench-locomo")}
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("locomo.py")), "--candidates"],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
        env=env,
    )
    print(done.stdout.rstrip().rsplit("\n", 1)[0])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 20000, 100000])
    parser.add_argument("--rows", type=int, default=1_000_000, help="memories in the whole table, at least")
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--warm-up", type=int, default=300, help="other questions asked first, per bank size")
    parser.add_argument("--skip-exact", action="store_true", help="do not measure exact scoring beside")
    parser.add_argument(
        "--skip-locomo",
        action="store_true",
        help="do not run bench/locomo.py --candidates (a few minutes: it ingests five conversations)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a recall setting for every question (settings.AGENT_RECALL; JSON value), e.g. keys=0 to ask without "
        "fact keys",
    )
    parser.add_argument("--smoke", action="store_true", help="seconds, tiny sizes: the test suite runs this")
    args = parser.parse_args()
    if args.smoke:  # a bank small enough for exact scoring and one past it, over candidates
        args.sizes, args.rows, args.queries, args.warm_up, args.skip_locomo = [100, 200], 300, 5, 5, True
        os.environ["AGENT_RECALL_EXACT_UP_TO"] = "150"  # (the default, 5000, would score both exactly)
    django_setup()

    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection
    from rest_framework.test import APIClient
    from tqdm import tqdm

    from memory.agents import agent_indexes, agent_recall, worlds
    from memory.embedder import embed_local
    from memory.models import Agent, AgentMemory, AgentMemoryKey, World

    word_vectors = embed_local(list(WORDS))
    owner, _ = get_user_model().objects.get_or_create(username="bench-agent-recall")
    world, _ = World.objects.get_or_create(
        owner=owner, name="recall at scale (word vectors)", defaults={"agent_capacity": max(args.sizes) * 2}
    )
    measured = []
    for size in args.sizes:
        agent, _ = Agent.objects.get_or_create(world=world, external_id=f"holds-{size}")
        have = AgentMemory.objects.filter(agent=agent).count()
        if have < size:
            for start in tqdm(range(have, size, 20_000), desc=f"agent with {size}", unit="batch"):
                _fill(world.pk, agent.pk, min(20_000, size - start), seed=size + start, word_vectors=word_vectors)
        measured.append((size, agent))
    # what the agents' background passes do: their memories' fact keys (a bulk load: the keys' HNSW index is
    # built once after it, as a restore would, not row by row), and an index of its own for a large bank
    pending = AgentMemory.objects.filter(agent__in=[a for _, a in measured], keys_made="").count()
    rebuild = pending > 20_000
    if rebuild:
        with connection.cursor() as cursor:
            cursor.execute("DROP INDEX IF EXISTS agentmemorykey_hnsw_384")
    for size, agent in measured:
        with tqdm(total=size, desc=f"keys of the agent with {size}", unit="memory") as bar:
            while keyed := _keys(agent.pk, word_vectors):
                bar.update(keyed)
    if rebuild:
        started = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute("SET maintenance_work_mem = '1GB'")
            cursor.execute(
                "CREATE INDEX agentmemorykey_hnsw_384 ON memory_agentmemorykey "
                "USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops) WHERE vector_dims(embedding) = 384"
            )
        print(
            f"the keys' HNSW index built over {AgentMemoryKey.objects.count():,} keys ({pending * 2:,} new) "
            f"in {time.perf_counter() - started:.0f} s"
        )
    for size, agent in measured:
        agent_indexes.agent_index_ensure(agent_id=agent.pk)
    total = AgentMemory.objects.count()
    filler = 0
    while total < args.rows:
        agent, _ = Agent.objects.get_or_create(world=world, external_id=f"filler-{filler}")
        batch = min(100_000, args.rows - total)
        for start in tqdm(range(0, batch, 20_000), desc=f"filler {filler}", unit="batch"):
            _fill(
                world.pk,
                agent.pk,
                min(20_000, batch - start),
                seed=7_000_000 + filler * 100_000 + start,
                word_vectors=word_vectors,
            )
        total += batch
        filler += 1
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memory_agentmemory")
    print(f"memory_agentmemory holds {AgentMemory.objects.count():,} rows")

    _, raw_token = worlds.token_create(world=world, name="bench")
    api = APIClient(SERVER_NAME="localhost")
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_token}")
    rng = random.Random(17)

    def ask(count):
        return [f"what about the {rng.choice(WORDS)} and the {rng.choice(WORDS)}?" for _ in range(count)]

    # Each measured question is asked once, the SQL and the API with different questions (a second
    # asking would find its pages cached); first, other questions warm the caches as a busy server's are.
    questions, api_questions, warm_up = ask(args.queries), ask(args.queries), ask(args.warm_up)

    sql_ms: list[float] = []

    def timed(execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            sql_ms[-1] += (time.perf_counter() - started) * 1000

    def measure(agent, exact: bool) -> dict:
        """SQL (both statements of a recall) and API latencies over the questions, and one plan's reads."""
        settings.AGENT_RECALL = {**base_conf, **({"exact_up_to": 10**9} if exact else {})}
        sql_ms.clear()
        api_ms = []
        try:
            for question in tqdm(questions, desc=f"{'exact' if exact else 'recall'}, {agent.external_id}", unit="q"):
                sql_ms.append(0.0)
                with connection.execute_wrapper(timed):
                    agent_recall.agent_recall(
                        world=world, agent=agent, query=question, limit=10, cooldown_s=0, record=False
                    )
            for question in api_questions:
                started = time.perf_counter()
                response = api.post(
                    f"/api/worlds/{world.pk}/agents/{agent.external_id}/recall/",
                    {"query": question, "limit": 10, "cooldown_seconds": 0},
                    format="json",
                )
                api_ms.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200, response.content
            plan = agent_recall.recall_explain(world=world, agent=agent, query=questions[0], limit=10, cooldown_s=0)
        finally:
            settings.AGENT_RECALL = base_conf
        return {
            "sql_p50_ms": round(percentile(sql_ms, 50), 1),
            "sql_p95_ms": round(percentile(sql_ms, 95), 1),
            "api_p50_ms": round(percentile(api_ms, 50), 1),
            "api_p95_ms": round(percentile(api_ms, 95), 1),
            "path": plan["path"],
            "rows_read": round(plan["rows_read"]),
        }

    base_conf = {
        **settings.AGENT_RECALL,
        **{name: json.loads(value) for name, value in (item.split("=", 1) for item in args.set)},
    }
    settings.AGENT_RECALL = base_conf
    rows = []
    for size, agent in measured:
        for question in tqdm(warm_up, desc=f"warm-up, {agent.external_id}", unit="q"):
            agent_recall.agent_recall(world=world, agent=agent, query=question, limit=10, cooldown_s=0, record=False)
            api.post(
                f"/api/worlds/{world.pk}/agents/{agent.external_id}/recall/",
                {"query": question, "limit": 10, "cooldown_seconds": 0},
                format="json",
            )
        now_ = measure(agent, exact=False)
        exact = measure(agent, exact=True) if not args.skip_exact else None
        rows.append({"memories": size, **now_, "exact": exact})
    print_table(
        f"Agent recall against bank size, one table of {total:,} memories ({args.queries} questions each; "
        f"exact scoring up to {base_conf['exact_up_to']:,} memories, index candidates above)",
        [
            "memories of the agent",
            "path",
            "rows read",
            "SQL p50 ms",
            "SQL p95 ms",
            "API p50 ms",
            "API p95 ms",
            "exact: rows read",
            "exact: SQL p95 ms",
            "exact: API p95 ms",
        ],
        [
            [
                f"{r['memories']:,}",
                r["path"],
                f"{r['rows_read']:,}",
                r["sql_p50_ms"],
                r["sql_p95_ms"],
                r["api_p50_ms"],
                r["api_p95_ms"],
                *(
                    [f"{r['exact']['rows_read']:,}", r["exact"]["sql_p95_ms"], r["exact"]["api_p95_ms"]]
                    if r["exact"]
                    else ["-", "-", "-"]
                ),
            ]
            for r in rows
        ],
    )
    print("Target (issue 17): SQL p95 <= 25 ms at 100,000 memories.")
    locomo = None
    if not args.skip_locomo:
        locomo = _locomo()
        print(
            f"LoCoMo R@5 / R@10 (bench/locomo.py --candidates): exact {locomo['R@5']} / {locomo['R@10']}, "
            f"candidate path forced on {locomo['candidate_path']['R@5']} / {locomo['candidate_path']['R@10']} "
            "(target: within 0.5 points)"
        )

    def plot(path):
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        sizes = [r["memories"] for r in rows]
        ax.plot(sizes, [r["sql_p95_ms"] for r in rows], "o-", label="SQL p95")
        ax.plot(sizes, [r["api_p95_ms"] for r in rows], "o--", label="API p95")
        if all(r["exact"] for r in rows):
            ax.plot(sizes, [r["exact"]["sql_p95_ms"] for r in rows], "x:", color="grey", label="exact scoring, SQL p95")
        ax.axhline(25, color="red", linestyle=":", label="target (SQL, 100k)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("memories of the agent")
        ax.set_ylabel("ms")
        ax.set_title("Agent recall cost against bank size")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=120)

    save("agent_recall", rows + ([{"locomo": locomo}] if locomo else []), plot)
    print(
        json.dumps(
            [{"memories": r["memories"], "sql_p95_ms": r["sql_p95_ms"], "api_p95_ms": r["api_p95_ms"]} for r in rows]
        )
    )


if __name__ == "__main__":
    main()
