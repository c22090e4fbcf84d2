"""The site under an ASGI server (uvicorn; `make run` and the compose `web`
service start it through config.web_server). A turn awaits its model call on
the event loop, holding no thread and no database connection; connections come
from a bounded pool per process (DB_POOL_SIZE, 10 unless set)."""

import gc
import logging
import os
import threading

from django.conf import settings
from django.core.asgi import get_asgi_application
from django.utils.module_loading import import_string

from config import server_timing
from config.admission import Admission
from config.asgi_guard import BodyGuard
from config.async_db import THREADS_STARTED, RequestThreads, request_threads

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DB_POOL_SIZE", "10")

# uvicorn's request lines follow LOG_LEVEL: uvicorn sets its access logger to INFO, so under a quieter
# level every response still made its log record for the root's level to drop (py-spy: 1.3% of a web
# process's CPU in an evening, most of it on the door's refusals)
_access = logging.getLogger("uvicorn.access")
_access.setLevel(max(_access.getEffectiveLevel(), logging.getLevelNamesMapping().get(settings.LOG_LEVEL, logging.INFO)))

# A turn that comes while this process is behind is refused before anything else (config.admission);
# every request's synchronous parts run on a thread started ahead (config.async_db).
application = Admission(
    BodyGuard(request_threads(get_asgi_application(), threads=RequestThreads().start(THREADS_STARTED)))
)


# A web process collects its young garbage once 20,000 objects wait, not Python's 700. A turn makes tens
# of thousands (rows, model objects, a prompt's pieces, the relay's events): at 700 the young collections
# were ~7% of a turn's CPU (bench/turn.py in one process: 0.78 s of 11.4 CPU s, 748 collections for 60
# turns); at 20,000, 0.22 s of 9.6 (25). What waits for a collection so is a few MB at most. Web
# processes only: a worker's import is stopped by a signal (Celery's soft time limit), and a longer
# collection runs more finalizers, where an exception the signal raises is dropped ("Exception ignored
# in"): with 20,000 in the workers, tests/stories/test_import_jobs' 0.1 s limit let 3 of 7 imports finish.
YOUNG_COLLECTED_AFTER = 20_000
gc.set_threshold(YOUNG_COLLECTED_AFTER, 10, 10)


def _warm_up_then_freeze(warm_ups: list[threading.Thread]) -> None:
    """Once the process has loaded what it keeps (Django, the apps, the local embedder), those objects
    leave the garbage collector's view (gc.freeze): a full collection walked them all, ~100 ms with
    the event loop stopped, every minute or so on a process following 500 live pages (measured with
    bench/together.py: the first step's p95 was 3x a player alone's, at light load)."""
    for thread in warm_ups:
        thread.join()
    gc.collect()
    gc.freeze()


if getattr(settings, "SERVER_TIMING", False):
    server_timing.time_collections()

# What a web process loads beside its first requests, not inside the first turn (settings.SERVE_WARM_UPS).
_warm_ups = [
    threading.Thread(target=import_string(warm_up), name=f"warm-up {warm_up}", daemon=True)
    for warm_up in settings.SERVE_WARM_UPS
]
for _thread in _warm_ups:
    _thread.start()
threading.Thread(target=_warm_up_then_freeze, args=(_warm_ups,), name="warm-up, then gc.freeze", daemon=True).start()
