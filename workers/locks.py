"""Per-adventure (and per-agent) locks in Redis: a token and a TTL, extended
while the holder works. The lock saves work; correctness rests on the
database (cursor compare-and-set and unique constraints)."""

from __future__ import annotations

import threading
import uuid

import redis
from django.conf import settings

from config.redis_pool import redis_client

LOCK_TTL_MS = 60_000  # a holder that stops extending loses the lock after this
EXTEND_EVERY_S = 15.0  # how often a working holder extends its lock
RERUN_TTL_S = 3600  # a pending re-run request expires after this

_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
_EXTEND = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"
)


def client() -> redis.Redis:
    return redis_client()


class Lock:
    """``with Lock(...) as held:`` held is False when someone else has it."""

    def __init__(self, name: str, *, ttl_ms: int | None = None, extend_every: float | None = None):
        self.key = f"everlore:lock:{name}"
        self.rerun_key = f"everlore:rerun:{name}"
        self.followup_key = f"everlore:followup:{name}"
        self.token = uuid.uuid4().hex
        self.ttl_ms = ttl_ms or settings.WORKER_LOCK_TTL_MS
        self.extend_every = extend_every or settings.WORKER_LOCK_EXTEND_S or min(EXTEND_EVERY_S, self.ttl_ms / 3000)
        self.redis = client()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost = False

    def acquire(self) -> bool:
        if not self.redis.set(self.key, self.token, nx=True, px=self.ttl_ms):
            return False
        self._stop.clear()
        self._thread = threading.Thread(target=self._keep, daemon=True)
        self._thread.start()
        return True

    def _keep(self) -> None:
        while not self._stop.wait(self.extend_every):
            try:
                if not self.redis.eval(_EXTEND, 1, self.key, self.token, self.ttl_ms):
                    self.lost = True
                    return
            except redis.RedisError:
                pass  # try again; if Redis stays away the TTL ends the lock

    def release(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(5)
        try:
            self.redis.eval(_RELEASE, 1, self.key, self.token)
        except redis.RedisError:
            pass  # the TTL ends it

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
