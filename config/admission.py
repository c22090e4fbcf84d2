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
refused here.

Beside it, the gate of the turns' first steps (``turn_start``): a turn's first step (the claim,
the player's action, recall, the context) is CPU work on two shared cores. Admitted without
bound, a crowd queues for the CPU and every player waits: the first words of every reply come
late and the wait grows without bound. So each web process runs at most ``TURN_STARTS_MAX``
first steps at once; more wait in line while their place should come within ``TURN_START_WAIT_MS``
(from how long a first step holds its place lately; never more than ``TURN_STARTS_QUEUED``). A
turn past those, or one that waited ``TURN_START_WAIT_MS``, is answered 503 before anything is
stored, with a ``Retry-After`` that says when a place will be free for it (``Pressure``), so the
turns admitted keep their first-token time, a refusal comes at once, and a crowd comes back
spread over the seconds the process needs for it. The play page says so and tries again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import re
import time
from collections import Counter, deque
from contextlib import asynccontextmanager

from django.conf import settings

from config.asgi_guard import SECURITY_HEADERS
from config.cpu_busy import CpuBusy
from config.errors import Unavailable

log = logging.getLogger(__name__)
LAG_TICK_S = 0.02  # seconds between the loop watcher's timers
CPU_EVERY_TICKS = 5  # the machine's CPU counters are read every this many ticks (0.1 s)
CPU_BAND_PCT = 10  # around ADMISSION_CPU_BUSY_PCT, the share of turns refused grows from none to all
LAG_DECAY = 0.8  # the lag figure keeps this share of its last value each tick (a ~0.1 s memory)
RETRY_AFTER_MAX_S = 60  # the longest wait told, however many are refused
RATE_WINDOW_S = 2.0  # a process's rate of starting turns: those it admitted over this long
RATE_MIN = 1.0  # turns a second a process is taken to start at least (one that admitted none lately)
DOOR_SHARE = 0.25  # a refusal at the door is promised starts at least at this share of what the places start
STEP_S_FIRST = 0.1  # seconds a first step holds its place, until some were measured
STEP_KEEP = 0.9  # the moving mean of a first step's time keeps this share of its last value each step
REFUSALS_LOG_EVERY_S = 10.0  # while turns are refused, a line says why at most this often
BUSY = (
    "the site is busy right now; your turn was not started (nothing was stored), "
    "try again after the seconds in Retry-After"
)
# Answers written here carry the headers the site's middleware gives every answer.
_HEADERS = [(b"content-type", b"application/json"), (b"cache-control", b"no-store"), *SECURITY_HEADERS]


class LoopLag:
    """How far behind its timers this event loop runs, in seconds (decaying peak), and how busy
    the machine's cores are (``cpu``)."""

    def __init__(self):
        self.lag = 0.0
        self.cpu = CpuBusy()
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
            if self.ticks % CPU_EVERY_TICKS == 0:
                self.cpu.read()
                refusals.tell()


class Pressure:
    """When a refused turn should come back: when a place will be free for it. This process starts
    turns at a rate: the turns it admitted over the last RATE_WINDOW_S (at least RATE_MIN a second),
    or, for a turn the first steps' line had no room for, what its places start a second when that is
    more (a crowd that comes to an idle process finds few started lately; at the door, DOOR_SHARE of
    it, for the cores or the loop are full of turns already admitted). Each refusal is promised
    the next start not yet promised to a turn refused before it, so a crowd is told to come back
    spread over the time the process needs to start them all, in the order they came, and a lone
    refusal is told a second. Past capacity the promises run ahead as fast as turns are refused
    faster than started, so a refused player is not told to try again and again while others wait
    (measured: told 2-5 s at twice the capacity, 20,624 refusals for 1,380 turns served,
    bench/evening.py); told a guess that grew with the refusals instead, a crowd of 200 sent at once
    waited up to a minute for places that were free in seconds (p95 41-45 s, model 20 s)."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.starts: deque[float] = deque()  # when the turns admitted lately were admitted
        self.promised = 0.0  # the clock's time up to which starts are promised to refused turns

    def _trim(self, now: float) -> None:
        while self.starts and self.starts[0] < now - RATE_WINDOW_S:
            self.starts.popleft()

    def admit(self) -> None:
        now = self.clock()
        self._trim(now)
        self.starts.append(now)

    def rate(self, capacity: float = 0.0) -> float:
        """Turns this process started a second lately, or ``capacity`` (what its places start a
        second, from how long a first step holds one lately) when more: a crowd that comes to an
        idle process finds few started lately. At least RATE_MIN."""
        self._trim(self.clock())
        return max(RATE_MIN, capacity, len(self.starts) / RATE_WINDOW_S)

    def retry_after(self, ahead_s: float = 0.0, capacity: float | None = None) -> int:
        """Count a refusal; whole seconds until the start promised to it (at least 1, at most
        RETRY_AFTER_MAX_S). ``ahead_s``: the turns already waiting for a place need this long first;
        ``capacity``: the turns a second this process's places start (None: its gate's)."""
        now = self.clock()
        rate = self.rate(_capacity() if capacity is None else capacity)
        self.promised = min(max(self.promised, now + ahead_s) + 1.0 / rate, now + RETRY_AFTER_MAX_S)
        return max(1, min(RETRY_AFTER_MAX_S, math.ceil(self.promised - now)))


pressure = Pressure()  # one per process: both doors count into it


class Refusals:
    """Why this process refused turns lately, told in the log at most every REFUSALS_LOG_EVERY_S while it
    refuses (an operator's answer to "why are players told the site is busy?")."""

    REASONS = {
        "cores": "the cores were busy past the bound",
        "loop": "the event loop ran behind",
        "in_flight": "the turns in flight were at their bound",
        "places": "the first steps' places and line were full",
        "waited": "a turn waited its place too long",
    }

    def __init__(self):
        self.counts: Counter = Counter()
        self.since = time.monotonic()
        self.detail = ""

    def count(self, reason: str, detail: str = "") -> None:
        self.counts[reason] += 1
        self.detail = detail
        self.tell()

    def tell(self) -> None:
        """Say what was counted, once REFUSALS_LOG_EVERY_S has passed since the last line (the door's
        loop watcher asks too, so the last refusals of a burst are told without another one)."""
        now = time.monotonic()
        if self.counts and now - self.since >= REFUSALS_LOG_EVERY_S:
            told = ", ".join(f"{n} as {self.REASONS.get(r, r)}" for r, n in self.counts.most_common())
            log.warning(
                "refused %d turns in the last %.0f s: %s%s",
                sum(self.counts.values()),
                now - self.since,
                told,
                self.detail,
            )
            self.counts.clear()
        if not self.counts and now - self.since >= REFUSALS_LOG_EVERY_S:
            self.since = now  # a quiet stretch: the next line counts from here


refusals = Refusals()  # one per process


class Admission:
    def __init__(
        self,
        app,
        *,
        paths: str | None = None,
        lag_ms: int | None = None,
        in_flight: int | None = None,
        cpu_busy_pct: int | None = None,
    ):
        self.app = app
        self.paths, self.lag_ms, self.in_flight_max, self.cpu_busy_pct = paths, lag_ms, in_flight, cpu_busy_pct
        self.pattern: re.Pattern | None = None
        self.watcher = LoopLag()
        self.in_flight = 0  # guarded requests this process is answering now (a turn until its stream ends)

    def _settings(self) -> re.Pattern:
        if self.pattern is None:
            self.pattern = re.compile(self.paths if self.paths is not None else settings.ADMISSION_PATHS)
            self.lag_ms = self.lag_ms if self.lag_ms is not None else settings.ADMISSION_LAG_MS
            if self.in_flight_max is None:
                self.in_flight_max = settings.ADMISSION_IN_FLIGHT_MAX
            if self.cpu_busy_pct is None:
                self.cpu_busy_pct = settings.ADMISSION_CPU_BUSY_PCT
        return self.pattern

    def _behind(self) -> str | None:
        """Why a turn is refused now (None: it is not): the loop runs late, or the cores are about as busy as the bound: within CPU_BAND_PCT of it
        a turn is refused with a chance that grows from none to all. A turn admitted now costs CPU
        for its whole stream (seconds), so refusing all at the bound and none below it made
        admissions come in waves a stream long; a chance that grows with the load settles it."""
        if self.lag_ms > 0 and self.watcher.lag > self.lag_ms / 1000:
            return "loop"
        busy = self.watcher.cpu.busy
        if self.cpu_busy_pct <= 0 or busy is None:
            return None
        over = (busy * 100 - (self.cpu_busy_pct - CPU_BAND_PCT / 2)) / CPU_BAND_PCT
        return "cores" if over >= 1 or (over > 0 and random.random() < over) else None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST":
            return await self.app(scope, receive, send)
        pattern = self._settings()
        if not pattern.match(scope.get("path", "")):
            return await self.app(scope, receive, send)
        if self.lag_ms > 0 or self.cpu_busy_pct > 0:
            self.watcher.watch()
        why = self._behind() or ("in_flight" if 0 < self.in_flight_max <= self.in_flight else None)
        if why is not None:
            self.watcher.refused += 1
            busy = self.watcher.cpu.busy
            refusals.count(
                why,
                f" (cores {busy:.0%} busy, the loop {self.watcher.lag * 1000:.0f} ms behind)"
                if busy is not None
                else "",
            )
            # the cores or the loop are full: a place frees about as fast as turns were admitted lately,
            # not as fast as the first steps' places could start them (told that, a refused evening's
            # players came back every second: 1,538 refusals for 2,227 turns served), yet a crowd at an
            # idle process was admitted by none lately (told a second each at 1 a second: up to 60 s)
            return await refuse(send, retry_after=pressure.retry_after(capacity=_capacity() * DOOR_SHARE))
        self.in_flight += 1
        try:
            return await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


async def refuse(send, *, retry_after: int) -> None:
    body = json.dumps({"detail": BUSY, "error": "busy"}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                *_HEADERS,
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", str(retry_after).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


# ---------------------------------------------------------------------------- the gate of first steps


class Overloaded(Unavailable):
    code = "busy"


class _Gate:
    """The places of one event loop (a web process has one; tests may run several)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.running = 0
        self.waiting: deque[asyncio.Future] = deque()
        self.step_s = STEP_S_FIRST  # how long a first step held its place lately (a moving mean)

    def capacity(self) -> float:
        """Turns a second the places start, from how long a first step held one lately."""
        return max(1, settings.TURN_STARTS_MAX) / max(self.step_s, 1e-3)

    def expected_s(self, position: int) -> float:
        """How long a turn at ``position`` in the line (0: the first) should wait for its place."""
        return (position + 1) * self.step_s / max(1, settings.TURN_STARTS_MAX)

    async def enter(self) -> None:
        if self.running < settings.TURN_STARTS_MAX and not self.waiting:
            self.running += 1
            return
        # a turn waits in line while its place should come within the wait (a crowd's turns all
        # start in the seconds the process needs for them), never past TURN_STARTS_QUEUED waiting
        wait_s = settings.TURN_START_WAIT_MS / 1000
        if len(self.waiting) >= settings.TURN_STARTS_QUEUED or self.expected_s(len(self.waiting)) > wait_s:
            refusals.count("places")
            raise _refusal(ahead_s=self.expected_s(len(self.waiting)))
        place = self.loop.create_future()
        self.waiting.append(place)
        try:
            await asyncio.wait_for(place, wait_s)
        except asyncio.TimeoutError:
            self._forget(place)  # wait_for cancelled it, so no place is handed to it
            refusals.count("waited")
            raise _refusal(ahead_s=self.expected_s(len(self.waiting))) from None
        except asyncio.CancelledError:  # the client left while waiting
            if place.done() and not place.cancelled():
                self.leave()  # it had just been handed a place: pass it on
            else:
                self._forget(place)
            raise

    def _forget(self, place: asyncio.Future) -> None:
        try:
            self.waiting.remove(place)
        except ValueError:
            pass

    def held(self, seconds: float) -> None:
        """A first step held its place this long."""
        self.step_s = self.step_s * STEP_KEEP + seconds * (1 - STEP_KEEP)

    def leave(self) -> None:
        while self.waiting:
            place = self.waiting.popleft()
            if not place.done():
                place.set_result(None)  # the place goes to the oldest waiter; ``running`` stays
                return
        self.running -= 1


def _capacity() -> float:
    """The turns a second the places of this event loop's gate start (0: no gate yet)."""
    try:
        gate = _gates.get(asyncio.get_running_loop())
    except RuntimeError:
        return 0.0
    return gate.capacity() if gate is not None else 0.0


def _refusal(ahead_s: float = 0.0) -> Overloaded:
    return Overloaded(BUSY, retry_after=pressure.retry_after(ahead_s))


_gates: dict[asyncio.AbstractEventLoop, _Gate] = {}


@asynccontextmanager
async def turn_start():
    """Hold one of this process's turn-start places for the block, or raise Overloaded (503) at
    once when the queue is full, or after TURN_START_WAIT_MS without a place. 0 places: no gate."""
    if settings.TURN_STARTS_MAX <= 0:
        pressure.admit()
        yield
        return
    loop = asyncio.get_running_loop()
    gate = _gates.get(loop)
    if gate is None:
        for old in [old for old in _gates if old.is_closed()]:
            del _gates[old]
        gate = _gates[loop] = _Gate(loop)
    await gate.enter()
    pressure.admit()
    began = time.monotonic()
    try:
        yield
    finally:
        gate.held(time.monotonic() - began)
        gate.leave()
