"""One Redis connection pool per process (per REDIS_URL): rate limits, demo
counters, locks, heartbeats and /healthz share it. Redis holds only queues,
locks and short-lived counters, so every call is short: a Redis that hangs
fails a call in seconds, and one that is down fails it at once."""

from __future__ import annotations

import threading

import redis
from django.conf import settings

CONNECT_TIMEOUT_S = 1.0
READ_TIMEOUT_S = 2.0
MAX_CONNECTIONS = 64  # per process; web threads and worker slots each hold at most one at a time

_pools: dict[str, redis.ConnectionPool] = {}
_lock = threading.Lock()


def redis_client() -> redis.Redis:
    """A client on this process's pool (redis-py makes a new pool after a fork)."""
    url = settings.REDIS_URL
    pool = _pools.get(url)
    if pool is None:
        with _lock:
            pool = _pools.get(url)
            if pool is None:
                pool = _pools[url] = redis.ConnectionPool.from_url(
                    url,
                    socket_timeout=READ_TIMEOUT_S,
                    socket_connect_timeout=CONNECT_TIMEOUT_S,
                    max_connections=MAX_CONNECTIONS,
                    health_check_interval=30,
                )
    return redis.Redis(connection_pool=pool)
