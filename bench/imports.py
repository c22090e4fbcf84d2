"""Large imports on a running site: how long each takes as a job, and what other players feel
meanwhile. The real web server (uvicorn) and one real worker at nice 10 (as `make run` runs it);
a player probes `GET /api/adventures/` every 100 ms before and during the imports; --imports
documents are sent at once by as many players, alternating a long story (--actions actions and --memories memories on
one branch) and a chain of --branches branches (each a fork of the one before). Target: other
players' p95 during the imports within 2x their p95 before (and no error), every import done.

    .venv/bin/python bench/imports.py [--imports 4] [--actions 20000] [--memories 30000] [--branches 500]

Ends with one line of JSON: {"probe": {...}, "imports": [one object per import]}."""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
from pathlib import Path

from _setup import django_setup, percentile, print_table, save


def long_story(actions: int, memories: int, title: str) -> dict:
    return {
        "format": "everlore.adventure",
        "version": 1,
        "adventure": {"title": title, "opening": "The road."},
        "head": 1,
        "branches": [{"id": 1, "tip_depth": actions}],
        "actions": [
            {"branch": 1, "depth": d, "kind": "do" if d % 2 else "story", "text": f"Step {d} by the river."}
            for d in range(1, actions + 1)
        ],
        "memories": [{"branch": 1, "depth": min(actions, 6 * k + 6), "text": f"Memory {k}."} for k in range(memories)],
    }


def chain(branches: int, per_branch: int, title: str) -> dict:
    """Branch k forks from branch k-1 after its own ``per_branch`` actions (lineage nearest first)."""
    docs, actions = [], []
    for k in range(branches):
        fork = per_branch * k
        lineage = [[j, per_branch * (j + 1)] for j in range(k - 1, -1, -1)]
        docs.append(
            {
                "id": k,
                "parent": k - 1 if k else None,
                "fork_depth": fork,
                "lineage": lineage,
                "tip_depth": fork + per_branch,
            }
        )
        actions += [
            {"branch": k, "depth": d, "kind": "do" if d % 2 else "story", "text": f"Road {k}, step {d}."}
            for d in range(fork + 1, fork + per_branch + 1)
        ]
    return {
        "format": "everlore.adventure",
        "version": 1,
        "adventure": {"title": title, "opening": "Forks."},
        "head": branches - 1,
        "branches": docs,
        "actions": actions,
    }


def request(port: int, method: str, path: str, token: str, body: bytes | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request(
        method, path, body=body, headers={"Authorization": f"Token {token}", "Content-Type": "application/json"}
    )
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--imports", type=int, default=4, help="documents sent at once")
    parser.add_argument("--actions", type=int, default=20_000)
    parser.add_argument("--memories", type=int, default=30_000)
    parser.add_argument("--branches", type=int, default=500)
    parser.add_argument("--baseline", type=float, default=10.0, help="seconds of probing before the imports")
    parser.add_argument("--smoke", action="store_true", help="seconds, tiny sizes: the test suite runs this")
    args = parser.parse_args()
    if args.smoke:
        args.imports, args.actions, args.memories, args.branches, args.baseline = 2, 2500, 300, 30, 1.0
    django_setup()

    import psutil
    from django.contrib.auth import get_user_model
    from tqdm import tqdm

    from stories.accounts.auth import api_token_for
    from stories.models import Adventure, ImportJob
    from stories.tree.writes import adventure_delete
    from tests.support.processes import Site, Worker

    directory = Path(__import__("os").environ["DATA_DIR"]) / "bench-imports"
    users = get_user_model().objects
    importers = [users.get_or_create(username=f"bench-importer-{n}")[0] for n in range(args.imports)]
    player, _ = users.get_or_create(username="bench-player")
    # a last run's adventures go before a worker starts (its sweep would write their cursors meanwhile),
    # each through the delete that locks the adventure first
    for adventure in Adventure.objects.filter(owner__in=[*importers, player]):
        adventure_delete(adventure_id=adventure.pk)
    ImportJob.objects.filter(owner__in=importers).delete()
    site = Site(directory, DB_POOL_SIZE="10")
    worker = Worker(extra_env={"LOG_LEVEL": "WARNING"}).wait_ready()
    for proc in [psutil.Process(worker.proc.pid), *psutil.Process(worker.proc.pid).children(recursive=True)]:
        proc.nice(10)  # as runsite runs it: memory work and imports yield the cores to players
    importer_tokens, player_token = [api_token_for(u) for u in importers], api_token_for(player)

    probes: list[tuple[float, float, int]] = []  # (when, seconds, status)
    probing = threading.Event()
    probing.set()

    def probe():
        while probing.is_set():
            started = time.monotonic()
            try:
                status, _ = request(site.port, "GET", "/api/adventures/", player_token)
            except OSError:
                status = 0
            probes.append((started, time.monotonic() - started, status))
            time.sleep(0.1)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    try:
        time.sleep(args.baseline)  # the baseline is a span of probes, not a condition
        began = time.monotonic()
        documents = [
            long_story(args.actions, args.memories, f"story {n}")
            if n % 2 == 0
            else chain(args.branches, max(1, args.actions // (4 * args.branches)), f"chain {n}")
            for n in range(args.imports)
        ]
        bodies = [json.dumps(d).encode() for d in documents]
        jobs = []
        for n, body in enumerate(bodies):
            sent = time.monotonic()
            status, data = request(site.port, "POST", "/api/adventures/import/", importer_tokens[n], body)
            assert status == 202, data[:500]
            answered = round(time.monotonic() - sent, 3)
            job = json.loads(data)
            jobs.append(
                {
                    "document": documents[n]["adventure"]["title"],
                    "bytes": len(body),
                    "answered_s": answered,
                    "sent": sent,
                    "token": importer_tokens[n],
                    **job,
                    **({"seconds": answered} if job["status"] == "done" else {}),
                }
            )
        with tqdm(total=len(jobs), desc="imports", unit="import") as bar:
            pending = {j["id"]: j for j in jobs if j["status"] not in ("done", "failed")}
            while pending:
                for job_id, job in list(pending.items()):
                    status, data = request(site.port, "GET", f"/api/imports/{job_id}/", job["token"])
                    state = json.loads(data)
                    if state["status"] in ("done", "failed"):
                        job.update(state, seconds=round(time.monotonic() - job["sent"], 1))
                        del pending[job_id]
                        bar.update(1)
                time.sleep(0.5)
        ended = time.monotonic()
    finally:
        probing.clear()
        prober.join(5)
        worker.stop()
        site.stop()

    before = [s for t, s, _ in probes if t < began]
    during = [s for t, s, _ in probes if began <= t <= ended]
    errors = sum(1 for _, _, status in probes if status != 200)
    probe_row = {
        "before_p50_ms": round(percentile(before, 50) * 1000, 1),
        "before_p95_ms": round(percentile(before, 95) * 1000, 1),
        "during_p50_ms": round(percentile(during, 50) * 1000, 1),
        "during_p95_ms": round(percentile(during, 95) * 1000, 1),
        "probes": len(probes),
        "errors": errors,
    }
    probe_row["p95_ratio"] = round(probe_row["during_p95_ms"] / max(probe_row["before_p95_ms"], 0.1), 2)
    rows = [{k: j.get(k) for k in ("document", "bytes", "rows", "status", "answered_s", "seconds")} for j in jobs]
    print_table(
        "Imports as jobs (worker at nice 10)",
        ["document", "MB", "rows", "status", "202 in s", "done in s"],
        [
            [r["document"], round(r["bytes"] / 1e6, 2), r["rows"], r["status"], r["answered_s"], r["seconds"]]
            for r in rows
        ],
    )
    print_table(
        "Another player's GET /api/adventures/ (target: p95 during <= 2x before, no error)",
        ["before p50", "before p95", "during p50", "during p95", "ratio", "errors"],
        [
            [
                probe_row["before_p50_ms"],
                probe_row["before_p95_ms"],
                probe_row["during_p50_ms"],
                probe_row["during_p95_ms"],
                probe_row["p95_ratio"],
                errors,
            ]
        ],
    )

    def plot(path):
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot([t - began for t, _, _ in probes], [s * 1000 for _, s, _ in probes], ".", markersize=3)
        ax.axvspan(0, ended - began, color="orange", alpha=0.15, label="imports running")
        ax.set_xlabel("seconds from the first import")
        ax.set_ylabel("another player's request, ms")
        ax.set_title(f"{args.imports} large imports as worker jobs")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=120)

    save("imports", {"probe": probe_row, "imports": rows}, plot)
    print(json.dumps({"probe": probe_row, "imports": rows}))
    if any(r["status"] != "done" for r in rows):
        sys.exit("an import did not finish: " + json.dumps(rows))


if __name__ == "__main__":
    sys.exit(main())
