"""Every bench runs in its smoke mode (seconds, tiny sizes), so a bench that stops
working fails the build. Each runs as its own process, as a person runs it, on a
database and a Redis database of its own (servers named by URL, as an operator names
them), writing its results to a temporary folder, and must end with its JSON line and
leave no process behind; a few run at once."""

import json
import os
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psutil
import pytest

from tests.support.processes import wait_for

ROOT = Path(__file__).resolve().parent.parent.parent
BENCHES = [
    "agent_recall.py",
    "canon.py",
    "cast.py",
    "concurrency.py",
    "evening.py",
    "imports.py",
    "local_model.py",
    "locomo.py",
    "prompt_cache.py",
    "recall.py",
    "story_query.py",
    "together.py",
    "turn.py",
    "workers.py",
]

pytestmark = pytest.mark.slow


def test_every_bench_has_a_smoke_mode_and_a_smoke_run_here():
    found = sorted(p.name for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("_"))
    assert found == BENCHES, "a bench added to bench/ gets its smoke run in this list"
    for name in BENCHES:
        assert "--smoke" in (ROOT / "bench" / name).read_text(), f"bench/{name} has no --smoke mode"


def _data_dir(name: str) -> Path:
    return ROOT / ".data" / f"bench-smoke-{name[:-3]}"


SMOKES_AT_ONCE = 4  # the smokes mostly wait (on their servers, on think time): four share the two cores


def _smoke(name: str, results: Path, database_url: str, redis_url: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "DATA_DIR": str(_data_dir(name)),
        "BENCH_RESULTS": str(results),
        "TQDM_DISABLE": "1",
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "ADMISSION_CPU_BUSY_PCT": "0",
        # a database and a Redis of its own on servers already running, as an operator names them
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "EVERLORE_EMBEDDED": "1",  # one-machine mode: the bench's model stands on loopback
        # a bench's site (concurrency, evening, together) with one web process and one worker child:
        # a smoke checks the bench runs, and each process more is a Django start on busy cores
        "WEB_CONCURRENCY": "1",
        "WORKER_CONCURRENCY": "1",
    }  # four smokes at once keep the cores busy: a smoke checks it runs
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / name), "--smoke"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def _database_url(name: str) -> str:
    """The session's Postgres (its DATABASE_URL names the server's main database), database ``name``."""
    base = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(base._replace(path=f"/{name}"))


@pytest.fixture(scope="module")
def smoke_databases(django_db_setup, tmp_path_factory):
    """A migrated database for each bench, copied from one template migrated once, on the
    session's Postgres, and a Redis database each on a Redis of their own: a smoke checks the
    bench runs, and starting eleven Postgres servers and migrating eleven databases cost more of
    the two cores than all the smokes' work."""
    import psycopg

    from tests.support.processes import RedisServer

    suffix = uuid.uuid4().hex[:8]
    template = f"bench_smoke_template_{suffix}"
    names = {name: f"bench_smoke_{name[:-3]}_{suffix}" for name in BENCHES}
    admin = psycopg.connect(os.environ["DATABASE_URL"], autocommit=True)
    redis_server = RedisServer(tmp_path_factory.mktemp("bench-redis"))
    try:
        admin.execute(f'CREATE DATABASE "{template}"')
        migrated = subprocess.run(
            [sys.executable, "manage.py", "migrate", "--verbosity", "0"],
            cwd=ROOT,
            env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "DATABASE_URL": _database_url(template)},
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert migrated.returncode == 0, migrated.stderr[-3000:]
        for name in names.values():
            admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        base_redis = redis_server.url.rsplit("/", 1)[0]
        yield {
            bench: (_database_url(database), f"{base_redis}/{i}") for i, (bench, database) in enumerate(names.items())
        }
    finally:
        for name in [*names.values(), template]:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()
        redis_server.stop()


@pytest.fixture(scope="module")
def smoke_runs(smoke_databases, tmp_path_factory):
    """Every bench's smoke run, started together (a few at a time, each on its own database
    and Redis database); each test below waits for its own."""
    slowest_first = ["evening.py", "concurrency.py", "together.py", "workers.py", "imports.py"]
    order = slowest_first + [n for n in BENCHES if n not in slowest_first]
    folders = {name: tmp_path_factory.mktemp(name[:-3]) for name in order}
    with ThreadPoolExecutor(max_workers=SMOKES_AT_ONCE) as pool:
        yield {
            name: (pool.submit(_smoke, name, folders[name], *smoke_databases[name]), folders[name]) for name in order
        }


@pytest.mark.parametrize("name", BENCHES)
def test_the_bench_runs_in_its_smoke_mode_and_ends_with_its_json_line(name, smoke_runs):
    future, results = smoke_runs[name]
    done = future.result()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    assert isinstance(json.loads(last), (dict, list)), last
    assert list(results.glob("*.json")), "the bench saved its results"
    # on servers the environment names, nothing starts servers of its own in DATA_DIR (a site's
    # supervisor once "revived" an embedded Postgres there), and nothing the bench started outlives it
    wait_for(lambda: not _running_in(_data_dir(name)), timeout=30, what=f"the processes of bench/{name} to end")


def _running_in(data_dir: Path) -> list[str]:
    """Command lines of the processes that name ``data_dir`` (a server's -D, a site's DATA_DIR)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        if str(data_dir) in line:
            found.append(line)
    return found
