"""Database steps for code that awaits: the turn path under the ASGI server.

A turn does its short database steps before and after the model call and
holds nothing while it awaits the model: each step runs on the request's
thread and gives its connection back (to the process's pool) when it ends,
and ``release_request_thread`` lets that thread go before the long await, so
a turn waiting on its model holds neither a thread nor a connection. Under
Django's test client the steps run on the calling thread, inside the test's
transaction; a connection inside a transaction is never closed.
"""

from __future__ import annotations

from asgiref.sync import SyncToAsync, sync_to_async
from django.db import connections


def release_connections() -> None:
    """Give this thread's database connections back (to the pool, when pooled)."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and not conn.in_atomic_block:
            conn.close()


def _step(fn, args, kwargs):
    try:
        return fn(*args, **kwargs)
    finally:
        release_connections()


async def db_step(fn, /, *args, **kwargs):
    """``fn(*args, **kwargs)`` on the request's thread; its connection is given back when it returns."""
    return await sync_to_async(_step, thread_sensitive=True)(fn, args, kwargs)


async def db_side_step(fn, /, *args, **kwargs):
    """``fn`` on a pooled thread of the event loop, beside the request (a claim's renewal while a reply is written)."""
    return await sync_to_async(_step, thread_sensitive=False)(fn, args, kwargs)


def release_request_thread() -> None:
    """Let the request's thread go before a long await.

    Django runs a request's synchronous parts (its middleware, our database
    steps) on one thread per request, kept until the request ends. Dropping it
    here ends the thread; a later synchronous step of the same request starts a
    new one. Outside the ASGI server (no per-request thread) this does nothing.
    """
    context = SyncToAsync.thread_sensitive_context.get(None)
    if context is None or getattr(context, "_executor", None) is not None:
        return
    executor = SyncToAsync.context_to_thread_executor.pop(context, None)
    if executor is not None:
        executor.shutdown(wait=False)
