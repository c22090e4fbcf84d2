"""One Redis connection pool per process (per REDIS_URL): rate limits, demo
counters, locks, heartbeats and /healthz share it. Redis holds only queues,
locks and short-lived counters, so every call is short: a Redis that hangs
fails a call in seconds, and one that is down fails it at once.

A Redis that hangs (its host frozen, its process stopped) fails the first call
after its timeout; for BREAK_S after that, this process's calls to it fail at
once as if it were down (every caller already degrades on a refused
connection), then one call tries again while the others still fail at once:
its answer ends the silence, its timeout starts another BREAK_S. Without it a turn of a story played
together waited out a timeout at every Redis call on its way (its place in
line, each live event, its last context): 20 s a turn, measured."""

from __future__ import annotations

import threading
import time

import hiredis
import redis
import redis.asyncio.connection as aconnection
from django.conf import settings
from redis.connection import SENTINEL

CONNECT_TIMEOUT_S = 1.0
READ_TIMEOUT_S = 2.0
MAX_CONNECTIONS = 64  # per process; web threads and worker slots each hold at most one at a time
BREAK_S = 3.0  # after a call that Redis did not answer in time, this process's calls fail at once this long

_silent_until: dict[tuple, float] = {}  # (host, port) -> when one call may try that silent Redis again


def _refuse_while_silent(connection) -> None:
    if not _silent_until:
        return
    key = (connection.host, connection.port)
    until = _silent_until.get(key)
    if until is None or getattr(connection, "_trying", False):
        return
    now = time.monotonic()
    if now < until:
        raise redis.ConnectionError(f"Redis at {key[0]}:{key[1]} did not answer moments ago")
    _silent_until[key] = now + BREAK_S  # this connection tries; the others keep failing at once meanwhile
    connection._trying = True


def _went_silent(connection) -> None:
    connection._trying = False
    _silent_until[(connection.host, connection.port)] = time.monotonic() + BREAK_S


def _answered(connection) -> None:
    if _silent_until:
        connection._trying = False
        _silent_until.pop((connection.host, connection.port), None)


class Connection(redis.Connection):
    """redis-py's connection, failing at once while its Redis is silent (module docstring)."""

    def connect(self):
        _refuse_while_silent(self)
        try:
            return super().connect()
        except redis.TimeoutError:
            _went_silent(self)
            raise

    def send_packed_command(self, command, check_health=True):
        _refuse_while_silent(self)
        return super().send_packed_command(command, check_health)

    def read_response(self, *args, timeout=SENTINEL, **kwargs):
        try:
            response = super().read_response(*args, timeout=timeout, **kwargs)
        except redis.TimeoutError:
            if timeout is SENTINEL:  # the socket's own timeout, not a short read a caller asked for
                _went_silent(self)
            raise
        _answered(self)
        return response


class HiredisPacked:
    """An asyncio connection that packs its commands with hiredis, as redis-py's own sync connections do
    (its asyncio ones pack in Python: the hub's XREAD of 250 followed stories took ~660 us to pack,
    ~70 us so; py-spy, bench/together.py: ~2% of a web process). Byte for byte the same commands."""

    def pack_command(self, *args):
        if isinstance(args[0], str):
            args = tuple(args[0].encode().split()) + args[1:]
        elif b" " in args[0]:
            args = tuple(args[0].split()) + args[1:]
        try:
            return [
                hiredis.pack_command(tuple(bytes(a) if isinstance(a, (bytearray, memoryview)) else a for a in args))
            ]
        except TypeError as exc:
            raise redis.DataError(str(exc)) from exc


class PackedConnection(HiredisPacked, aconnection.Connection):
    """The live hub's own connection (outside the breaker: play.live_hub)."""


class AsyncConnection(HiredisPacked, aconnection.Connection):
    """The event loop's connection (play.live), failing at once while its Redis is silent."""

    async def connect(self):
        _refuse_while_silent(self)
        try:
            return await super().connect()
        except redis.TimeoutError:
            _went_silent(self)
            raise

    async def send_packed_command(self, command, check_health=True):
        _refuse_while_silent(self)
        return await super().send_packed_command(command, check_health)

    async def read_response(self, *args, timeout=None, **kwargs):
        try:
            response = await super().read_response(*args, timeout=timeout, **kwargs)
        except redis.TimeoutError:
            if timeout is None:
                _went_silent(self)
            raise
        _answered(self)
        return response


_clients: dict[str, redis.Redis] = {}
_lock = threading.Lock()


def redis_client() -> redis.Redis:
    """This process's client for REDIS_URL, on its pool (redis-py makes a new pool's connections
    after a fork). One client object a URL: it takes a connection from the pool for each command and
    is shared by every thread; building one (its response callbacks) cost a worker's pass ~5%."""
    url = settings.REDIS_URL
    client = _clients.get(url)
    if client is None:
        with _lock:
            client = _clients.get(url)
            if client is None:
                pool = redis.ConnectionPool.from_url(
                    url,
                    socket_timeout=READ_TIMEOUT_S,
                    socket_connect_timeout=CONNECT_TIMEOUT_S,
                    max_connections=MAX_CONNECTIONS,
                    health_check_interval=30,
                    connection_class=Connection,
                )
                client = _clients[url] = redis.Redis(connection_pool=pool)
    return client
