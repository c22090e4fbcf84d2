"""The site under an ASGI server (uvicorn; `make run` and the compose `web`
service start it through config.web_server). A turn awaits its model call on
the event loop, holding no thread and no database connection; connections come
from a bounded pool per process (DB_POOL_SIZE, 10 unless set)."""

import os
import threading

from django.conf import settings
from django.core.asgi import get_asgi_application
from django.utils.module_loading import import_string

from config.admission import Admission
from config.asgi_guard import BodyGuard
from config.async_db import THREADS_STARTED, RequestThreads, request_threads

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DB_POOL_SIZE", "10")

# A turn that comes while this process is behind is refused before anything else (config.admission);
# every request's synchronous parts run on a thread started ahead (config.async_db).
application = Admission(
    BodyGuard(request_threads(get_asgi_application(), threads=RequestThreads().start(THREADS_STARTED)))
)

# What a web process loads beside its first requests, not inside the first turn (settings.SERVE_WARM_UPS).
for warm_up in settings.SERVE_WARM_UPS:
    threading.Thread(target=import_string(warm_up), name=f"warm-up {warm_up}", daemon=True).start()
