"""Post-turn throughput of the worker pool with 1, 2 and 4 worker processes
against a fake model with 200 ms latency: jobs per second, scaling ratio, and
queue wait p50/p95. Target: 4 workers >= 3.5x one worker. Then the time to
memorize one imported adventure of --backlog actions (one job queued, no
sweeper: each pass writes at most five memories and queues the next).

    .venv/bin/python bench/workers.py [--jobs 48] [--latency 0.2] [--workers 1 2 4] [--backlog 2000]

Ends with one line of JSON: {"throughput": [one object per worker count], "backlog": [...]}."""

from __future__ import annotations

import argparse
import json
import sys
import time

from _setup import django_setup, percentile, print_table, save


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=48, help="post-turn jobs per run (one adventure each)")
    parser.add_argument("--latency", type=float, default=0.2, help="fake model latency, seconds")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--backlog", type=int, default=2000, help="actions of the imported adventure (0: skip)")
    parser.add_argument("--smoke", action="store_true", help="seconds, tiny sizes: the test suite runs this")
    args = parser.parse_args()
    if args.smoke:
        args.jobs, args.latency, args.workers, args.backlog = 4, 0.05, [1], 60
    django_setup()

    from django.contrib.auth import get_user_model
    from tqdm import tqdm

    from memory.models import Memory, PassRun
    from stories.accounts import ai_settings
    from stories.adventures import story_create
    from stories.models import Adventure
    from tests.support.fake_llm import FakeLLM
    from tests.support.processes import Worker, wait_for
    from tests.support.story import grow, memory_reply
    from workers.tasks import post_turn

    fake = FakeLLM(reply=memory_reply)
    fake.latency = args.latency
    user, _ = get_user_model().objects.get_or_create(username="bench-workers")
    ai_settings.ai_settings_update(
        user_id=user.pk, endpoint_url=fake.url, api_key="sk-bench", model="fake", embedding_model="fake-embed"
    )
    results = []
    for count in args.workers:
        Adventure.objects.filter(owner=user).delete()
        ids = []
        for n in tqdm(range(args.jobs), desc=f"stories for {count} worker(s)", unit="adventure"):
            adventure = story_create(
                owner_id=user.pk, title=f"bench {n}", opening="Action 1.", auto_summarize=False, persona_name="Mira"
            )
            grow(adventure, 12)  # one job = two memories = two model calls
            ids.append(adventure.pk)
        workers = [Worker(extra_env={"LOG_LEVEL": "WARNING"}) for _ in range(count)]
        for w in workers:
            w.wait_ready()
        started = time.monotonic()
        enqueued = time.time()
        for adventure_id in ids:
            post_turn.apply_async(args=[adventure_id], kwargs={"enqueued_at": enqueued})
        with tqdm(total=len(ids) * 2, desc=f"{count} worker(s)", unit="memory") as bar:

            def done():
                made = Memory.objects.filter(adventure_id__in=ids).count()
                bar.update(made - bar.n)
                return made == len(ids) * 2

            wait_for(done, timeout=600, interval=0.2, what="all jobs")
        elapsed = time.monotonic() - started
        for w in workers:
            w.stop()
        waits = [
            (run.started_at.timestamp() - enqueued) * 1000
            for run in PassRun.objects.filter(adventure_id__in=ids).order_by("started_at")
        ]
        results.append(
            {
                "workers": count,
                "jobs": len(ids),
                "seconds": round(elapsed, 2),
                "jobs_per_s": round(len(ids) / elapsed, 2),
                "queue_wait_p50_ms": round(percentile(waits, 50)),
                "queue_wait_p95_ms": round(percentile(waits, 95)),
                "model_latency_s": args.latency,
            }
        )
    backlog = []
    if args.backlog:
        from memory.story.marks import MEMORY_INTERVAL

        blocks = args.backlog // MEMORY_INTERVAL
        for count in args.workers:
            Adventure.objects.filter(owner=user).delete()
            adventure = story_create(owner_id=user.pk, title="imported", opening="Action 1.", persona_name="Mira")
            with tqdm(total=args.backlog, desc="the imported story", unit="action") as bar:
                grow(adventure, args.backlog, run=lambda depth: bar.update(1))
            workers = [Worker(extra_env={"LOG_LEVEL": "WARNING"}) for _ in range(count)]
            for w in workers:
                w.wait_ready()
            started = time.monotonic()
            post_turn.apply_async(args=[adventure.pk])
            with tqdm(total=blocks, desc=f"backlog, {count} worker(s)", unit="memory") as bar:

                def caught_up():
                    made = Memory.objects.filter(adventure_id=adventure.pk).count()
                    bar.update(made - bar.n)
                    return made >= blocks

                wait_for(caught_up, timeout=3600, interval=0.5, what="the backlog")
            elapsed = time.monotonic() - started
            for w in workers:
                w.stop()
            passes = PassRun.objects.filter(adventure_id=adventure.pk).count()
            backlog.append(
                {
                    "workers": count,
                    "actions": args.backlog,
                    "memories": blocks,
                    "passes": passes,
                    "seconds": round(elapsed, 1),
                    "model_latency_s": args.latency,
                    "seconds_per_memory": round(elapsed / blocks, 3),
                }
            )
    base = results[0]["jobs_per_s"]
    for row in results:
        row["scaling_vs_1"] = round(row["jobs_per_s"] / base, 2)
    fake.stop()
    print_table(
        f"Post-turn throughput, fake model {args.latency * 1000:.0f} ms (target: 4 workers >= 3.5x)",
        ["workers", "jobs", "seconds", "jobs/s", "scaling", "wait p50 ms", "wait p95 ms"],
        [
            [
                r["workers"],
                r["jobs"],
                r["seconds"],
                r["jobs_per_s"],
                r["scaling_vs_1"],
                r["queue_wait_p50_ms"],
                r["queue_wait_p95_ms"],
            ]
            for r in results
        ],
    )

    def plot(path):
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        xs = [r["workers"] for r in results]
        ax.plot(xs, [r["jobs_per_s"] for r in results], "o-", label="measured")
        ax.plot(xs, [base * x for x in xs], "--", color="grey", label="linear")
        ax.set_xlabel("worker processes")
        ax.set_ylabel("post-turn jobs / s")
        ax.set_title(f"Worker scaling (model latency {args.latency * 1000:.0f} ms)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=120)

    save("workers", results, plot)
    if backlog:
        print_table(
            f"Memorizing one {args.backlog}-action import, fake model {args.latency * 1000:.0f} ms",
            ["workers", "memories", "passes", "seconds", "s / memory"],
            [[r["workers"], r["memories"], r["passes"], r["seconds"], r["seconds_per_memory"]] for r in backlog],
        )
        save("workers_backlog", backlog)
    print(json.dumps({"throughput": results, "backlog": backlog}))


if __name__ == "__main__":
    sys.exit(main())
