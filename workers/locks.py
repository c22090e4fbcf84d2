"""Per-adventure (and per-agent) locks in Redis: redis-py's ``Lock`` (a token and a timeout,
released only by its holder), kept while the holder works by a keeper thread that extends it, with
what redis-py's lock does not have: the flag a waiting job leaves to ask the holder to run again,
and the one follow-up a waiter schedules in case the holder died. The lock saves work; correctness
rests on the database (cursor compare-and-set and unique constraints)."""

from __future__ import annotations

import threading

import redis
from django.conf import settings
from redis.exceptions import LockError

from config.redis_pool import redis_client

EXTEND_EVERY_S = 15.0  # how often a working holder extends its lock
RERUN_TTL_S = 3600  # a pending re-run request expires after this


def client() -> redis.Redis:
    return redis_client()


class Lock:
    """``lock.acquire()`` is False when someone else has it; a holder's lock is extended every
    ``extend_every`` seconds until ``release`` (``lost``: it ran out anyway)."""

    def __init__(self, name: str, *, ttl_ms: int | None = None, extend_every: float | None = None):
        self.rerun_key = f"everlore:rerun:{name}"
        self.followup_key = f"everlore:followup:{name}"
        self.ttl_ms = ttl_ms or settings.WORKER_LOCK_TTL_MS
        self.extend_every = extend_every or settings.WORKER_LOCK_EXTEND_S or min(EXTEND_EVERY_S, self.ttl_ms / 3000)
        self.redis = client()
        # not thread-local: the keeper thread extends the token the worker's thread took
        self.held = self.redis.lock(f"everlore:lock:{name}", timeout=self.ttl_ms / 1000, thread_local=False)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost = False

    def acquire(self) -> bool:
        if not self.held.acquire(blocking=False):
            return False
        self._stop.clear()
        self._thread = threading.Thread(target=self._keep, daemon=True)
        self._thread.start()
        return True

    def _keep(self) -> None:
        while not self._stop.wait(self.extend_every):
            try:
                self.held.reacquire()  # the whole timeout again, only while this token holds it
            except LockError:
                self.lost = True
                return
            except redis.RedisError:
                pass  # try again; if Redis stays away the timeout ends the lock

    def release(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(5)
        try:
            self.held.release()
        except (LockError, redis.RedisError):
            pass  # lost already, or the timeout ends it

    def request_rerun(self) -> None:
        self.redis.set(self.rerun_key, "1", ex=RERUN_TTL_S)

    def take_rerun(self) -> bool:
        return bool(self.redis.delete(self.rerun_key))

    def claim_followup(self) -> bool:
        """True for the one waiting job (per lock TTL) that should schedule a
        check after the TTL, in case the holder died without running again."""
        return bool(self.redis.set(self.followup_key, "1", nx=True, px=self.ttl_ms))


def adventure_lock(adventure_id: int) -> Lock:
    return Lock(f"adventure:{adventure_id}")


def agent_lock(agent_id: int) -> Lock:
    return Lock(f"agent:{agent_id}")
