"""Settings for the test suite: the same settings; the test session starts its
embedded servers under .data/test so a test run never touches the data of `make run`."""

import os
from pathlib import Path

os.environ.setdefault("DATA_DIR", str(Path(__file__).resolve().parent.parent / ".data" / "test"))
os.environ.setdefault("EMBEDDED_PG_DURABLE", "0")  # throwaway data: a flush between tests never waits on the disk
# the suite's processes at once (xdist workers, their servers and workers, the bench smokes) past 100
os.environ.setdefault("EMBEDDED_PG_MAX_CONNECTIONS", "300")

from config.embedded import one_machine_environment  # noqa: E402

one_machine_environment()  # the test session starts its own embedded servers

# Under pytest-xdist each worker has a database of its own (pytest-django's suffix) and a Redis
# database of its own: its queues, locks and counters are never another worker's.
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker.startswith("gw") and os.environ["REDIS_URL"].rsplit("/", 1)[-1].isdigit():
    os.environ["REDIS_URL"] = os.environ["REDIS_URL"].rsplit("/", 1)[0] + f"/{int(_worker[2:]) + 1}"

from config.settings import *  # noqa: E402,F401,F403

# Fast hashing keeps user fixtures cheap; tests never rely on hash strength.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
