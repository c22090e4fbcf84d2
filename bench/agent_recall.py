"""Agent recall at scale: how recall's cost grows with an agent's bank.

One world table of --rows agent memories (1,000,000 by default: the agents
measured plus filler agents sharing the table), made directly in SQL with
random words and random unit vectors (the ranking's cost does not depend on
what the words mean). For agents holding each of --sizes memories, --queries
questions are asked: the ranked SQL alone (timed around the one query), and
through the recall API (in-process, query embedding with the local model
included). The data is kept between runs (a second run only measures).

    .venv/bin/python bench/agent_recall.py [--sizes 2000 20000 100000] [--rows 1000000] [--queries 40]

Target (issue 17): SQL p95 <= 25 ms at 100,000 memories. Today recall scores
every memory of the agent in the window (exact), so its cost grows with the
bank. Ends with one line of JSON: a list of {"memories", "sql_p95_ms", "api_p95_ms"}.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from _setup import django_setup, percentile, print_table, save

WORDS = ("river bridge market lantern festival harbor garden tower forest castle village storm winter summer "
         "bread apple sword shield letter map coin horse boat song dance painting pottery camping hiking "
         "studio business loan rent friend sister brother mother father teacher doctor guard merchant "
         "travel trip city rome paris london school class exam job interview tattoo puppy cat dog gift "
         "birthday wedding party dinner lunch breakfast coffee tea book movie game music concert").split()


def _fill(world_id: int, agent_id: int, count: int, seed: int) -> None:
    """``count`` memories for one agent, in SQL: a dozen random words, a random unit vector, a time in the last year."""
    from django.db import connection

    from memory.embedder import LOCAL_MODEL

    with connection.cursor() as cursor:
        cursor.execute("SELECT setseed(%s)", [(seed % 1_999) / 2_000])
        cursor.execute("""
            INSERT INTO memory_agentmemory (agent_id, world_id, partner, actor, location, kind, content, metadata,
                embedding, embedding_model, importance, pinned, occurred_at, created_at, updated_at,
                retrieval_count)
            SELECT %(agent)s, %(world)s, 'p' || (g %% 7), 'a' || (g %% 5), '', 'say',
                   array_to_string(ARRAY(SELECT (%(words)s::text[])[1 + floor(random() * %(n)s)::int]
                                         FROM generate_series(1, 12) WHERE g > 0), ' '),
                   '{}'::jsonb,
                   (SELECT l2_normalize(array_agg(random() - 0.5)::vector)::halfvec
                    FROM generate_series(1, 384) WHERE g > 0),
                   %(model)s, random(), false, now() - random() * interval '360 days', now(), now(), 0
            FROM generate_series(1, %(count)s) AS g
        """, {"agent": agent_id, "world": world_id, "words": list(WORDS), "n": len(WORDS), "count": count,
              "model": LOCAL_MODEL})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 20000, 100000])
    parser.add_argument("--rows", type=int, default=1_000_000, help="memories in the whole table, at least")
    parser.add_argument("--queries", type=int, default=40)
    args = parser.parse_args()
    django_setup()

    from django.contrib.auth import get_user_model
    from django.db import connection
    from rest_framework.test import APIClient
    from tqdm import tqdm

    from memory import agent_recall, worlds
    from memory.models import Agent, AgentMemory, World

    owner, _ = get_user_model().objects.get_or_create(username="bench-agent-recall")
    world, _ = World.objects.get_or_create(owner=owner, name="recall at scale",
                                           defaults={"agent_capacity": max(args.sizes) * 2})
    measured = []
    for size in args.sizes:
        agent, _ = Agent.objects.get_or_create(world=world, external_id=f"holds-{size}")
        have = AgentMemory.objects.filter(agent=agent).count()
        if have < size:
            for start in tqdm(range(have, size, 20_000), desc=f"agent with {size}", unit="batch"):
                _fill(world.pk, agent.pk, min(20_000, size - start), seed=size + start)
        measured.append((size, agent))
    total = AgentMemory.objects.count()
    filler = 0
    while total < args.rows:
        agent, _ = Agent.objects.get_or_create(world=world, external_id=f"filler-{filler}")
        batch = min(100_000, args.rows - total)
        for start in tqdm(range(0, batch, 20_000), desc=f"filler {filler}", unit="batch"):
            _fill(world.pk, agent.pk, min(20_000, batch - start), seed=7_000_000 + filler * 100_000 + start)
        total += batch
        filler += 1
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memory_agentmemory")
    print(f"memory_agentmemory holds {AgentMemory.objects.count():,} rows")

    _, raw_token = worlds.token_create(world=world, name="bench")
    api = APIClient(SERVER_NAME="localhost")
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_token}")
    rng = random.Random(17)
    questions = [f"what about the {rng.choice(WORDS)} and the {rng.choice(WORDS)}?" for _ in range(args.queries)]

    timings: dict[str, list[float]] = {}

    def timed(execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            if "WITH q AS" in sql:  # the recall query
                timings.setdefault("sql", []).append((time.perf_counter() - started) * 1000)

    rows = []
    for size, agent in measured:
        timings.clear()
        api_ms = []
        for question in tqdm(questions, desc=f"recall, {size} memories", unit="q"):
            with connection.execute_wrapper(timed):
                agent_recall.agent_recall(world=world, agent=agent, query=question, limit=10, cooldown_s=0,
                                          record=False)
            started = time.perf_counter()
            response = api.post(f"/api/worlds/{world.pk}/agents/{agent.external_id}/recall/",
                                {"query": question, "limit": 10, "cooldown_seconds": 0}, format="json")
            api_ms.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, response.content
        sql = timings.get("sql", [])
        rows.append({"memories": size, "sql_p50_ms": round(percentile(sql, 50), 1),
                     "sql_p95_ms": round(percentile(sql, 95), 1), "api_p50_ms": round(percentile(api_ms, 50), 1),
                     "api_p95_ms": round(percentile(api_ms, 95), 1)})
    print_table(f"Agent recall, exact scoring, one table of {total:,} memories ({args.queries} questions each)",
                ["memories of the agent", "SQL p50 ms", "SQL p95 ms", "API p50 ms", "API p95 ms"],
                [[f'{r["memories"]:,}', r["sql_p50_ms"], r["sql_p95_ms"], r["api_p50_ms"], r["api_p95_ms"]]
                 for r in rows])
    print("Target (issue 17): SQL p95 <= 25 ms at 100,000 memories.")

    def plot(path):
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot([r["memories"] for r in rows], [r["sql_p95_ms"] for r in rows], "o-", label="SQL p95")
        ax.plot([r["memories"] for r in rows], [r["api_p95_ms"] for r in rows], "o--", label="API p95")
        ax.axhline(25, color="red", linestyle=":", label="target (SQL, 100k)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("memories of the agent")
        ax.set_ylabel("ms")
        ax.set_title("Agent recall cost against bank size")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=120)

    save("agent_recall", rows, plot)
    print(json.dumps([{"memories": r["memories"], "sql_p95_ms": r["sql_p95_ms"], "api_p95_ms": r["api_p95_ms"]}
                      for r in rows]))


if __name__ == "__main__":
    main()
