"""Admission of turns: past what a process can start promptly, a turn is refused at once.

A turn's first step (the claim, the player's action, recall, the context) is CPU work on two
shared cores. Admitted without bound, a crowd queues for the CPU and every player waits: the
first words of every reply come late and the wait grows without bound. So each web process
runs at most ``TURN_STARTS_MAX`` first steps at once and lets at most ``TURN_STARTS_QUEUED``
more wait for a place; a turn past those, or one that has waited ``TURN_START_WAIT_MS``, is
answered 503 with ``Retry-After`` before anything is stored, so the turns admitted keep their
first-token time and a refusal comes at once. The play page says so and tries again.
"""

from __future__ import annotations

import asyncio
from collections import deque
from contextlib import asynccontextmanager

from django.conf import settings

from config.admission import BUSY, pressure  # one wording and one wait for both doors
from config.errors import Unavailable


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
