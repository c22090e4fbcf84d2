"""Real server processes for tests: the web server, Celery workers and throwaway Redis servers."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import redis

from config.celery import QUEUES
from config.embedded import redis_server_binary

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def minute_with_room(seconds: float) -> None:
    """Wait, when the clock's minute has less than ``seconds`` left, for the next one: the site's
    per-minute limits count in calendar minutes (stories.limits), and a test's requests split across
    a minute's turn are counted in two (CI once saw two writes 20 ms apart both allowed at 1 a minute)."""
    while 60 - time.time() % 60 < seconds:
        time.sleep(0.05)


def wait_for(predicate, *, timeout: float, interval: float = 0.1, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value; fail the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def child_database_url() -> str:
    """A DATABASE_URL for the database this test run uses (pytest-django's test_ copy)."""
    from django.db import connection

    s = connection.settings_dict
    user = quote(s.get("USER") or "", safe="")
    password = quote(s.get("PASSWORD") or "", safe="")
    host = s.get("HOST") or ""
    name = s["NAME"]
    if host.startswith("/"):
        return f"postgres://{user}:{password}@/{name}?host={quote(host, safe='/')}"
    port = s.get("PORT") or 5432
    return f"postgres://{user}:{password}@{host}:{port}/{name}"


def child_env(**overrides: str | None) -> dict[str, str]:
    env = os.environ.copy()
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("TURNS_PER_MINUTE", "0")  # test processes play fast
    env.setdefault("MODEL_CALLS_PER_MINUTE", "0")
    for name in ("WRITES_PER_MINUTE", "FILE_IMPORTS_PER_HOUR", "SCENARIO_PLAYS_PER_HOUR", "SHARES_PER_HOUR"):
        env.setdefault(name, "0")
    env.setdefault("RECALLS_PER_MINUTE", "0")
    # Tests that fire a crowd at a cold one-process server measure other things; the admission
    # tests set their own places (config.admission).
    env.setdefault("TURN_STARTS_QUEUED", "1000")
    env.setdefault("TURN_START_WAIT_MS", "60000")
    env.setdefault("ADMISSION_LAG_MS", "0")
    env.setdefault("ADMISSION_IN_FLIGHT_MAX", "0")
    env.setdefault("ADMISSION_CPU_BUSY_PCT", "0")  # the suite itself keeps the cores busy
    # a site the suite starts never builds llama.cpp: the demo model's stand-in plays (config.local_model)
    env.setdefault("LOCAL_MODEL_ENGINE", "stand-in")
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def broker_clear(redis_url: str | None = None) -> None:
    """Forget the jobs earlier tests left in the broker (sent after their commits with no worker
    running, or held by a worker stopped hard: kombu gives those back only after its visibility
    timeout, an hour), so that a test's workers and its "queue drained" start from none."""
    from django.conf import settings

    client = redis.Redis.from_url(redis_url or settings.REDIS_URL)
    client.delete(*QUEUES, "unacked", "unacked_index", "unacked_mutex")


# The workers started during the current test: a failed test's report shows the end of their logs
# (tests/conftest.py pytest_runtest_makereport), which is where a job's traceback is.
STARTED: list["Worker"] = []


class Worker:
    """A real `celery -A config worker` process on the test database."""

    def __init__(
        self,
        *,
        redis_url: str | None = None,
        concurrency: int = 1,
        log_path: Path | None = None,
        extra_env: dict | None = None,
        include: str | None = None,
        pool: str = "prefork",
        queues: tuple[str, ...] = QUEUES,
        nice: int = 0,
    ):
        from django.conf import settings

        from config.management.commands.runsite import worker_argv

        self.hostname = f"test-{uuid.uuid4().hex[:8]}@localhost"
        STARTED.append(self)
        self.redis_url = redis_url or settings.REDIS_URL
        env = child_env(DATABASE_URL=child_database_url(), REDIS_URL=self.redis_url, **(extra_env or {}))
        self.log_path = log_path or Path(os.environ.get("TMPDIR", "/tmp")) / f"{self.hostname}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            # as `make run` starts its workers (its pass worker: pool "threads"); both queues by default
            worker_argv(queues=queues, concurrency=concurrency, hostname=self.hostname, pool=pool)
            + ["--without-mingle", "--without-gossip"]
            + (["--include", include] if include else []),
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=(lambda: os.nice(nice)) if nice else None,  # as `make run` starts its workers
        )

    def wait_ready(self, timeout: float = 60.0) -> "Worker":
        from workers.heartbeat import HEARTBEAT_PREFIX

        client = redis.Redis.from_url(self.redis_url)

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited with {self.proc.returncode}:\n{self.log()}")
            return client.exists(HEARTBEAT_PREFIX + self.hostname)

        wait_for(ready, timeout=timeout, what=f"worker {self.hostname} heartbeat")
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def stop(self, timeout: float = 20.0) -> None:
        stop_process(self.proc, timeout=timeout)
        self._log.close()


def stop_process(proc: subprocess.Popen, *, timeout: float = 20.0, sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class RedisServer:
    """A throwaway redis-server on a free loopback port, for tests that stop Redis."""

    def __init__(self, directory: Path):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        directory.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                redis_server_binary(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(directory),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5)

        def up():
            try:
                return client.ping()
            except redis.RedisError:
                return False

        wait_for(up, timeout=10, what="redis-server")

    def stop(self) -> None:
        stop_process(self.proc, timeout=5)


class Beat:
    """A real `celery -A config beat` process (the periodic sweeper)."""

    def __init__(self, *, extra_env: dict | None = None):
        import tempfile

        self.dir = Path(tempfile.mkdtemp(prefix="beat-"))
        env = child_env(DATABASE_URL=child_database_url(), **(extra_env or {}))
        self._log = open(self.dir / "beat.log", "wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "beat",
                "--loglevel",
                "info",
                "--schedule",
                str(self.dir / "schedule"),
            ],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self) -> None:
        stop_process(self.proc, timeout=10)
        self._log.close()


class Site:
    """The real web server (config.web_server: uvicorn, exactly as `make run`
    starts it) on the test database, one process. Its database connections are
    named ``application_name`` in pg_stat_activity."""

    def __init__(self, directory: Path, *, workers: int = 1, **env: str):
        from config.web_server import web_server_argv

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.application_name = f"everlore-site-{uuid.uuid4().hex[:8]}"
        directory.mkdir(parents=True, exist_ok=True)
        self.log_path = directory / "site.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            web_server_argv(host="127.0.0.1", port=self.port, workers=workers),
            cwd=ROOT,
            env=child_env(
                DATABASE_URL=child_database_url(),
                ALLOWED_HOSTS="127.0.0.1,localhost",
                HTTPS="false",
                PGAPPNAME=self.application_name,
                **env,
            ),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

        def up():
            assert self.proc.poll() is None, self.log()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/healthz/live")
                return conn.getresponse().status == 200
            except OSError:
                return False

        wait_for(up, timeout=60, what="the web server")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def stop(self) -> None:
        stop_process(self.proc, timeout=20)
        self._log.close()

    def wait_disconnected(self, timeout: float = 20.0) -> None:
        """Until Postgres has closed this server's sessions (a test database cannot be dropped while
        they linger). Call where the database may be used."""
        from django.db import connection

        def gone():
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [self.application_name]
                )
                return cursor.fetchone()[0] == 0

        wait_for(gone, timeout=timeout, what="the web server's database sessions to close")
