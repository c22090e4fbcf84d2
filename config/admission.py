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
RETRY_AFTER_S = (2, 5)  # seconds a refused client is told to wait when few are refused, spread out
RETRY_AFTER_MAX_S = 60  # the longest wait told, however many are refused
PRESSURE_HALF_LIFE_S = 10.0  # refusals and admissions counted with this half-life
PRESSURE_SLACK = 10  # turns: refusals past the admissions by fewer than this are a blip, not overload
BUSY = ("the site is busy right now; your turn was not started (nothing was stored), "
        "try again after the seconds in Retry-After")
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


class Pressure:
    """Refused against admitted turns in this process lately (each count halves every
    PRESSURE_HALF_LIFE_S). A refused client is told to wait longer the more refusals outnumber
    admissions: told 2-5 s at twice the capacity, every player retries several times before a place
    comes free, and the retries cost the CPU the admitted turns need (measured: 20,624 refusals
    for 1,380 turns served at 1,000 players, bench/evening.py)."""

    def __init__(self):
        self.refused = self.admitted = 0.0
        self.at = time.monotonic()

    def _decay(self) -> None:
        now = time.monotonic()
        keep = 0.5 ** ((now - self.at) / PRESSURE_HALF_LIFE_S)
        self.refused, self.admitted, self.at = self.refused * keep, self.admitted * keep, now

    def admit(self) -> None:
        self._decay()
        self.admitted += 1

    def retry_after(self) -> int:
        """Count a refusal; seconds the refused client should wait (RETRY_AFTER_S, scaled by the
        ratio of refusals to admissions, at most RETRY_AFTER_MAX_S), spread at random."""
        self._decay()
        self.refused += 1
        low, high = RETRY_AFTER_S
        scale = min(RETRY_AFTER_MAX_S / high, max(1.0, self.refused / (self.admitted + PRESSURE_SLACK)))
        return random.randint(round(low * scale), round(high * scale))


pressure = Pressure()  # one per process: both doors count into it


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
            return await refuse(send, retry_after=pressure.retry_after())
        self.in_flight += 1
        try:
            return await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


async def refuse(send, *, retry_after: int) -> None:
    body = json.dumps({"detail": BUSY, "error": "busy"}).encode()
    await send({"type": "http.response.start", "status": 503, "headers": [
        *_HEADERS, (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(retry_after).encode()), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
