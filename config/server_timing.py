"""Where a turn's first step spent its time, as a ``Server-Timing`` header (W3C Server Timing).

On when the setting SERVER_TIMING is (the benches turn it on; browsers' developer tools show it): a
turn's answer then names its phases and their milliseconds, e.g. ``admit;dur=0.1, thread;dur=2.3,
access;dur=1.8, claim;dur=0.6, context;dur=9.7, total;dur=15.2``; a garbage collection inside the
step adds ``gc0``/``gc1``/``gc2`` (time_collections). Off, every call here is a no-op that
costs one context-variable read. The phases are recorded into one object shared by the request's
coroutine and its thread (a context variable holds it; sync_to_async copies the context, not the object).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar

from django.conf import settings

_now = time.perf_counter
_current: ContextVar[Timing | None] = ContextVar("server_timing", default=None)


class Timing:
    def __init__(self) -> None:
        self.started = _now()
        self.phases: list[tuple[str, float]] = []  # (name, seconds), in the order they ended

    def add(self, name: str, seconds: float) -> None:
        self.phases.append((name, seconds))

    def header(self) -> str:
        totals: dict[str, float] = {}
        for name, seconds in self.phases:  # a phase met twice (a second try in line) is summed
            totals[name] = totals.get(name, 0.0) + seconds
        totals["total"] = _now() - self.started
        return ", ".join(f"{name};dur={seconds * 1000:.1f}" for name, seconds in totals.items())


def begin() -> Timing | None:
    """A request's timing, from now; None when SERVER_TIMING is off."""
    timing = Timing() if getattr(settings, "SERVER_TIMING", False) else None
    _current.set(timing)  # also when off: no timing of an earlier request in this context goes on
    return timing


def now() -> float | None:
    """A start mark for ``since`` (None when no request is timed: nothing is measured)."""
    return _now() if _current.get() is not None else None


def since(name: str, started: float | None) -> None:
    """Record ``name`` as the time from ``started`` (a ``now()``) to now."""
    timing = _current.get()
    if timing is not None and started is not None:
        timing.add(name, _now() - started)


@contextmanager
def phase(name: str):
    """Time the block as ``name`` (nothing when no request is timed)."""
    timing = _current.get()
    if timing is None:
        yield
        return
    started = _now()
    try:
        yield
    finally:
        timing.add(name, _now() - started)


_gc_started: dict[int, float] = {}


def _gc_timed(phase_: str, info: dict) -> None:
    """A garbage collection that ran inside a timed request, as its phase ``gc<generation>`` (the
    collector stops every thread of the process; the thread whose allocation set it off pays it)."""
    if phase_ == "start":
        _gc_started[info["generation"]] = _now()
        return
    timing = _current.get()
    started = _gc_started.pop(info["generation"], None)
    if timing is not None and started is not None:
        timing.add(f"gc{info['generation']}", _now() - started)


def time_collections() -> None:
    """Name the garbage collector's pauses in the header (called once by a timed web process)."""
    import gc

    if _gc_timed not in gc.callbacks:
        gc.callbacks.append(_gc_timed)


def stamp(response, timing: Timing | None):
    """``response`` with its Server-Timing header, when timed."""
    if timing is not None:
        response["Server-Timing"] = timing.header()
    return response
