"""In a story played together in free mode, a turn sent while a reply is being written waits its
place in line, in the order sent, instead of a 409; then it plays. Every turn of such a story takes
its place as it reaches the site, before it asks for the story (so a turn refused the story and one
that comes as the reply is stored cannot pass each other), and leaves it once it has the story.
Never lost, never merged: each waiting turn becomes its own node once its turn comes. The line is a
Redis sorted set per adventure, ordered by when each turn's request reached the site (the web
processes' clocks: one machine's, or a deployment's kept in step by NTP); each place has a heartbeat,
so a client that left or a process that died drops out of it within ALIVE_S. A turn in line holds no
thread and no database connection (it sleeps on the event loop between looks). Redis away: no line,
and each turn asks for the story as a story played alone does (played when free, the 409 when busy).

A turn of a story seen played in line (by this process, or by another: ``lined``) takes its place on
the event loop as its request is read (``early``), before the door's wait, a thread and its first
step: a turn that came after it and found the story free cannot play ahead of it while it is on its
way (the bench stored such a turn first, twice in ~1,700, with the site behind)."""

from __future__ import annotations

import secrets
import threading
import time

import redis

from config.redis_pool import redis_client
from play import live

WAIT_S = 120.0  # the longest a turn waits in line (a reply's own deadline is shorter)
RENEW_EVERY_S = 1.5  # a waiting turn renews its place this often (it is woken sooner by its story's events)
TRY_EVERY_S = 5.0  # the turn first in line tries to play this often even with no event (a reply's process died)
ALIVE_S = 5  # a place not renewed for this long is dropped (its client left, its process died)
KEEP_S = 3600  # the line's keys outlive its last use by this much
LINED_KEEP_S = 600.0  # this process takes a story it saw played in line as played in line this long
LINED_MAX = 20_000  # stories remembered so (past it, the oldest half is forgotten)

_lined: dict[int, float] = {}  # adventure id -> monotonic time its "played in line" runs out
_lined_lock = threading.Lock()


def _remember(adventure_id: int) -> float | None:
    """This process takes the story as played in line for LINED_KEEP_S; when it did already, until when."""
    with _lined_lock:
        was = _lined.get(adventure_id)
        if len(_lined) >= LINED_MAX and was is None:
            for old in sorted(_lined, key=_lined.__getitem__)[: LINED_MAX // 2]:
                del _lined[old]
        _lined[adventure_id] = time.monotonic() + LINED_KEEP_S
    return was


def _told_key(adventure_id: int) -> str:
    return f"turnlined:{adventure_id}"


def seen(adventure_id: int, lined: bool) -> None:
    """What a turn's first step found: whether the story's turns wait in line (from a thread). A story
    newly seen so (or half its time on) is told to the other web processes too (a Redis key, asked by
    ``lined``), so the first turn of it that reaches any of them takes its place early as well."""
    if not lined:
        with _lined_lock:
            was = _lined.pop(adventure_id, None)
        if was is not None:
            try:
                redis_client().delete(_told_key(adventure_id))
            except redis.RedisError:
                pass  # it runs out; a turn that takes an early place in vain leaves it at its first step
        return
    was = _remember(adventure_id)
    if was is None or was - time.monotonic() < LINED_KEEP_S / 2:
        try:
            redis_client().set(_told_key(adventure_id), 1, ex=int(LINED_KEEP_S))
        except redis.RedisError:
            pass  # the other processes learn it from their own first turn of the story


def lined_here(adventure_id: int) -> bool:
    """Whether this process saw the story played in line lately (no I/O)."""
    until = _lined.get(adventure_id)
    return until is not None and until > time.monotonic()


async def lined(adventure_id: int) -> bool:
    """Whether the story's turns are played in line, as this process or another saw lately (on the event
    loop: this process's memory, else one Redis look). Redis away: only what this process saw."""
    if lined_here(adventure_id):
        return True
    try:
        told = await live.loop_redis().exists(_told_key(adventure_id))
    except redis.RedisError:
        return False
    if told:
        _remember(adventure_id)
    return bool(told)


def _key(adventure_id: int) -> str:
    return f"turnline:{adventure_id}"


# Takes the place the turn's arrival gives it and answers whether no live place is ahead of it
# (places whose heartbeat stopped are dropped on the way): one round trip for a turn that reaches the site.
_JOIN = """
local key, me = KEYS[1], ARGV[1]
redis.call('ZADD', key, tonumber(ARGV[4]), me)
redis.call('SET', key .. ':alive:' .. me, 1, 'EX', tonumber(ARGV[2]))
redis.call('EXPIRE', key, tonumber(ARGV[3]))
for _, member in ipairs(redis.call('ZRANGE', key, 0, -1)) do
  if member == me then return 1 end
  if redis.call('EXISTS', key .. ':alive:' .. member) == 1 then return 0 end
  redis.call('ZREM', key, member)
end
return 1
"""


class Line:
    """One turn's place in its story's line."""

    def __init__(self, adventure_id: int, *, me: str = ""):
        self.key = _key(adventure_id)
        self.me = me or secrets.token_hex(8)

    def join(self, arrived: float) -> bool | None:
        """Take the place ``arrived`` gives the turn (the wall-clock time its request reached the site:
        config.web_protocol.arrived), so the line keeps the order turns came in, whatever happens to
        each on its way here (a wait for the door's turn-start place or a thread; measured, a turn held
        there joined after one sent 50 ms later to the other web process): True when no live place is
        ahead of it, False when one is, None when Redis is away (no line: the turn tries the claim, and
        a busy story answers the 409)."""
        try:
            client = redis_client()
            return bool(client.register_script(_JOIN)(keys=[self.key], args=[self.me, ALIVE_S, KEEP_S, repr(arrived)]))
        except redis.RedisError:
            return None

    async def early(self, arrived: float) -> bool:
        """Take the place ``arrived`` gives the turn, on the event loop, as its request is read (no look
        at who is ahead: the turn's first step joins again and looks). False when Redis is away."""
        try:
            async with live.loop_redis().pipeline(transaction=False) as pipe:
                pipe.zadd(self.key, {self.me: arrived})
                pipe.set(f"{self.key}:alive:{self.me}", 1, ex=ALIVE_S)
                pipe.expire(self.key, KEEP_S)
                await pipe.execute()
            return True
        except redis.RedisError:
            return False

    def leave_now(self) -> None:
        """Drop this place (from a database step's thread: the turn played, or was answered)."""
        try:
            with redis_client().pipeline(transaction=False) as pipe:
                pipe.zrem(self.key, self.me)
                pipe.delete(f"{self.key}:alive:{self.me}")
                pipe.execute()
        except redis.RedisError:
            pass  # the heartbeat ends: the place is dropped within ALIVE_S

    async def first(self) -> bool:
        """Renew this place; True when no live place is ahead of it (places whose heartbeat
        stopped are dropped on the way). On the event loop's Redis client: no thread, and one round
        trip while the line is as it was."""
        try:
            client = live.loop_redis()
            async with client.pipeline(transaction=False) as pipe:
                pipe.set(f"{self.key}:alive:{self.me}", 1, ex=ALIVE_S)
                pipe.zrange(self.key, 0, -1)
                _, members = await pipe.execute()
            for raw in members:
                member = raw.decode() if isinstance(raw, bytes) else raw
                if member == self.me:
                    return True
                if await client.exists(f"{self.key}:alive:{member}"):
                    return False
                await client.zrem(self.key, member)
            return True
        except redis.RedisError:
            return True  # no line to keep: try the claim, which answers a 409 if the story is busy

    async def leave(self) -> None:
        try:
            client = live.loop_redis()
            async with client.pipeline(transaction=False) as pipe:
                pipe.zrem(self.key, self.me)
                pipe.delete(f"{self.key}:alive:{self.me}")
                await pipe.execute()
        except redis.RedisError:
            pass  # the heartbeat ends: the place is dropped within ALIVE_S
