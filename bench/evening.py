"""A hosted site's evening: players come and go as they really do, against
`make run`'s own server (`manage.py runsite`: uvicorn, the Celery worker and
MCP, on this bench's embedded Postgres and Redis) and a fake model that holds
thousands of streams (bench/_stream_model.py, its own process).

Each player plays a streamed turn, reads and thinks for a random while
(exponential, mean --think seconds), and plays again, until --duration ends;
players start as they would be mid-evening (``mid_evening``), so turns come at
the evening's steady rate from the first second, not as a crowd arriving at
once. A refused turn (503 with Retry-After) is retried after the time it names,
as the play page does. Each player's story is under way (bench/_under_way.py): a history of 12-80
turns, its bank of memories, its summary and its marks as a steady pass leaves them, so the memory
work its turns bring comes due at the rate it does in play and each turn ranks a real bank.

For each player count it prints turns/s offered and served, errors by kind,
first-token overhead beyond the model's own p50/p95/p99, turn time beyond the
model, refusals and how fast they came, CPU per served turn by process (web,
Postgres, the worker; the bench's own model and players apart), SQL per turn
(one turn counted in process, as the pinned test counts it), and the memory
backlog at the end with how long it took to drain. A plot over time (offered,
served, first-token p95, CPU) and a final JSON line.

    .venv/bin/python bench/evening.py [--players 300 1000 2000] [--duration 180] [--think 30]
        [--model-seconds 10] [--first-token 0.5] [--smoke]

Targets (issue #28, a 2-core machine): 1,000 players with 0 errors, first-token
overhead p95 <= 250 ms, the memory backlog drained within a minute; at twice
the capacity, admitted turns keep their p95 and every refusal comes within 1 s.
Players are made directly in the database (signup's hashing is not measured)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from _setup import ROOT, clock_bar, django_setup, percentile, print_table, save
from _under_way import give_history
from concurrency import _free_port, _players, _postgres_cpu, _postgres_processes, _wait_live

TEXTS = [
    "look around the square",
    "ask the baker about the fire",
    "follow the stranger north",
    "open the letter",
    'say "Who sent you?"',
    "climb the bell tower",
    "wait for nightfall",
]


def _site(port: int, extra_env: dict) -> subprocess.Popen:
    env = {**os.environ, "LOG_LEVEL": "WARNING", "ALLOW_PRIVATE_ENDPOINTS": "1", "SERVER_TIMING": "1", **extra_env}
    log = Path(os.environ["DATA_DIR"]) / "evening-site.log"  # the site's own log, beside its data
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as stderr:
        site = subprocess.Popen(
            [sys.executable, "manage.py", "runsite", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    site.log_path = str(log)
    return site


def _ahead() -> None:
    """The players and their model stand for other machines: on this one they run ahead of the
    site (nice -10, when allowed), so a saturated site does not slow the clocks that time it."""
    try:
        os.nice(-10)
    except OSError:
        pass


def _model(args) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "bench" / "_stream_model.py"),
            "--model-seconds",
            str(args.model_seconds),
            "--first-token",
            str(args.first_token),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=_ahead,
    )
    port = int(proc.stdout.readline())
    return proc, f"http://127.0.0.1:{port}/v1"


SITE_GROUPS = ("web", "postgres", "worker", "mcp", "redis")  # the site's CPU (Redis counted since 2026-12-07)


def _model_stats(model: subprocess.Popen) -> dict:
    """What the bench's model counted (its last line once its stdin closed): requests, connections."""
    try:
        lines = [line for line in model.stdout.read().splitlines() if line.startswith("{")]
        return json.loads(lines[-1]) if lines else {}
    except (OSError, ValueError):
        return {}


def _groups(site: subprocess.Popen) -> dict[str, list]:
    """The site's processes by role: web (uvicorn and its workers), worker (Celery), Postgres, Redis."""
    import psutil

    from config import embedded

    groups = {"web": [], "worker": [], "mcp": []}
    for p in psutil.Process(site.pid).children(recursive=True):
        try:
            line = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if "uvicorn" in line or "multiprocessing" in line and "uvicorn" in " ".join(p.parent().cmdline()):
            groups["web"].append(p)
        elif "celery" in line:
            groups["worker"].append(p)
        elif "runmcp" in line:
            groups["mcp"].append(p)
    groups["postgres"] = _postgres_processes()
    redis_pid = embedded.redis_pid(Path(os.environ["DATA_DIR"]))  # the live events, the locks, the broker
    groups["redis"] = [psutil.Process(redis_pid)] if redis_pid else []
    return groups


class Sampler(threading.Thread):
    """CPU seconds of each group every second, for the plot and the per-turn figures.

    A group's total counts the processes that have ended too, at their last reading; Postgres's
    backends come and go faster than a reading (a connection a job opened and closed), so
    Postgres is read through its postmaster, whose reaped children's CPU the kernel keeps."""

    def __init__(self, site, others: dict[str, list]):
        super().__init__(daemon=True)
        self.site, self.others, self.stop_event, self.samples = site, others, threading.Event(), []
        self.seen: dict[tuple, tuple[str, float]] = {}  # (pid, start) -> (group, CPU seconds at its last reading)
        self.lock = threading.Lock()

    def totals(self) -> dict[str, float]:
        import psutil

        groups = {**_groups(self.site), **self.others}
        with self.lock:
            for name, procs in groups.items():
                if name == "postgres":  # its backends come and go: counted through the postmaster
                    self.seen[("postgres",)] = (name, _postgres_cpu(procs))
                    continue
                for p in procs:
                    try:
                        times, key = p.cpu_times(), (p.pid, p.create_time())
                    except psutil.Error:
                        continue
                    self.seen[key] = (name, times.user + times.system)
            out = dict.fromkeys(groups, 0.0)
            for name, cpu in self.seen.values():
                out[name] = out.get(name, 0.0) + cpu
        return out

    def run(self):
        while not self.stop_event.is_set():
            self.samples.append((time.monotonic(), self.totals()))
            self.stop_event.wait(1.0)


async def _turn(port: int, token: str, adventure_id: int, text: str) -> dict:
    """One streamed turn on a raw connection: status, seconds to the answer's head, to the first token, to the end."""
    body = json.dumps({"mode": "do", "text": text}).encode()
    head = (
        f"POST /api/adventures/{adventure_id}/turns/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Token {token}\r\nAccept: text/event-stream\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    began = time.monotonic()
    out = {"began": began, "status": None, "head": None, "first": None, "end": None, "retry_after": None, "timing": {}}
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 30)
    except (OSError, asyncio.TimeoutError) as exc:
        out.update(status=f"connect {exc.__class__.__name__}", end=time.monotonic())
        return out
    try:
        writer.write(head + body)
        status_line = await asyncio.wait_for(reader.readline(), 120)
        out["head"] = time.monotonic() - began
        parts = status_line.split()
        code = int(parts[1]) if len(parts) > 1 else 0
        received = bytearray()
        while True:
            chunk = await asyncio.wait_for(reader.read(65536), 120)
            if not chunk:
                break
            if out["first"] is None and b"event: token" in received[-16:] + chunk:
                out["first"] = time.monotonic() - began
            received += chunk
        text_ = bytes(received)
        out["timing"] = _server_timing(text_.split(b"\r\n\r\n", 1)[0])
        if code == 200:
            out["status"] = (
                201 if b"event: done" in text_ else ("stream error" if b"event: error" in text_ else "stream cut")
            )
        else:
            out["status"] = code
            head_ = b"\r\n" + text_.split(b"\r\n\r\n", 1)[0].lower()  # names in any case (the door writes lower)
            if b"\r\nretry-after:" in head_:
                out["retry_after"] = int(head_.split(b"\r\nretry-after:", 1)[1].split(b"\r\n", 1)[0].strip() or 1)
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
        out["status"] = f"{exc.__class__.__name__}"
    finally:
        writer.close()
    out["end"] = time.monotonic() - began
    return out


def _server_timing(head: bytes) -> dict[str, float]:
    """The Server-Timing header (config.server_timing) of an answer's headers after its status line, as
    {phase: ms}; {} without one."""
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"server-timing":
            phases = (part.strip().split(";dur=") for part in value.decode().split(","))
            return {p[0]: float(p[1]) for p in phases if len(p) == 2}
    return {}


def _counts(results: list[dict]) -> dict:
    """Turns served and refused so far (a progress bar's figures)."""
    return {
        "served": sum(1 for r in results if r["status"] == 201),
        "refused": sum(1 for r in results if r["status"] == 503),
    }


def mid_evening(rng: random.Random, think: float, model_seconds: float) -> float:
    """Seconds until a player already mid-evening sends their next turn: the stationary start of a
    player who plays a turn of ``model_seconds`` and thinks (exponential, mean ``think``) in turn.
    A share model/(model+think) are in a turn now (their next comes within its length), the rest think
    (from the turn's end, exponential: the think time has no memory). So turns arrive at the
    evening's steady rate from the first second. (Until 2026-12-07 every player's first turn came
    within one think time: ~32-47 turns/s for the first 30 s at 1,000 players against the steady 25,
    a crowd arriving that the refusals of those runs answered.)"""
    cycle = model_seconds + think
    if rng.random() < model_seconds / cycle:
        return rng.uniform(0, model_seconds)
    return model_seconds + rng.expovariate(1.0 / think)


async def _evening(
    port: int, players, *, duration: float, think: float, seed: int, model_seconds: float | None
) -> list[dict]:
    """Each player's turns until ``duration`` ends; model_seconds None: every player's first turn at once."""
    rng = random.Random(seed)
    results: list[dict] = []
    stop_at = time.monotonic() + duration

    async def player(token: str, adventure_id: int):
        if model_seconds is not None:
            await asyncio.sleep(mid_evening(rng, think, model_seconds))  # mid-evening, not all arriving now
        while time.monotonic() < stop_at:
            result = await _turn(port, token, adventure_id, rng.choice(TEXTS))
            results.append(result)
            wait = (result["retry_after"] or 1) if result["status"] == 503 else rng.expovariate(1.0 / think)
            # refused: the page waits as told and tries again; a player thinking past the end leaves
            await asyncio.sleep(max(0.0, min(wait, stop_at - time.monotonic())))

    bar = asyncio.create_task(clock_bar(f"{len(players)} players", duration, lambda: _counts(results)))
    await asyncio.gather(*(player(t, a) for t, a in players))
    bar.cancel()
    return results


def _sql_per_turn(fake_url: str) -> int:
    """One turn's SQL statements in process (the same route as the load, as the pinned test counts them)."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    token, adventure_id = _players(1, fake_url, prefix="bench-sql-")[0]
    client = Client(HTTP_AUTHORIZATION=f"Token {token}", HTTP_HOST="localhost")
    path = f"/api/adventures/{adventure_id}/turns/"
    client.post(path, {"mode": "do", "text": "warm up"}, content_type="application/json")
    with CaptureQueriesContext(connection) as queries:
        client.post(path, {"mode": "do", "text": "look"}, content_type="application/json")
    return len(queries)


# the players the load benches make (their stories, under way, would come due for ever once their model is gone)
BENCH_PLAYERS = ("bench-evening-", "bench-together-", "bench-guest-", "bench-alone-", "bench-crowd-", "bench-prof-")


def forget_players(prefixes: tuple[str, ...]) -> int:
    """Delete the players earlier runs of a bench left in the bench database, with their stories.
    Their last turns' memory work was never done (a run stopped, or its drain ran out, and their
    model is gone), so every later run's pass worker would try it beside the turns it measures, each
    try failing after the SDK's retries (an evening's profile found its threads there): 1,255
    stories behind were found before one run, ~24 s to delete 24,000 players."""
    from django.contrib.auth import get_user_model
    from django.db import IntegrityError
    from django.db.models import Q

    from config.celery import QUEUES
    from config.redis_pool import redis_client

    redis_client().delete(*QUEUES)  # their queued memory work, which the site's worker would start on
    q = Q()
    for prefix in prefixes:
        q |= Q(username__startswith=prefix)
    ids = list(get_user_model().objects.filter(q).values_list("pk", flat=True))
    for i in range(0, len(ids), 500):
        for attempt in range(5):
            try:  # a pass already running may log a model call of a story being deleted
                get_user_model().objects.filter(pk__in=ids[i : i + 500]).delete()
                break
            except IntegrityError:
                if attempt == 4:
                    raise
    return len(ids)


def _backlog(adventure_ids: list[int] | None = None) -> int:
    from memory.story import memory_pass

    behind = memory_pass.adventures_behind(limit=10**6)
    return len(behind) if adventure_ids is None else len(set(behind) & set(adventure_ids))


def _drain(timeout: float, adventure_ids: list[int] | None = None) -> tuple[int, float | None]:
    """Adventures behind at the end (of ``adventure_ids``: a run's own; an earlier run's stories
    whose bench model is gone fail their passes, back off and come due again for ever), and seconds
    until none is (None: not within ``timeout``)."""
    began = time.monotonic()
    first = _backlog(adventure_ids)
    while time.monotonic() - began < timeout:
        if _backlog(adventure_ids) == 0:
            return first, round(time.monotonic() - began, 1)
        time.sleep(2)
    return first, None


def _summary(count: int, results: list[dict], cpu: dict[str, float], args, drained) -> dict:
    served = [r for r in results if r["status"] == 201]
    refused = [r for r in results if r["status"] == 503]
    errors: dict[str, int] = {}
    for r in results:
        if r["status"] not in (201, 503):
            errors[str(r["status"])] = errors.get(str(r["status"]), 0) + 1
    overhead = [(r["first"] - args.first_token) * 1000 for r in served if r["first"] is not None]
    beyond = [(r["end"] - args.model_seconds) * 1000 for r in served]
    n = max(1, len(served))
    return {
        "players": count,
        "turns": len(results),
        "served": len(served),
        "refused": len(refused),
        "errors": sum(errors.values()),
        "errors_by_kind": errors,
        "offered_per_s": round(len(results) / args.duration, 2),
        "served_per_s": round(len(served) / args.duration, 2),
        "first_token_overhead_ms": {p: round(percentile(overhead, p), 1) for p in (50, 95, 99)} if overhead else {},
        "turn_beyond_model_ms": {p: round(percentile(beyond, p), 1) for p in (50, 95)} if beyond else {},
        "refusal_s": {p: round(percentile([r["end"] for r in refused], p), 3) for p in (50, 95, 100)}
        if refused
        else {},
        "cpu_ms_per_turn": {k: round(v * 1000 / n, 1) for k, v in cpu.items()},
        "site_cpu_ms_per_turn": round(sum(v for k, v in cpu.items() if k in SITE_GROUPS) * 1000 / n, 1),
        "backlog_at_end": drained[0],
        "backlog_drained_s": drained[1],
    }


def _with_memory_work(row: dict, drain_cpu: dict[str, float]) -> dict:
    """The site's CPU a served turn with the memory work its turns left behind at the run's end
    (done in the drain after it): what a turn costs in all, once the pass has caught up (None when
    the backlog did not drain within the bench's wait: the figure would leave work out)."""
    n = max(1, row["served"])
    drain = {k: round(v * 1000 / n, 1) for k, v in drain_cpu.items() if k in SITE_GROUPS}
    whole = round(row["site_cpu_ms_per_turn"] + sum(drain.values()), 1)
    return {
        "drain_cpu_ms_per_turn": drain,
        "site_cpu_ms_per_turn_with_memory_work": whole if row["backlog_drained_s"] is not None else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--players", type=int, nargs="+", default=[300, 1000, 2000])
    parser.add_argument("--duration", type=float, default=180.0, help="seconds during which turns start")
    parser.add_argument("--think", type=float, default=30.0, help="mean seconds a player reads and thinks")
    parser.add_argument("--model-seconds", type=float, default=10.0)
    parser.add_argument("--first-token", type=float, default=0.5)
    parser.add_argument("--drain-timeout", type=float, default=180.0)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--label", default="site")
    parser.add_argument("--smoke", action="store_true", help="seconds, tiny sizes: the test suite runs this")
    args = parser.parse_args()
    if args.smoke:
        args.players, args.duration, args.think, args.model_seconds = [3], 3.0, 0.5, 1.0
        args.first_token, args.drain_timeout = 0.1, 60.0
        os.environ.setdefault("WEB_CONCURRENCY", "1")  # one web process: a smoke checks the bench runs
    django_setup()

    model, fake_url = _model(args)
    port = _free_port()
    try:
        site = _site(port, {"WEB_CONCURRENCY": os.environ.get("WEB_CONCURRENCY", "2"), "MCP_PORT": str(_free_port())})
    except BaseException:
        model.stdin.close()
        model.wait(10)
        raise
    _ahead()  # the players, after the site was started at the usual priority
    rows, timeline = [], []
    try:
        _wait_live(f"http://127.0.0.1:{port}", site, timeout=180)
        if not args.smoke:
            print(f"forgot {forget_players(BENCH_PLAYERS)} players of earlier runs", flush=True)
        sql = _sql_per_turn(fake_url)
        import psutil

        me = psutil.Process()
        warm = _players(4, fake_url, prefix="bench-evening-warm-")
        asyncio.run(_evening(port, warm, duration=0.1, think=0.1, seed=args.seed, model_seconds=None))  # warm now
        for count in args.players:
            players = _players(count, fake_url, prefix="bench-evening-")
            give_history([aid for _, aid in players], seed=args.seed + count)  # stories under way
            _drain(args.drain_timeout, [aid for _, aid in players])  # the players' setup leaves none behind
            sampler = Sampler(site, {"bench model": [psutil.Process(model.pid)], "bench players": [me]})
            before = sampler.totals()
            sampler.start()
            began = time.monotonic()
            results = asyncio.run(
                _evening(
                    port,
                    players,
                    duration=args.duration,
                    think=args.think,
                    seed=args.seed + count,
                    model_seconds=args.model_seconds,
                )
            )
            sampler.stop_event.set()
            sampler.join(5)
            after = sampler.totals()
            drained = _drain(args.drain_timeout, [aid for _, aid in players])
            settled = sampler.totals()  # the memory work the turns left behind, done while draining
            cpu = {k: max(0.0, after.get(k, 0.0) - before.get(k, 0.0)) for k in after}
            row = _summary(count, results, cpu, args, drained)
            row.update(_with_memory_work(row, {k: max(0.0, settled.get(k, 0.0) - after.get(k, 0.0)) for k in after}))
            row["sql_per_turn"] = sql
            rows.append(row)
            timeline.append(
                {
                    "players": count,
                    "began": began,
                    "samples": sampler.samples,
                    "results": [
                        {"t": r["began"] - began, "status": str(r["status"]), "first": r["first"]} for r in results
                    ],
                }
            )
    finally:
        os.killpg(site.pid, signal.SIGTERM)
        try:
            site.wait(40)
        except subprocess.TimeoutExpired:
            os.killpg(site.pid, signal.SIGKILL)
        model.stdin.close()
        model.wait(10)
    served_model = _model_stats(model)
    print(
        f"the model served {served_model.get('chat', 0)} chat and {served_model.get('embeddings', 0)} embedding "
        f"requests on {served_model.get('connections', 0)} connections"
    )

    print_table(
        f"An evening: think {args.think:g} s, model {args.model_seconds:g} s (first token "
        f"{args.first_token:g} s), {args.duration:g} s",
        [
            "players",
            "turns/s offered",
            "served/s",
            "errors",
            "refused (p95 s)",
            "first token + p50/p95/p99 ms",
            "beyond model p50/p95 ms",
            "CPU ms/turn web+PG+worker+Redis",
            "SQL/turn",
            "backlog (drained s)",
            "CPU ms/turn with its memory work",
        ],
        [
            [
                r["players"],
                r["offered_per_s"],
                r["served_per_s"],
                f"{r['errors']} {r['errors_by_kind'] or ''}",
                f"{r['refused']} ({r['refusal_s'].get(95, '-')})",
                "/".join(str(r["first_token_overhead_ms"].get(p, "-")) for p in (50, 95, 99)),
                "/".join(str(r["turn_beyond_model_ms"].get(p, "-")) for p in (50, 95)),
                f"{r['site_cpu_ms_per_turn']} = {r['cpu_ms_per_turn'].get('web')}+"
                f"{r['cpu_ms_per_turn'].get('postgres')}+{r['cpu_ms_per_turn'].get('worker')}"
                f"+{r['cpu_ms_per_turn'].get('redis')}",
                r["sql_per_turn"],
                f"{r['backlog_at_end']} ({r['backlog_drained_s']})",
                f"{r['site_cpu_ms_per_turn_with_memory_work'] or 'not drained'} (drain "
                f"+{round(sum(r['drain_cpu_ms_per_turn'].values()), 1)})",
            ]
            for r in rows
        ],
    )

    def plot(path):
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(len(timeline), 1, figsize=(9, 3.2 * len(timeline)), squeeze=False)
        for ax, run in zip(axes[:, 0], timeline):
            end = int(args.duration + args.model_seconds) + 2
            offered, served = [0] * end, [0] * end
            by_second: dict[int, list[float]] = {}
            for r in run["results"]:
                s = int(r["t"])
                if 0 <= s < end:
                    offered[s] += 1
                    served[s] += r["status"] == "201"
                    if r["first"] is not None:
                        by_second.setdefault(s // 10, []).append((r["first"] - args.first_token) * 1000)
            ax.plot(range(end), offered, label="turns offered /s", alpha=0.6)
            ax.plot(range(end), served, label="served /s", alpha=0.6)
            ax.set_ylabel("turns per second")
            ax.set_xlabel("seconds")
            ax2 = ax.twinx()
            xs = sorted(by_second)
            ax2.plot(
                [x * 10 + 5 for x in xs],
                [percentile(by_second[x], 95) for x in xs],
                "r.-",
                label="first token + p95 ms (10 s)",
            )
            samples = run["samples"]
            cpu = [(t - run["began"], sum(v for k, v in c.items() if not k.startswith("bench"))) for t, c in samples]
            ax2.plot(
                [t for (t, _), _ in zip(cpu[1:], cpu)],
                [max(0.0, (b - a) / max(1e-6, tb - ta)) * 500 for (tb, b), (ta, a) in zip(cpu[1:], cpu)],
                "k:",
                label="site CPU (x500 = cores)",
            )
            ax2.set_ylabel("ms")
            ax.set_title(f"{run['players']} players")
            ax.legend(loc="upper left", fontsize=7)
            ax2.legend(loc="upper right", fontsize=7)
        fig.tight_layout()
        fig.savefig(path)

    result = {
        "label": args.label,
        "think_s": args.think,
        "model_seconds": args.model_seconds,
        "duration_s": args.duration,
        "runs": rows,
        "model_server": served_model,
    }
    save(f"evening-{args.label}" + ("-smoke" if args.smoke else ""), [result], plot)
    print(json.dumps(result))


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    main()
