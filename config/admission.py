"""The ASGI server's door for costly requests: refused at once while this process is behind.

A turn commits a web process to CPU work for its whole life (its first step, the
relay of every streamed piece, the finish). Admitted past what the cores can do,
every turn in flight slows down: the first words of every reply come late, and
the wait grows without bound. The sign is the event loop falling behind its own
timers, and the bound on it is the work already admitted. So a web process
watches its loop (a timer every LAG_TICK_S), and a POST to a path in
ADMISSION_PATHS that arrives while the loop's recent lag is over ADMISSION_LAG_MS,
or while ADMISSION_IN_FLIGHT_MAX such requests are being answered (a turn counts
until its stream ends), is answered 503 with Retry-After here, before Django reads it:
nothing is stored, the answer costs next to nothing, and the turns already
admitted keep their pace. Other requests (pages, reads, /healthz) are never
refused here. stories.admission bounds the turns' first steps beside this.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time

from config.asgi_guard import SECURITY_HEADERS

LAG_TICK_S = 0.02  # seconds between the loop watcher's timers
LAG_DECAY = 0.8  # the lag figure keeps this share of its last value each tick (a ~0.1 s memory)
RETRY_AFTER_S = (2, 5)  # seconds a refused client is told to wait, spread so retries do not come back together
BUSY = ("the site is busy right now; your turn was not started (nothing was stored), "
        "try again in a few seconds")
# Answers written here carry the headers the site's middleware gives every answer.
_HEADERS = [(b"content-type", b"application/json"), (b"cache-control", b"no-store"), *SECURITY_HEADERS]


class LoopLag:
    """How far behind its timers this event loop runs, in seconds (decaying peak)."""

    def __init__(self):
        self.lag = 0.0
        self.task: asyncio.Task | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.refused = 0
        self.ticks = 0  # timers run so far (a test awaits the first)

    def watch(self) -> None:
        loop = asyncio.get_running_loop()
        if self.task is None or self.loop is not loop or self.task.done():
            self.loop, self.lag = loop, 0.0
            self.task = loop.create_task(self._run())

    async def _run(self) -> None:
        while True:
            due = time.monotonic() + LAG_TICK_S
            await asyncio.sleep(LAG_TICK_S)
            late = max(0.0, time.monotonic() - due)
            self.lag = max(late, self.lag * LAG_DECAY)
            self.ticks += 1


class Admission:
    def __init__(self, app, *, paths: str | None = None, lag_ms: int | None = None, in_flight: int | None = None):
        self.app = app
        self.paths, self.lag_ms, self.in_flight_max = paths, lag_ms, in_flight
        self.pattern: re.Pattern | None = None
        self.watcher = LoopLag()
        self.in_flight = 0  # guarded requests this process is answering now (a turn until its stream ends)

    def _settings(self) -> re.Pattern:
        if self.pattern is None:
            from django.conf import settings

            self.pattern = re.compile(self.paths if self.paths is not None else settings.ADMISSION_PATHS)
            self.lag_ms = self.lag_ms if self.lag_ms is not None else settings.ADMISSION_LAG_MS
            if self.in_flight_max is None:
                self.in_flight_max = settings.ADMISSION_IN_FLIGHT_MAX
        return self.pattern

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST":
            return await self.app(scope, receive, send)
        pattern = self._settings()
        if not pattern.match(scope.get("path", "")):
            return await self.app(scope, receive, send)
        if self.lag_ms > 0:
            self.watcher.watch()
        if (self.lag_ms > 0 and self.watcher.lag > self.lag_ms / 1000
                or 0 < self.in_flight_max <= self.in_flight):
            self.watcher.refused += 1
            return await refuse(send)
        self.in_flight += 1
        try:
            return await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


async def refuse(send) -> None:
    body = json.dumps({"detail": BUSY, "error": "busy"}).encode()
    await send({"type": "http.response.start", "status": 503, "headers": [
        *_HEADERS, (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(random.randint(*RETRY_AFTER_S)).encode()), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
