"""Run the whole site on one machine: migrate, first admin, web server, worker.

`make run` calls this. A part that dies (the web server, the worker, the MCP server, the local
demo model, the embedded Redis or PostgreSQL) is started again with a backoff (config.supervisor); Ctrl-C (or
SIGTERM) stops the web server and the worker, then the embedded PostgreSQL and Redis this process
started.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import sys
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from config import celery as celery_queues
from config import local_model
from config.env import env_int, env_str
from config.web_server import web_server_argv

CHILD_STOP_TIMEOUT = 20.0  # seconds a child gets to finish its current work on shutdown
# On one machine the memory work yields the cores to players' turns (it catches up between them;
# measured in bench/evening.py): the worker runs at this nice level, the web server at 0.
WORKER_NICE = 10
SUPERVISE_INTERVAL_S = 0.5  # how often the parts are looked at
# The post-turn passes wait on the owner's model most of their time (a block's memories, the summary,
# a cast's): one process of this many threads holds that many waits at once. Measured (bench/evening.py,
# 1,000 players, a 1 s memory model): two processes, one pass each, left 533 stories behind at the end
# of 90 s, drained in ~9 minutes, their CPU ~1% busy.
PASS_THREADS_DEFAULT = 16


def worker_argv(
    *,
    queues: tuple[str, ...],
    concurrency: int,
    hostname: str,
    pool: str = "prefork",
    loglevel: str = "info",
    executable: str = sys.executable,
) -> list[str]:
    """A Celery worker's command line: the queues it takes (config.celery), its pool and size."""
    return [
        executable,
        "-m",
        "celery",
        "-A",
        "config",
        "worker",
        "--loglevel",
        loglevel.lower(),
        "--pool",
        pool,
        "--concurrency",
        str(concurrency),
        "--hostname",
        hostname,
        "--queues",
        ",".join(queues),
    ]


def pass_worker_argv(*, threads: int, loglevel: str = "info", executable: str = sys.executable) -> list[str]:
    """The worker of the post-turn passes (config.celery's ``passes`` queue): one process of threads."""
    return worker_argv(
        queues=(celery_queues.PASSES,),
        concurrency=threads,
        hostname="passes@%h",
        pool="threads",
        loglevel=loglevel,
        executable=executable,
    )


class Command(BaseCommand):
    help = "Migrate, create the first admin, then serve the site with one Celery worker until Ctrl-C."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=env_str("HOST") or "127.0.0.1")
        parser.add_argument("--port", type=int, default=env_int("PORT", 8000, minimum=1, maximum=65535))
        parser.add_argument("--web-workers", type=int, default=env_int("WEB_CONCURRENCY", 2, minimum=1))
        parser.add_argument("--worker-concurrency", type=int, default=env_int("WORKER_CONCURRENCY", 2, minimum=1))
        parser.add_argument(
            "--pass-threads", type=int, default=env_int("PASS_THREADS", PASS_THREADS_DEFAULT, minimum=1, maximum=256)
        )

    def handle(self, *args, host, port, web_workers, worker_concurrency, pass_threads, **options):
        _check_port_free(host, port)
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write("Database migrated.")
        call_command("ensure_admin", stdout=self.stdout)

        stopping = False

        def request_stop(signum, frame):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)

        from config import embedded
        from config.supervisor import ChildProcess, Part, Supervisor

        mcp_port = env_int("MCP_PORT", port + 1, minimum=1, maximum=65535)
        web = ChildProcess(web_server_argv(host=host, port=port, workers=web_workers))
        worker = ChildProcess(
            nice=WORKER_NICE,
            cmd=worker_argv(
                queues=(celery_queues.DEFAULT,),
                concurrency=worker_concurrency,
                hostname="worker@%h",
                loglevel=settings.LOG_LEVEL,
            )
            # one machine: the periodic sweeper runs inside this worker
            + ["--beat", "--schedule", str(settings.DATA_DIR / "celerybeat-schedule")],
        )
        passes = ChildProcess(nice=WORKER_NICE, cmd=pass_worker_argv(threads=pass_threads, loglevel=settings.LOG_LEVEL))
        mcp = ChildProcess([sys.executable, "manage.py", "runmcp", "--host", host, "--port", str(mcp_port)])
        children = [("web server", web), ("worker", worker), ("pass worker", passes), ("MCP server", mcp)]
        model = _local_model()
        if model is not None:  # first: its state is on the pages from the first request
            children.insert(0, ("local demo model", model))
        parts = [
            Part(name, start=child.start, running=child.running, describe=child.describe, cleanup=child.reap_group)
            for name, child in children
        ]
        if settings.EMBEDDED:  # the servers manage.py started: started again on their port, with their data
            data_dir, now = settings.DATA_DIR, time.monotonic()
            for name, revive, pid in (
                ("embedded Redis", embedded.revive_redis, embedded.redis_pid),
                ("embedded PostgreSQL", embedded.revive_postgres, embedded.postgres_pid),
            ):
                if pid(data_dir) is None:  # a server the environment named (REDIS_URL, DATABASE_URL): not ours
                    continue
                server = Part(
                    name,
                    start=lambda revive=revive: revive(data_dir),
                    running=lambda pid=pid: pid(data_dir) is not None,
                    describe=lambda: "died",
                )
                server.started_at = now  # already running
                parts.append(server)

        def say(line: str) -> None:
            self.stderr.write(line)
            self.stderr.flush()

        supervisor = Supervisor(parts, say)
        for part in parts[: len(children)]:
            part.start(time.monotonic())
        shown = host if ":" not in host else f"[{host}]"
        self.stdout.write(self.style.SUCCESS(f"Everlore is running at http://{shown}:{port}/  (Ctrl-C stops it)"))
        self.stdout.write(f"Agent memory over MCP: http://{shown}:{mcp_port}/mcp")
        if model is not None:
            self.stdout.write(
                "The demo model (Gemma 3 270M, local) plays for players without a model of their own; on the "
                "first run it is built for this machine first (about 5 minutes). LOCAL_MODEL=off leaves it out."
            )
        self.stdout.flush()

        # A part that dies is started again (config.supervisor); only Ctrl-C or SIGTERM stops the site.
        while not stopping:
            supervisor.tick()
            time.sleep(SUPERVISE_INTERVAL_S)

        self.stdout.write("Stopping...")
        for child in (web, mcp, worker, passes, *([model] if model else [])):
            child.stop(CHILD_STOP_TIMEOUT)
        if settings.EMBEDDED:
            self.stdout.write(
                "Stopped. The embedded database and Redis stop with this process; data stays in DATA_DIR."
            )


def _local_model():
    """The local demo model's process (config.local_model) when the operator set no demo model and
    did not turn it off, with the demo settings its siblings inherit; else None."""
    from config.supervisor import ChildProcess

    if settings.LOCAL_MODEL == "off" or settings.DEMO_ENDPOINT_URL:
        return None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    key = secrets.token_urlsafe(24)
    os.environ.update(
        DEMO_ENDPOINT_URL=f"http://127.0.0.1:{port}/v1",
        DEMO_MODELS=local_model.MODEL_ID,
        DEMO_API_KEY=key,
        DEMO_LOCAL="1",
        LOCAL_MODEL_KEY=key,
    )
    if not os.environ.get("DEMO_TURNS_PER_DAY"):  # the operator's limit wins; a local model costs no money
        os.environ["DEMO_TURNS_PER_DAY"] = str(settings.LOCAL_MODEL_TURNS_PER_DAY)
    return ChildProcess([sys.executable, "manage.py", "runmodel", "--port", str(port)])


def _check_port_free(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise CommandError(f"cannot listen on {host}:{port} ({exc.strerror}); set PORT or --port") from None
