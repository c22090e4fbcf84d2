"""Every bench runs in its smoke mode (seconds, tiny sizes), so a bench that stops
working fails the build. Each runs as its own process, as a person runs it, on
embedded servers of its own (DATA_DIR), writing its results to a temporary folder,
and must end with its JSON line; a few run at once."""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
BENCHES = [
    "agent_recall.py",
    "cast.py",
    "concurrency.py",
    "evening.py",
    "imports.py",
    "locomo.py",
    "prompt_cache.py",
    "recall.py",
    "story_query.py",
    "turn.py",
    "workers.py",
]

pytestmark = pytest.mark.slow


def test_every_bench_has_a_smoke_mode_and_a_smoke_run_here():
    found = sorted(p.name for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("_"))
    assert found == BENCHES, "a bench added to bench/ gets its smoke run in this list"
    for name in BENCHES:
        assert "--smoke" in (ROOT / "bench" / name).read_text(), f"bench/{name} has no --smoke mode"


SMOKES_AT_ONCE = 4  # the smokes mostly wait (on their servers, on think time): four share the two cores


def _smoke(name: str, results: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "DATA_DIR": str(ROOT / ".data" / f"bench-smoke-{name[:-3]}"),
        "BENCH_RESULTS": str(results),
        "TQDM_DISABLE": "1",
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "EMBEDDED_PG_SHARED_BUFFERS": "128MB",
        "EMBEDDED_PG_DURABLE": "0",
        "ADMISSION_CPU_BUSY_PCT": "0",
    }  # four smokes at once keep the cores busy: a smoke checks it runs
    for key in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "FIELD_ENCRYPTION_KEYS", "EVERLORE_EMBEDDED"):
        env.pop(key, None)  # the bench's own embedded servers, never the test session's
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / name), "--smoke"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
    """Every bench's smoke run, started together (a few at a time, each on its own embedded
    servers under its own DATA_DIR); each test below waits for its own."""
    slowest_first = ["evening.py", "concurrency.py", "workers.py", "imports.py"]
    order = slowest_first + [n for n in BENCHES if n not in slowest_first]
    folders = {name: tmp_path_factory.mktemp(name[:-3]) for name in order}
    with ThreadPoolExecutor(max_workers=SMOKES_AT_ONCE) as pool:
        yield {name: (pool.submit(_smoke, name, folders[name]), folders[name]) for name in order}


@pytest.mark.parametrize("name", BENCHES)
def test_the_bench_runs_in_its_smoke_mode_and_ends_with_its_json_line(name, smoke_runs):
    future, results = smoke_runs[name]
    done = future.result()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    assert isinstance(json.loads(last), (dict, list)), last
    assert list(results.glob("*.json")), "the bench saved its results"
