"""Per-user rate limits as atomic fixed-window counters in Redis (shared by
every web and worker process). Over the limit: RateLimited, a 429 with
Retry-After. If Redis is unreachable the limit is not enforced (logged): a
broker outage must not stop play."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from contextlib import contextmanager

import redis
from django.conf import settings

from config.errors import RateLimited
from config.redis_pool import redis_client

log = logging.getLogger(__name__)
PREFIX = "everlore:rate:"


def _client() -> redis.Redis:
    return redis_client()


def hit(*, bucket: str, who: str, limit: int, window_s: int, message: str, amount: int = 1) -> None:
    """Count ``amount`` events for ``who`` in ``bucket``; raise RateLimited past ``limit`` per ``window_s``."""
    if limit <= 0:
        return
    now = time.time()
    window = int(now // window_s)
    key = f"{PREFIX}{bucket}:{who}:{window}"
    try:
        pipe = _client().pipeline()
        pipe.incrby(key, amount)
        pipe.expire(key, window_s * 2)
        count, _ = pipe.execute()
    except redis.RedisError as exc:
        log.warning("rate limit %s not enforced: Redis unreachable (%s)", bucket, exc.__class__.__name__)
        return
    if count > limit:
        try:  # a refused request spends none of the allowance
            _client().decrby(key, amount)
        except redis.RedisError:
            pass
        retry_after = int((window + 1) * window_s - now) + 1
        raise RateLimited(message, retry_after=retry_after)


OUTBOUND_PREFIX = "everlore:outbound:"
# KEYS[1] the account's places; ARGV: now, this call's end (unix s), its id, the places an account has
_TAKE_PLACE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
redis.call('EXPIREAT', KEYS[1], math.ceil(tonumber(ARGV[2])) + 1)
return 1
"""
_local_places: dict[int, int] = {}
_local_lock = threading.Lock()


@contextmanager
def outbound(*, user_id: int, hold_s: float):
    """One of the account's OUTBOUND_CALLS_AT_ONCE places, held while a request waits on the
    account's model endpoint (at most ``hold_s`` seconds: a place a dead process held frees
    itself then). All taken: RateLimited at once. Without Redis the bound holds per process."""
    limit = settings.OUTBOUND_CALLS_AT_ONCE
    if limit <= 0:
        yield
        return
    key, member, now = f"{OUTBOUND_PREFIX}{user_id}", uuid.uuid4().hex, time.time()
    try:
        client = _client()
        taken = client.eval(_TAKE_PLACE, 1, key, now, now + hold_s + 1, member, limit)
    except redis.RedisError:
        client = None
        with _local_lock:
            taken = _local_places.get(user_id, 0) < limit
            if taken:
                _local_places[user_id] = _local_places.get(user_id, 0) + 1
    if not taken:
        raise RateLimited(
            f"your model endpoint already has {limit} calls from you waiting on it at once, the most an account "
            "has; wait for one to finish",
            retry_after=int(hold_s) + 1,
        )
    try:
        yield
    finally:
        if client is None:
            with _local_lock:
                _local_places[user_id] -= 1
        else:
            try:
                client.zrem(key, member)
            except redis.RedisError:
                pass  # it frees itself at its end time


def count_of(*, bucket: str, who: str, window_s: int) -> int:
    try:
        return int(_client().get(f"{PREFIX}{bucket}:{who}:{int(time.time() // window_s)}") or 0)
    except redis.RedisError:
        return 0


def turn(*, user_id: int) -> None:
    hit(
        bucket="turns",
        who=str(user_id),
        limit=settings.TURNS_PER_MINUTE,
        window_s=60,
        message=f"too many turns: at most {settings.TURNS_PER_MINUTE} a minute",
    )


def model_call(*, user_id: int) -> None:
    hit(
        bucket="model-calls",
        who=str(user_id),
        limit=settings.MODEL_CALLS_PER_MINUTE,
        window_s=60,
        message=f"too many model calls: at most {settings.MODEL_CALLS_PER_MINUTE} a minute",
    )


def signup(*, ip: str) -> None:
    hit(
        bucket="signups",
        who=ip,
        limit=settings.SIGNUPS_PER_HOUR,
        window_s=3600,
        message=f"too many new accounts from your address: at most {settings.SIGNUPS_PER_HOUR} an hour",
    )


def signup_open(*, ip: str) -> None:
    """RateLimited when ``ip`` has used its signups this hour. Checked before the
    form is read, so a taken and a free name get the same 429 once the limit
    applies (else the two answers would tell which names exist)."""
    limit = settings.SIGNUPS_PER_HOUR
    if limit > 0 and count_of(bucket="signups", who=ip, window_s=3600) >= limit:
        now = time.time()
        raise RateLimited(
            f"too many new accounts from your address: at most {limit} an hour",
            retry_after=int((now // 3600 + 1) * 3600 - now) + 1,
        )


def password_reset(*, ip: str) -> None:
    hit(
        bucket="password-resets",
        who=ip,
        limit=settings.SIGNUPS_PER_HOUR,
        window_s=3600,
        message="too many reset requests from your address; try again later",
    )


def adventure_import(*, user_id: int) -> None:
    hit(
        bucket="imports",
        who=str(user_id),
        limit=settings.IMPORTS_PER_HOUR,
        window_s=3600,
        message=f"too many imports: at most {settings.IMPORTS_PER_HOUR} an hour",
    )


def scenario_publish(*, user_id: int) -> None:
    hit(
        bucket="scenario-publishes",
        who=str(user_id),
        limit=settings.SCENARIO_PUBLISHES_PER_DAY,
        window_s=86400,
        message=f"you have published {settings.SCENARIO_PUBLISHES_PER_DAY} scenarios today, the most a day",
    )


def report(*, user_id: int) -> None:
    """A player's report of a scenario or of a story played together (one budget for both)."""
    hit(
        bucket="scenario-reports",
        who=str(user_id),
        limit=settings.SCENARIO_REPORTS_PER_HOUR,
        window_s=3600,
        message=f"too many reports: at most {settings.SCENARIO_REPORTS_PER_HOUR} an hour",
    )


def writes(*, who: str) -> None:
    """An account's write (``who``: its id, or ``ip:<address>`` for an anonymous client)."""
    hit(
        bucket="writes",
        who=who,
        limit=settings.WRITES_PER_MINUTE,
        window_s=60,
        message=f"too many changes: at most {settings.WRITES_PER_MINUTE} a minute; wait a moment",
    )


def file_import(*, user_id: int) -> None:
    hit(
        bucket="file-imports",
        who=str(user_id),
        limit=settings.FILE_IMPORTS_PER_HOUR,
        window_s=3600,
        message=f"too many files read: at most {settings.FILE_IMPORTS_PER_HOUR} cards and lorebooks an hour",
    )


def scenario_play(*, user_id: int) -> None:
    hit(
        bucket="scenario-plays",
        who=str(user_id),
        limit=settings.SCENARIO_PLAYS_PER_HOUR,
        window_s=3600,
        message=f"too many stories started: at most {settings.SCENARIO_PLAYS_PER_HOUR} from scenarios an hour",
    )


def share(*, user_id: int) -> None:
    hit(
        bucket="shares",
        who=str(user_id),
        limit=settings.SHARES_PER_HOUR,
        window_s=3600,
        message=f"too many sharing changes: at most {settings.SHARES_PER_HOUR} new links and visibility changes "
        "an hour",
    )


def recall(*, user_id: int) -> None:
    hit(
        bucket="recalls",
        who=str(user_id),
        limit=settings.RECALLS_PER_MINUTE,
        window_s=60,
        message=f"too many recalls: at most {settings.RECALLS_PER_MINUTE} a minute for your worlds together",
    )


def world_events(*, world_id: int, count: int) -> None:
    """``count`` events (a batch counts each) for one world: all its tokens and its owner's own
    credentials together."""
    hit(
        bucket="world-events",
        who=f"world-{world_id}",
        limit=settings.WORLD_EVENTS_PER_MINUTE,
        window_s=60,
        amount=count,
        message=f"too many events: at most {settings.WORLD_EVENTS_PER_MINUTE} a minute for this world "
        "(all its tokens together)",
    )


def login_blocked(*, username: str, ip: str) -> bool:
    """True while this username from this address has failed too often."""
    return (
        count_of(bucket="login-failures", who=f"{username.lower()}|{ip}", window_s=settings.LOGIN_FAILURE_WINDOW_S)
        >= settings.LOGIN_FAILURES_MAX
    )


def login_failed(*, username: str, ip: str) -> None:
    try:
        hit(
            bucket="login-failures",
            who=f"{username.lower()}|{ip}",
            limit=10**9,
            window_s=settings.LOGIN_FAILURE_WINDOW_S,
            message="",
        )
    except RateLimited:
        pass
