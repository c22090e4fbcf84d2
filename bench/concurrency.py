"""Many players at once: N players each play one turn at the same moment
against `make run`'s own server (`manage.py runsite`, on this bench's embedded
Postgres and Redis) and a fake model that takes --model-seconds per reply
(streamed: the first token after --first-token seconds, then a word at a time).

For each N it prints errors, turn time p50/p95/max, the most model calls in
flight at once (seen by the fake), time to the first streamed token p50/p95
minus the model's own (when the site streams), the most database connections
in use (all, and the web processes' pooled ones), CPU time per turn outside
the model (web processes plus Postgres), the web processes' memory, and
/healthz (which asks the database) timed every half second while they play. Then, with --slow-clients connections sending a
body a byte a second, the latency of /healthz/live. A PNG plot and a final
JSON line. With --retry a busy refusal is sent again after its Retry-After, as
the play page does: turn times are then from the crowd's start to each answer
(issue #50's crowd: --players 200 --model-seconds 20 --stream --retry, the last
answers p95 <= 23 s, 0 errors).

    .venv/bin/python bench/concurrency.py [--players 10 100 500 1000] [--model-seconds 30] [--slow-clients 200]
        [--stream] [--retry]

Targets (the ASGI site of issue #16, on a 2-core machine): N = 1,000 with 0
errors, all 1,000 model calls in flight at once, p95 turn time <= model + 3 s,
database connections never above the pool size; first-token overhead p95 <=
50 ms at N = 100; CPU per turn outside the model <= 20 ms; /healthz/live p95
< 100 ms with 200 slow clients. Players are created directly in the database
(signup's password hashing is not what is measured)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _setup import ROOT, django_setup, percentile, print_table, save

WORDS = 60  # words in each fake reply


def _site(port: int, smoke: bool = False) -> subprocess.Popen:
    env = {**os.environ, "LOG_LEVEL": "WARNING", "ALLOW_PRIVATE_ENDPOINTS": "1", "MCP_PORT": str(_free_port())}
    if smoke:
        # In the test suite the machine's cores are busy with the suite itself, not with this site:
        # the admission's machine-wide signals (loop lag, CPU) would refuse the smoke's three turns.
        env.update(ADMISSION_LAG_MS="0", ADMISSION_CPU_BUSY_PCT="0", TURN_START_WAIT_MS="60000")
    # what the site says goes to a file: a pipe nobody reads blocks the site once it is full,
    # and the file's tail says why a site did not come up
    log = tempfile.NamedTemporaryFile(prefix="bench-site-", suffix=".log", delete=False)
    site = subprocess.Popen(
        [sys.executable, "manage.py", "runsite", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    site.log_path = log.name
    log.close()
    return site


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_live(base: str, site: subprocess.Popen | None = None, timeout: float = 180.0) -> None:
    """Until the site answers /healthz/live; a site that exits or stays silent ends the bench with
    the tail of what it said."""
    import httpx2

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if site is not None and site.poll() is not None:
            raise SystemExit(f"the site exited ({site.returncode}) before it came up:\n{_said(site)}")
        try:
            if httpx2.get(f"{base}/healthz/live", timeout=2).status_code == 200:
                return
        except httpx2.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"the site did not come up in {timeout:.0f} s:\n{_said(site)}")


def _said(site: subprocess.Popen | None, chars: int = 3000) -> str:
    path = getattr(site, "log_path", None)
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()[-chars:]
    except OSError:
        return ""


def _web_processes(site: subprocess.Popen):
    """The web server and its worker processes (uvicorn spawns them; their command line is Python's own)."""
    import psutil

    servers = [
        p
        for p in psutil.Process(site.pid).children(recursive=True)
        if any("gunicorn" in part or "uvicorn" in part for part in p.cmdline())
    ]
    return [*servers, *(child for server in servers for child in server.children(recursive=True))]


def _postgres_processes():
    """This bench's postmaster (its data directory is on its command line) and its backends."""
    import psutil

    data = os.environ["DATA_DIR"]
    for p in psutil.process_iter(["name", "cmdline"]):
        try:
            if (p.info["name"] or "").startswith("postgres") and data in " ".join(p.info["cmdline"] or []):
                return [p, *p.children()]
        except psutil.Error:
            continue
    return []


def _postgres_cpu(processes) -> float:
    """CPU seconds of this bench's Postgres: the postmaster, the backends that have ended (the
    postmaster's reaped children: a connection a job opened and closed lives well under the
    sampling second, and a sum over the living missed it) and the backends alive now."""
    if not processes:
        return 0.0
    try:
        times = processes[0].cpu_times()
    except Exception:
        return 0.0
    ended = times.user + times.system + getattr(times, "children_user", 0.0) + getattr(times, "children_system", 0.0)
    return ended + _cpu(processes[1:])


def _cpu(processes) -> float:
    import psutil

    total = 0.0
    for p in processes:
        try:
            times = p.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            continue
    return total


RUN = int(time.time())  # names this run's players: earlier runs' adventures may still have memory passes running
_BATCHES = iter(range(1_000_000))


def _players(count: int, fake_url: str, prefix: str = "bench-crowd-") -> list[tuple[str, int]]:
    """(API token, adventure id) for ``count`` players, made directly in the database."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token
    from tqdm import tqdm

    from stories.accounts import ai_settings
    from stories.adventures import story_create

    User = get_user_model()
    batch = next(_BATCHES)
    users = User.objects.bulk_create([User(username=f"{prefix}{RUN}-{batch}-{n}", password="!") for n in range(count)])
    tokens = Token.objects.bulk_create([Token(user=u, key=Token.generate_key()) for u in users])
    out = []
    for user, token in tqdm(list(zip(users, tokens)), desc="players", unit="player"):
        ai_settings.ai_settings_update(user_id=user.pk, endpoint_url=fake_url, api_key="sk-bench", model="fake")
        adventure = story_create(owner_id=user.pk, title="Crowd", opening="The square fills with people.")
        out.append((token.key, adventure.pk))
    return out


async def _play_all(base: str, players, *, stream: bool, retry: bool = False) -> list[dict]:
    """Each player's one turn, all sent at the same moment. ``retry``: a busy refusal (503 with
    Retry-After) is sent again after the seconds it names, as the play page does; a turn's seconds are
    then from the crowd's start to its answer, and ``refused`` counts the refusals on its way."""
    import httpx2

    limits = httpx2.Limits(max_connections=len(players) + 10, max_keepalive_connections=0)
    async with httpx2.AsyncClient(base_url=base, timeout=httpx2.Timeout(600.0), limits=limits) as client:
        start = asyncio.Event()

        async def once(headers: dict, adventure_id: int, began: float) -> dict:
            first, retry_after = None, None
            try:
                async with client.stream(
                    "POST",
                    f"/api/adventures/{adventure_id}/turns/",
                    headers=headers,
                    json={"mode": "do", "text": "look around the square"},
                ) as response:
                    events = response.headers.get("content-type", "").startswith("text/event-stream")
                    body = []
                    async for chunk in response.aiter_bytes():
                        body.append(chunk)
                        if first is None and events and b"event: token" in chunk:
                            first = time.monotonic() - began
                    status = response.status_code
                    if events:  # a streamed turn succeeded when its last event is "done"
                        status = 201 if b"\nevent: done\n" in b"".join(body) else "stream error"
                    elif status == 503:
                        retry_after = float(response.headers.get("retry-after") or 1)
            except httpx2.HTTPError as exc:
                status = f"{exc.__class__.__name__}"
            return {"status": status, "first": first, "retry_after": retry_after}

        async def one(token: str, adventure_id: int) -> dict:
            headers = {"Authorization": f"Token {token}"}
            if stream:
                headers["Accept"] = "text/event-stream"
            await start.wait()
            began, refused = time.monotonic(), 0
            while True:
                sent = time.monotonic()
                out = await once(headers, adventure_id, sent)
                if not (retry and out["status"] == 503 and out["retry_after"] is not None):
                    break
                refused += 1
                await asyncio.sleep(out["retry_after"])
            first = None if out["first"] is None else out["first"] + (sent - began)
            return {"status": out["status"], "seconds": time.monotonic() - began, "first": first, "refused": refused}

        tasks = [asyncio.create_task(one(t, a)) for t, a in players]
        await asyncio.sleep(0.5)  # every request is ready and waiting for the start
        start.set()
        return await asyncio.gather(*tasks)


def _db_connections_watch(stop: threading.Event, seen: list[int]) -> None:
    import psycopg
    from django.conf import settings

    db = settings.DATABASES["default"]
    with psycopg.connect(
        host=db["HOST"],
        port=db.get("PORT") or None,
        dbname=db["NAME"],
        user=db["USER"],
        password=db.get("PASSWORD") or None,
        autocommit=True,
    ) as conn:
        while not stop.is_set():
            row = conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE application_name = 'everlore-web') "
                "FROM pg_stat_activity WHERE datname = current_database() "
                "AND backend_type = 'client backend'"
            ).fetchone()
            seen.append((int(row[0]) - 1, int(row[1])))  # not this watcher
            stop.wait(0.2)


def _health_watch(base: str, stop: threading.Event, seen: list[float]) -> None:
    """/healthz (database, Redis, workers) timed every half second while the crowd plays."""
    import httpx2

    while not stop.wait(0.5):
        began = time.monotonic()
        try:
            httpx2.get(f"{base}/healthz", timeout=10)
        except httpx2.HTTPError:
            pass
        seen.append((time.monotonic() - began) * 1000)


def _slow_clients(base: str, count: int, seconds: float) -> dict:
    """``count`` connections each sending a request body a byte a second, while
    /healthz/live is timed; returns its latencies."""
    import httpx2

    host, port = base.removeprefix("http://").split(":")
    stop = threading.Event()
    sockets = []

    def trickle():
        for s in sockets:
            try:
                s.sendall(
                    b"POST /api/auth/login/ HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 100000\r\n\r\n{"
                )
            except OSError:
                pass
        while not stop.wait(1.0):
            for s in sockets:
                try:
                    s.sendall(b" ")
                except OSError:
                    pass

    for _ in range(count):
        try:
            sockets.append(socket.create_connection((host, int(port)), timeout=5))
        except OSError:
            break
    feeder = threading.Thread(target=trickle, daemon=True)
    feeder.start()
    time.sleep(2)
    latencies, failures = [], 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        began = time.monotonic()
        try:
            httpx2.get(f"{base}/healthz/live", timeout=10).raise_for_status()
        except httpx2.HTTPError:
            failures += 1
        latencies.append((time.monotonic() - began) * 1000)
        time.sleep(0.2)
    stop.set()
    for s in sockets:
        s.close()
    return {
        "slow_clients": len(sockets),
        "live_p50_ms": round(percentile(latencies, 50), 1),
        "live_p95_ms": round(percentile(latencies, 95), 1),
        "live_failures": failures,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--players", type=int, nargs="+", default=[10, 100, 500, 1000])
    parser.add_argument("--model-seconds", type=float, default=30.0)
    parser.add_argument("--first-token", type=float, default=0.5)
    parser.add_argument("--slow-clients", type=int, default=200)
    parser.add_argument("--slow-seconds", type=float, default=20.0, help="how long /healthz/live is timed")
    parser.add_argument("--stream", action="store_true", help="ask for text/event-stream (the streaming site)")
    parser.add_argument(
        "--warmup",
        type=int,
        default=8,
        help="turns played (and not measured) first, so every web process has loaded its embedder",
    )
    parser.add_argument(
        "--retry",
        action="store_true",
        help="a busy refusal is sent again after its Retry-After, as the play page does (turn times from the start)",
    )
    parser.add_argument("--label", default="site", help="names the results file: concurrency-<label>.json")
    parser.add_argument("--smoke", action="store_true", help="seconds, tiny sizes: the test suite runs this")
    args = parser.parse_args()
    if args.smoke:
        args.players, args.model_seconds, args.first_token, args.slow_clients = [3], 1.0, 0.1, 5
        args.slow_seconds, args.warmup, args.stream = 2.0, 1, True
    django_setup()

    from tests.support.fake_llm import FakeLLM

    fake = FakeLLM()
    words = " ".join(f"word{n}" for n in range(WORDS))
    fake.reply = lambda body, n: words
    # a reply that is not streamed comes whole after the model's time; a streamed one word by word
    fake.latency = 0.0 if args.stream else args.model_seconds
    fake.first_token_delay = args.first_token
    fake.stream_delay = max(0.0, (args.model_seconds - args.first_token) / (WORDS - 1))
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    site = _site(port, smoke=args.smoke)
    rows = []
    try:
        _wait_live(base, site)
        if args.warmup:
            warm = asyncio.run(
                _play_all(base, _players(args.warmup, fake.url, prefix="bench-warm-"), stream=args.stream)
            )
            print(f"warm-up: {args.warmup} turns, {sum(r['status'] == 201 for r in warm)} answered")
        for count in args.players:
            players = _players(count, fake.url)
            web, pg = _web_processes(site), _postgres_processes()
            web_before, pg_before = _cpu(web), _postgres_cpu(pg)
            fake.in_flight_max = 0
            stop, seen = threading.Event(), []
            health: list[float] = []
            watchers = [
                threading.Thread(target=_db_connections_watch, args=(stop, seen), daemon=True),
                threading.Thread(target=_health_watch, args=(base, stop, health), daemon=True),
            ]
            for watcher in watchers:
                watcher.start()
            results = asyncio.run(_play_all(base, players, stream=args.stream, retry=args.retry))
            stop.set()
            for watcher in watchers:
                watcher.join(15)
            web = _web_processes(site)
            web_spent, pg_spent = _cpu(web) - web_before, _postgres_cpu(_postgres_processes()) - pg_before
            cpu_spent = web_spent + pg_spent
            ok = [r for r in results if r["status"] == 201]
            seconds = [r["seconds"] for r in ok]
            firsts = [(r["first"] - args.first_token) * 1000 for r in ok if r["first"] is not None]
            rows.append(
                {
                    "players": count,
                    "errors": len(results) - len(ok),
                    "turn_p50_s": round(percentile(seconds, 50), 2),
                    "turn_p95_s": round(percentile(seconds, 95), 2),
                    "turn_max_s": round(max(seconds), 2) if seconds else None,
                    "model_calls_in_flight_max": fake.in_flight_max,
                    "first_token_overhead_p50_ms": round(percentile(firsts, 50), 1) if firsts else None,
                    "first_token_overhead_p95_ms": round(percentile(firsts, 95), 1) if firsts else None,
                    "db_connections_max": max(total for total, _ in seen) if seen else None,
                    "web_db_connections_max": max(web for _, web in seen) if seen else None,
                    "healthz_p95_ms": round(percentile(health, 95), 1) if health else None,
                    "healthz_max_ms": round(max(health), 1) if health else None,
                    "cpu_ms_per_turn": round(cpu_spent * 1000 / max(1, count), 1),
                    "web_cpu_ms_per_turn": round(web_spent * 1000 / max(1, count), 1),
                    "postgres_cpu_ms_per_turn": round(pg_spent * 1000 / max(1, count), 1),
                    "web_rss_mb": round(sum(p.memory_info().rss for p in web) / 2**20, 1),
                    "statuses": sorted({str(r["status"]) for r in results}),
                    "refusals": sum(r["refused"] for r in results),
                    "refused_players": sum(1 for r in results if r["refused"]),
                }
            )
        slow = _slow_clients(base, args.slow_clients, args.slow_seconds) if args.slow_clients else {}
    finally:
        import signal

        os.killpg(site.pid, signal.SIGTERM)
        try:
            site.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(site.pid, signal.SIGKILL)
        fake.stop()
        said = Path(site.log_path).read_text(errors="replace").splitlines()
        for line in [line for line in said if "config.admission: refused" in line]:
            print("the site:", line.split("config.admission: ", 1)[1])  # why turns were refused
        Path(site.log_path).unlink(missing_ok=True)

    print_table(
        f"{len(rows)} crowds, model {args.model_seconds:g} s per reply (first token {args.first_token:g} s)",
        [
            "players",
            "errors (answers)",
            "refusals (players)",
            "turn p50 s",
            "p95 s",
            "max s",
            "calls in flight",
            "first token +p50 ms",
            "+p95 ms",
            "DB conns max (web)",
            "CPU ms/turn (web+PG)",
            "web RSS MB",
            "/healthz p95 ms",
        ],
        [
            [
                r["players"],
                f"{r['errors']} ({', '.join(r['statuses'])})" if r["errors"] else 0,
                f"{r['refusals']} ({r['refused_players']})",
                r["turn_p50_s"],
                r["turn_p95_s"],
                r["turn_max_s"],
                r["model_calls_in_flight_max"],
                r["first_token_overhead_p50_ms"] or "-",
                r["first_token_overhead_p95_ms"] or "-",
                f"{r['db_connections_max']} ({r['web_db_connections_max']})",
                f"{r['cpu_ms_per_turn']} ({r['web_cpu_ms_per_turn']}+{r['postgres_cpu_ms_per_turn']})",
                r["web_rss_mb"],
                r["healthz_p95_ms"],
            ]
            for r in rows
        ],
    )
    if slow:
        print_table(
            "/healthz/live with slow clients",
            ["slow clients", "p50 ms", "p95 ms", "failures"],
            [[slow["slow_clients"], slow["live_p50_ms"], slow["live_p95_ms"], slow["live_failures"]]],
        )

    def plot(path):
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        answered = [r for r in rows if r["turn_max_s"] is not None]  # a crowd all refused has no times
        ax.plot([r["players"] for r in answered], [r["turn_p95_s"] for r in answered], "o-", label="turn p95")
        ax.plot([r["players"] for r in answered], [r["turn_p50_s"] for r in answered], "o--", label="turn p50")
        ax.axhline(args.model_seconds + 3, color="grey", linestyle=":", label="target: model + 3 s")
        if answered:
            ax.set_xscale("log")
        ax.set_xlabel("players playing one turn at the same moment")
        ax.set_ylabel("seconds")
        ax.set_title(f"Turn time, model {args.model_seconds:g} s ({args.label})")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path)

    result = {"label": args.label, "model_seconds": args.model_seconds, "crowds": rows, "slow_clients": slow}
    save(f"concurrency-{args.label}", [result], plot)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
