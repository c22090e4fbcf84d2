"""Database steps for code that awaits, and the threads requests run their synchronous parts on.

A turn does its short database steps before and after the model call and holds nothing while it
awaits the model: each step runs on the request's thread and gives its connection back (to the
process's pool) when it ends, and ``release_request_thread`` gives the thread itself back before
the long await, so a turn waiting on its model holds neither a thread nor a connection.

Under the ASGI server each request's synchronous parts (Django's signals and sync views, our
database steps) run on one thread at a time, as Django requires. That thread is *borrowed* from
threads this process started ahead (``request_threads``) and given back when the request ends:
Django's default starts a new thread for every request and another one to join it at the end, and
on a busy process each start holds the event loop until the new thread gets the interpreter lock
(measured: 300-650 ms stalls, every turn's stream paused meanwhile; bench/evening.py). Under
Django's test client the steps run on the calling thread, inside the test's transaction; a
connection inside a transaction is never closed.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextvars import ContextVar

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.db import connections

from config import server_timing

THREADS_STARTED = 16  # threads a web process starts ahead for its requests' synchronous parts
THREADS_KEPT = 64  # threads it keeps when requests give them back (more are let go)


def release_connections() -> None:
    """Give this thread's database connections back (to the pool, when pooled)."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and not conn.in_atomic_block:
            conn.close()


def before_waiting_outside() -> None:
    """Before this thread waits on anything outside the site (a model endpoint, a resolver): a web
    process's connections go back to its pool, so the wait holds none (a worker keeps its own).
    A connection inside a transaction cannot go: callers wait outside transactions."""
    if settings.DB_POOL_SIZE:
        release_connections()


def _step(fn, args, kwargs, asked=None):
    server_timing.since("thread", asked)  # the wait for the request's thread (and the interpreter lock)
    try:
        with server_timing.phase("step"):
            return fn(*args, **kwargs)
    finally:
        with server_timing.phase("release"):
            release_connections()


async def db_step(fn, /, *args, **kwargs):
    """``fn(*args, **kwargs)`` on the request's thread; its connection is given back when it returns."""
    return await sync_to_async(_step, thread_sensitive=True)(fn, args, kwargs, server_timing.now())


async def db_side_step(fn, /, *args, **kwargs):
    """``fn`` on a pooled thread of the event loop, beside the request (a claim's renewal while a reply is written)."""
    return await sync_to_async(_step, thread_sensitive=False)(fn, args, kwargs)


LOOP_THREADS = 8  # the event loop's own pool: name lookups, a claim's renewal beside a reply
_loops_started: set[int] = set()


def loop_threads_start(loop: asyncio.AbstractEventLoop) -> None:
    """Give ``loop`` a default executor whose threads all run from now on (asyncio's starts one the
    first time no idle thread is there, which on a busy process holds every stream until it runs)."""
    if id(loop) in _loops_started:
        return
    _loops_started.add(id(loop))
    executor = ThreadPoolExecutor(max_workers=LOOP_THREADS, thread_name_prefix="loop")
    started = threading.Barrier(LOOP_THREADS + 1)
    for _ in range(LOOP_THREADS):  # each waits for the others: the pool finds no idle thread and starts all
        executor.submit(started.wait, 10)
    started.wait(10)
    loop.set_default_executor(executor)


class RequestThreads:
    """Single-thread executors started ahead, lent to requests one at a time. Borrowing never
    starts a thread while one is free; a request that finds none gets a new one (started at its
    first call), and giving back keeps at most ``kept`` (the rest end without being waited for)."""

    def __init__(self, *, kept: int = THREADS_KEPT):
        self.kept = kept
        self.free: list[ThreadPoolExecutor] = []
        self.lock = threading.Lock()

    def start(self, count: int) -> RequestThreads:
        for _ in range(count):
            executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="request")
            executor.submit(int).result()  # its thread runs from now on
            self.give_back(executor)
        return self

    def borrow(self) -> ThreadPoolExecutor:
        with self.lock:
            if self.free:
                return self.free.pop()
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="request")

    def give_back(self, executor: ThreadPoolExecutor) -> None:
        with self.lock:
            if len(self.free) < self.kept:
                self.free.append(executor)
                return
        executor.shutdown(wait=False)


class _Lease(Executor):
    """One request's thread: borrowed at its first synchronous call, given back by ``release``
    (the next call borrows again). Calls run one at a time, as asgiref's thread-sensitive mode needs."""

    def __init__(self, threads: RequestThreads):
        self.threads = threads
        self.held: ThreadPoolExecutor | None = None

    def submit(self, fn, /, *args, **kwargs) -> Future:
        if self.held is None:
            self.held = self.threads.borrow()
        return self.held.submit(fn, *args, **kwargs)

    def release(self) -> None:
        if self.held is not None:
            self.threads.give_back(self.held)
            self.held = None

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.release()


_lease: ContextVar[_Lease | None] = ContextVar("everlore_request_lease", default=None)


def request_threads(app, *, threads: RequestThreads):
    """The ASGI ``app`` whose HTTP requests run their synchronous parts on a thread lent by
    ``threads`` (asgiref's ThreadSensitiveContext with a caller-owned executor), given back when
    the request ends."""

    async def application(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        loop_threads_start(asyncio.get_running_loop())
        lease = _Lease(threads)
        token = _lease.set(lease)
        try:
            async with ThreadSensitiveContext(executor=lease):
                return await app(scope, receive, send)
        finally:
            _lease.reset(token)
            lease.release()

    return application


def release_request_thread() -> None:
    """Give the request's thread back before a long await; a later synchronous step of the same
    request borrows one again. Outside the ASGI server (no lent thread) this does nothing."""
    lease = _lease.get()
    if lease is not None:
        lease.release()
