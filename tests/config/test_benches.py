"""Every bench runs in its smoke mode (seconds, tiny sizes), so a bench that stops
working fails the build. Each runs as its own process, as a person runs it, on
embedded servers of its own (DATA_DIR), writing its results to a temporary folder,
and must end with its JSON line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
BENCHES = ["agent_recall.py", "cast.py", "concurrency.py", "evening.py", "imports.py", "locomo.py", "recall.py",
           "story_query.py", "turn.py", "workers.py"]

pytestmark = pytest.mark.slow


def test_every_bench_has_a_smoke_mode_and_a_smoke_run_here():
    found = sorted(p.name for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("_"))
    assert found == BENCHES, "a bench added to bench/ gets its smoke run in this list"
    for name in BENCHES:
        assert "--smoke" in (ROOT / "bench" / name).read_text(), f"bench/{name} has no --smoke mode"


@pytest.mark.parametrize("name", BENCHES)
def test_the_bench_runs_in_its_smoke_mode_and_ends_with_its_json_line(name, tmp_path):
    env = {**os.environ, "DATA_DIR": str(ROOT / ".data" / "bench-smoke"), "BENCH_RESULTS": str(tmp_path),
           "TQDM_DISABLE": "1", "DJANGO_SETTINGS_MODULE": "config.settings"}
    for key in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "FIELD_ENCRYPTION_KEYS", "EVERLORE_EMBEDDED"):
        env.pop(key, None)  # the bench's own embedded servers, never the test session's
    done = subprocess.run([sys.executable, str(ROOT / "bench" / name), "--smoke"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    assert isinstance(json.loads(last), (dict, list)), last
    assert list(tmp_path.glob("*.json")), "the bench saved its results"
