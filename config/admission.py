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
first steps at once and lets at most ``TURN_STARTS_QUEUED`` more wait for a place; a turn past
those, or one that has waited ``TURN_START_WAIT_MS``, is answered 503 with ``Retry-After``
before anything is stored, so the turns admitted keep their first-token time and a refusal
comes at once. The play page says so and tries again.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import time
from collections import deque
from contextlib import asynccontextmanager

from django.conf import settings

from config.asgi_guard import SECURITY_HEADERS
from config.errors import Unavailable

LAG_TICK_S = 0.02  # seconds between the loop watcher's timers
CPU_EVERY_TICKS = 5  # the machine's CPU counters are read every this many ticks (0.1 s)
CPU_KEEP = 0.8  # the busy figure keeps this share of its last value each reading (a ~0.5 s memory)
CPU_BAND_PCT = 10  # around ADMISSION_CPU_BUSY_PCT, the share of turns refused grows from none to all
PROC_STAT = "/proc/stat"
CGROUP_DIR = "/sys/fs/cgroup"  # cgroup v2: cpu.max (a quota) and cpu.stat (time used)
LAG_DECAY = 0.8  # the lag figure keeps this share of its last value each tick (a ~0.1 s memory)
RETRY_AFTER_S = (2, 5)  # seconds a refused client is told to wait when few are refused, spread out
RETRY_AFTER_MAX_S = 60  # the longest wait told, however many are refused
PRESSURE_HALF_LIFE_S = 10.0  # refusals and admissions counted with this half-life
PRESSURE_SLACK = 10  # turns: refusals past the admissions by fewer than this are a blip, not overload
BUSY = (
    "the site is busy right now; your turn was not started (nothing was stored), "
    "try again after the seconds in Retry-After"
)
# Answers written here carry the headers the site's middleware gives every answer.
_HEADERS = [(b"content-type", b"application/json"), (b"cache-control", b"no-store"), *SECURITY_HEADERS]


class CpuBusy:
    """The share of the CPU this site may use that was busy lately (0-1); None where it cannot be
    read. In a container given a CPU quota (cgroup v2 ``cpu.max``), the container's own CPU time
    against its quota; otherwise every core of the machine, from Linux's /proc/stat."""

    def __init__(self, path: str = PROC_STAT, cgroup: str = CGROUP_DIR, clock=time.monotonic):
        self.path, self.cgroup, self.clock = path, cgroup, clock  # clock: seconds, for a quota's capacity
        self.busy: float | None = None
        self.quota: float | None = None  # cores the cgroup may use; 0: no quota (the machine's cores)
        self._last: tuple[float, float] | None = None

    def _counters(self) -> tuple[float, float] | None:
        """(busy, capacity) so far, in one unit."""
        if self.quota is None:
            self.quota = _cgroup_quota(self.cgroup)
        try:
            if self.quota:
                with open(os.path.join(self.cgroup, "cpu.stat"), "rb") as stat:
                    usage = next(int(line.split()[1]) for line in stat if line.startswith(b"usage_usec "))
                return usage, self.clock() * 1e6 * self.quota
            with open(self.path, "rb") as stat:
                fields = [int(n) for n in stat.readline().split()[1:9]]
        except (OSError, ValueError, StopIteration, IndexError):
            return None
        if len(fields) < 5:
            return None
        total = sum(fields)
        return total - fields[3] - fields[4], total  # idle and iowait are not busy

    def read(self) -> None:
        counters = self._counters()
        if counters is None:
            return
        if self._last is not None and counters[1] > self._last[1]:
            now = min(1.0, max(0.0, (counters[0] - self._last[0]) / (counters[1] - self._last[1])))
            self.busy = now if self.busy is None else self.busy * CPU_KEEP + now * (1 - CPU_KEEP)
        self._last = counters


def _cgroup_quota(cgroup: str) -> float:
    """Cores a cgroup v2 quota allows (``cpu.max``: quota and period in µs); 0 without one."""
    try:
        with open(os.path.join(cgroup, "cpu.max")) as limit:
            quota, period = limit.read().split()[:2]
        return int(quota) / int(period) if quota != "max" else 0.0
    except (OSError, ValueError, ZeroDivisionError):
        return 0.0


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

    def _behind(self) -> bool:
        """The loop runs late, or the cores are about as busy as the bound: within CPU_BAND_PCT of it
        a turn is refused with a chance that grows from none to all. A turn admitted now costs CPU
        for its whole stream (seconds), so refusing all at the bound and none below it made
        admissions come in waves a stream long; a chance that grows with the load settles it."""
        if self.lag_ms > 0 and self.watcher.lag > self.lag_ms / 1000:
            return True
        busy = self.watcher.cpu.busy
        if self.cpu_busy_pct <= 0 or busy is None:
            return False
        over = (busy * 100 - (self.cpu_busy_pct - CPU_BAND_PCT / 2)) / CPU_BAND_PCT
        return over >= 1 or (over > 0 and random.random() < over)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST":
            return await self.app(scope, receive, send)
        pattern = self._settings()
        if not pattern.match(scope.get("path", "")):
            return await self.app(scope, receive, send)
        if self.lag_ms > 0 or self.cpu_busy_pct > 0:
            self.watcher.watch()
        if self._behind() or 0 < self.in_flight_max <= self.in_flight:
            self.watcher.refused += 1
            return await refuse(send, retry_after=pressure.retry_after())
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

    async def enter(self) -> None:
        if self.running < settings.TURN_STARTS_MAX and not self.waiting:
            self.running += 1
            return
        if len(self.waiting) >= settings.TURN_STARTS_QUEUED:
            raise _refusal()
        place = self.loop.create_future()
        self.waiting.append(place)
        try:
            await asyncio.wait_for(place, settings.TURN_START_WAIT_MS / 1000)
        except asyncio.TimeoutError:
            self._forget(place)  # wait_for cancelled it, so no place is handed to it
            raise _refusal() from None
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

    def leave(self) -> None:
        while self.waiting:
            place = self.waiting.popleft()
            if not place.done():
                place.set_result(None)  # the place goes to the oldest waiter; ``running`` stays
                return
        self.running -= 1


def _refusal() -> Overloaded:
    return Overloaded(BUSY, retry_after=pressure.retry_after())


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
    try:
        yield
    finally:
        gate.leave()
