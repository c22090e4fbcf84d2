"""Recall latency: the project's own ranking inside Postgres (pgvector ``<=>``
on halfvec, STORAGE PLAIN, exact scan after the btree on the adventure) versus
ranking in the application, the way an existing app does it: fetch the bank's
vectors and rank them in pure Python (cold: read from the database every time;
warm: from an in-process cache) and with numpy (warm).

    .venv/bin/python bench/recall.py            # 1M-row table, all configurations
    .venv/bin/python bench/recall.py --quick    # 100k rows, fewer queries (< 3 minutes)

The table is filled once (with a progress bar) and reused by later runs of the
same size. Ends with one line of JSON: one object per configuration.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time

from _setup import django_setup, percentile, print_table, save

BANKS = [100, 1_000, 10_000]
DIMS = [384, 1536]
FILLER_BANK = 1_000  # memories per filler adventure


def model_name(dims: int) -> str:
    return f"bench-{dims}"


def unit(rng: random.Random, dims: int) -> list[float]:
    v = [rng.gauss(0, 1) for _ in range(dims)]
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def populate(total_rows: int, owner) -> dict:
    """Benched banks plus filler adventures until the table holds ``total_rows``."""
    import numpy as np
    from django.db import connection
    from django.utils import timezone
    from pgvector import HalfVector
    from pgvector.psycopg import register_vector
    from tqdm import tqdm

    from memory.models import Memory
    from stories.adventures import story_create
    from stories.models import Adventure, Branch

    wanted = {(dims, bank): f"bench bank {bank} x {dims}d" for dims in DIMS for bank in BANKS}
    existing = {a.title: a for a in Adventure.objects.filter(owner=owner)}
    have = Memory.objects.count()
    if all(t in existing for t in wanted.values()) and have >= total_rows * 0.99:
        print(f"reusing the bench table: {have:,} rows")
        return {key: existing[title] for key, title in wanted.items()}

    Adventure.objects.filter(owner=owner).delete()
    plan: list[tuple[str, int, int]] = [(title, dims, bank) for (dims, bank), title in wanted.items()]
    benched = sum(bank for _, _, bank in plan)
    filler = max(total_rows - Memory.objects.count() - benched, 0)
    for n in range(math.ceil(filler / FILLER_BANK)):
        plan.append((f"bench filler {n}", DIMS[n % len(DIMS)], min(FILLER_BANK, filler - n * FILLER_BANK)))
    rng = np.random.default_rng(7)
    connection.ensure_connection()
    register_vector(connection.connection)  # binary COPY of halfvec (bench connection only)
    # every NOT NULL column without a database default (Django's defaults are applied in Python)
    columns = (
        "adventure_id",
        "branch_id",
        "depth",
        "text",
        "embedding",
        "embedding_model",
        "pinned",
        "forgotten",
        "stale",
        "edited",
        "offline",
        "kind",
        "importance",
        "use_count",
        "created_at",
        "updated_at",
    )
    out = {}
    with tqdm(total=sum(b for _, _, b in plan), desc="filling the memory table", unit="row", unit_scale=True) as bar:
        for title, dims, bank in plan:
            adventure = story_create(owner_id=owner.pk, title=title)
            branch = Branch.objects.get(pk=adventure.head_branch_id)
            vectors = rng.standard_normal((bank, dims)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            now = timezone.now()
            with connection.cursor() as cursor:
                sql = f"COPY memory_memory ({', '.join(columns)}) FROM STDIN WITH (FORMAT BINARY)"
                with cursor.cursor.copy(sql) as copy:
                    copy.set_types(
                        [
                            "int8",
                            "int8",
                            "int4",
                            "text",
                            "halfvec",
                            "varchar",
                            "bool",
                            "bool",
                            "bool",
                            "bool",
                            "bool",
                            "varchar",
                            "float8",
                            "int4",
                            "timestamptz",
                            "timestamptz",
                        ]
                    )
                    for i in range(bank):
                        copy.write_row(
                            (
                                adventure.pk,
                                branch.pk,
                                1,
                                f"memory {i} of {title}",
                                HalfVector(vectors[i]),
                                model_name(dims),
                                False,
                                False,
                                False,
                                False,
                                False,
                                "",
                                0.5,
                                0,
                                now,
                                now,
                            )
                        )
            bar.update(bank)
            if title in wanted.values():
                out[next(k for k, t in wanted.items() if t == title)] = adventure
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memory_memory")
    return out


def time_it(fn, repeats: int) -> list[float]:
    fn()  # warm up
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100k-row table and fewer queries (< 3 minutes)")
    parser.add_argument("--rows", type=int, help="rows in the memory table (default 1,000,000; quick 100,000)")
    parser.add_argument("--queries", type=int, help="timed queries per method and configuration")
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="seconds, tiny sizes: the test suite runs this")
    args = parser.parse_args()
    if args.smoke:  # one small bank of each size class that still runs every method
        global BANKS, DIMS
        BANKS, DIMS = [100], [384]
        args.rows, args.queries, args.quick = 300, 5, True
    rows = args.rows or (100_000 if args.quick else 1_000_000)
    quick = args.quick
    queries = args.queries or (60 if args.quick else 300)
    django_setup()

    import numpy as np
    from django.contrib.auth import get_user_model

    from memory.models import Memory
    from memory.story import retrieval
    from stories.models import Branch

    owner, _ = get_user_model().objects.get_or_create(username="bench-recall")
    banks = populate(rows, owner)
    total = Memory.objects.count()
    rng = random.Random(11)
    results = []
    for dims in DIMS:
        for bank in BANKS:
            adventure = banks[(dims, bank)]
            branch = Branch.objects.get(pk=adventure.head_branch_id)
            model = model_name(dims)
            query_vectors = [unit(rng, dims) for _ in range(8)]
            k = args.top_k
            state = {"i": 0}

            def next_query():
                state["i"] += 1
                return query_vectors[state["i"] % len(query_vectors)]

            def ours():
                return retrieval.rank(branch=branch, vector=next_query(), model=model, top_k=k)

            def fetch():
                return [
                    (pk, list(v))
                    for pk, v in Memory.objects.filter(
                        adventure_id=adventure.pk, embedding_model=model, forgotten=False
                    ).values_list("pk", "embedding")
                ]

            def python_rank(cache, q):
                qn = math.sqrt(sum(x * x for x in q))
                scored = []
                for pk, v, norm in cache:
                    scored.append((sum(a * b for a, b in zip(v, q)) / (norm * qn), pk))
                scored.sort(reverse=True)
                return [pk for _, pk in scored[:k]]

            def python_cold():
                bank_rows = fetch()
                cache = [(pk, v, math.sqrt(sum(x * x for x in v))) for pk, v in bank_rows]
                return python_rank(cache, next_query())

            warm_cache = [(pk, v, math.sqrt(sum(x * x for x in v))) for pk, v in fetch()]
            ids = np.array([pk for pk, _, _ in warm_cache])
            matrix = np.array([v for _, v, _ in warm_cache], dtype=np.float32)
            matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)

            def python_warm():
                return python_rank(warm_cache, next_query())

            def numpy_warm():
                q = np.asarray(next_query(), dtype=np.float32)
                scores = matrix @ (q / np.linalg.norm(q))
                top = np.argpartition(-scores, k)[:k]
                return ids[top[np.argsort(-scores[top])]].tolist()

            # the same top-k, whichever way it was ranked (halfvec rounding aside)
            state["i"] = -1
            ours_ids = [m.id for m in ours()]
            state["i"] = -1
            numpy_ids = numpy_warm()
            agree = len(set(ours_ids) & set(numpy_ids))

            slow_repeats = max(3 if quick else 5, queries // (20 if bank >= 10_000 else 3))
            timings = {
                "ours": time_it(ours, queries),
                "numpy_warm": time_it(numpy_warm, queries),
                "python_warm": time_it(python_warm, slow_repeats),
                "python_cold": time_it(python_cold, slow_repeats),
            }
            row = {
                "bank": bank,
                "dims": dims,
                "table_rows": total,
                "queries": queries,
                "top_k": k,
                "same_top_k_as_numpy": f"{agree}/{k}",
            }
            for name, values in timings.items():
                row[f"{name}_p50_ms"] = round(percentile(values, 50), 3)
                row[f"{name}_p95_ms"] = round(percentile(values, 95), 3)
            for name in ("python_cold", "python_warm", "numpy_warm"):
                row[f"{name}_over_ours"] = round(row[f"{name}_p50_ms"] / row["ours_p50_ms"], 2)
            results.append(row)

    print_table(
        f"Recall of one adventure's bank (top-{args.top_k}) in a {total:,}-row memory table, ms",
        [
            "dims",
            "bank",
            "ours p50",
            "ours p95",
            "numpy warm p50",
            "python warm p50",
            "python cold p50",
            "cold/ours",
            "numpy/ours",
            "same top-k",
        ],
        [
            [
                r["dims"],
                f"{r['bank']:,}",
                r["ours_p50_ms"],
                r["ours_p95_ms"],
                r["numpy_warm_p50_ms"],
                r["python_warm_p50_ms"],
                r["python_cold_p50_ms"],
                f"{r['python_cold_over_ours']}x",
                f"{r['numpy_warm_over_ours']}x",
                r["same_top_k_as_numpy"],
            ]
            for r in results
        ],
    )

    def plot(path):
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(9, 4.5))
        labels = [f"{r['dims']}d\n{r['bank']:,}" for r in results]
        x = np.arange(len(results))
        for i, (name, colour) in enumerate(
            [
                ("ours", "tab:green"),
                ("numpy_warm", "tab:blue"),
                ("python_warm", "tab:orange"),
                ("python_cold", "tab:red"),
            ]
        ):
            ax.bar(x + (i - 1.5) * 0.2, [r[f"{name}_p50_ms"] for r in results], 0.2, label=name, color=colour)
        ax.set_yscale("log")
        ax.set_xticks(x, labels)
        ax.set_ylabel("p50 latency, ms (log)")
        ax.set_title(f"Recall: pgvector in Postgres vs application-side ranking ({total:,}-row table)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=120)

    save("recall-smoke" if args.smoke else "recall-quick" if args.quick else "recall", results, plot)
    print(json.dumps(results))


if __name__ == "__main__":
    sys.exit(main())
