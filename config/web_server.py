"""The one description of how the site is served: `make run` (runsite), the
tests that drive the real server, and the benches start exactly this, and the
compose file's `web` command is checked against it.

uvicorn serves config.asgi. A turn awaits its model on the event loop, so one
process keeps hundreds of turns in flight; a slow client holds only its own
connection (config.asgi_guard bounds its body in size and time; h11 bounds its
headers in size and config.web_protocol in time). Forwarded headers are left to the site's own TRUSTED_PROXIES logic.

The event loop is Python's own asyncio unless WEB_EVENT_LOOP says uvloop. A web process runs its
requests' synchronous parts (database steps, the query embedding) on threads beside the loop, and
uvloop takes the interpreter lock back for every callback it runs, so while a step holds the lock
each of them waits: under load the loop fell seconds behind and connections waited that long to be
accepted. asyncio takes the lock back once per pass over the ready callbacks. Measured with
bench/evening.py on 2 cores (docs/benchmarks.md, "An evening"): at 300 players the first token's overhead p95
275 ms (asyncio) against 332 ms (uvloop); at 1,000, refusals within 0.99 s p95 against 4.9 s.
"""

from __future__ import annotations

import sys

from config.env import env_choice

HEADERS_MAX_BYTES = 64 * 1024  # a request whose headers grow past this is refused by h11
GRACEFUL_S = 15  # seconds in-flight requests get to finish on shutdown
BACKLOG = 2048  # connections the kernel queues while a process accepts
HTTP_PROTOCOL = "config.web_protocol:HeaderDeadlineProtocol"  # h11 with a deadline on request headers
EVENT_LOOPS = ("asyncio", "uvloop")


def event_loop() -> str:
    """WEB_EVENT_LOOP (asyncio unless set), read when the command line is built."""
    return env_choice("WEB_EVENT_LOOP", "asyncio", EVENT_LOOPS)


def web_server_argv(*, host: str, port: int, workers: int, executable: str | None = None) -> list[str]:
    """The command line of the web server (``executable`` defaults to this Python)."""
    return [
        executable or sys.executable,
        "-m",
        "uvicorn",
        "config.asgi:application",
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--loop",
        event_loop(),
        "--http",
        HTTP_PROTOCOL,
        "--h11-max-incomplete-event-size",
        str(HEADERS_MAX_BYTES),
        "--lifespan",
        "off",
        "--no-proxy-headers",
        "--backlog",
        str(BACKLOG),
        "--timeout-keep-alive",
        "5",
        "--timeout-graceful-shutdown",
        str(GRACEFUL_S),
        "--no-server-header",
    ]
