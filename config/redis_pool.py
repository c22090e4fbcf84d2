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
                )
                client = _clients[url] = redis.Redis(connection_pool=pool)
    return client
