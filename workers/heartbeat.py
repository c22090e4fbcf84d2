"""Worker heartbeats in Redis, read by /healthz and `workers_status`.

Each worker process writes ``HEARTBEAT_PREFIX + hostname`` = unix time every
WORKER_HEARTBEAT_INTERVAL seconds, expiring after WORKER_HEARTBEAT_STALE.
"""

from __future__ import annotations

import logging
import time

import redis
from celery import bootsteps
from django.conf import settings

from config.redis_pool import redis_client

log = logging.getLogger(__name__)

HEARTBEAT_PREFIX = "everlore:worker-heartbeat:"


def heartbeat_write(*, client: redis.Redis, hostname: str) -> None:
    client.set(HEARTBEAT_PREFIX + hostname, f"{time.time():.3f}", ex=settings.WORKER_HEARTBEAT_STALE)


def heartbeats_read(*, client: redis.Redis) -> dict[str, float]:
    """hostname -> unix time of its last heartbeat, for workers not yet stale."""
    keys = list(client.scan_iter(match=HEARTBEAT_PREFIX + "*", count=100))
    if not keys:
        return {}
    values = client.mget(keys)
    out = {}
    for key, value in zip(keys, values):
        if value is not None:
            out[key.decode()[len(HEARTBEAT_PREFIX) :]] = float(value)
    return out


class Heartbeat(bootsteps.StartStopStep):
    """Celery worker step: beat while the worker runs, clear the key on shutdown."""

    requires = {"celery.worker.components:Timer"}

    def __init__(self, worker, **kwargs):
        super().__init__(worker, **kwargs)
        self.tref = None
        self.client = None

    def start(self, worker):
        self.client = redis_client()
        self.beat(worker)
        self.tref = worker.timer.call_repeatedly(settings.WORKER_HEARTBEAT_INTERVAL, self.beat, (worker,), priority=10)

    def beat(self, worker):
        try:
            heartbeat_write(client=self.client, hostname=worker.hostname)
        except redis.RedisError as exc:
            log.warning("worker heartbeat not written: %s", exc.__class__.__name__)

    def stop(self, worker):
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None
        if self.client is not None:
            try:
                self.client.delete(HEARTBEAT_PREFIX + worker.hostname)
            except redis.RedisError:
                pass
