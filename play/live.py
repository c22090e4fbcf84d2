"""A story played together, live: every member's page follows the others' turns and the reply as it
is written, from the one model call (never one per viewer). What happens is appended to a Redis
stream per adventure; each member's page reads it as server-sent events (play.api_live), resumed
after a reconnect from the last event it saw (``Last-Event-ID``), with no gap and no repeat while
the stream still holds it, and told to reload the story when it does not.

Publishing never fails a turn: the story is in the database, the stream only carries it live.
Stories played alone publish nothing (a turn costs what it did)."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets as tokens
import time
import weakref

import redis
import redis.asyncio as aredis
from django.conf import settings
from django.db import transaction

from config.redis_pool import CONNECT_TIMEOUT_S, AsyncConnection, redis_client
from stories.party import secrets

log = logging.getLogger(__name__)

KEPT = 2000  # events a story's stream keeps (about: Redis trims whole nodes)
KEEP_S = 24 * 3600  # an idle story's stream goes after a day
HERE_S = 60  # a page's presence (and its stream's slot) lasts this long unless its stream renews it
PER_USER = 6  # live streams one account may hold open at once
# the reply's pieces reach the pages at most this often (the first at once); measured: every 0.3 s, the
# fan-out of ~35 events a 10 s reply to each page was the largest part of a turn played together
RELAY_EVERY_S = 0.5
CONNECTIONS = 16  # the event loop's Redis connections (the hub's blocking read has its own: play.live_hub)
CONNECTION_WAIT_S = 5.0  # the longest a call waits for one of them
SOCKET_TIMEOUT_S = 5.0  # a call Redis does not answer this long fails


def _key(adventure_id: int) -> str:
    return f"live:{adventure_id}"


def publish(adventure_id: int, event: str, data: dict) -> None:
    """Append ``event`` to the story's stream (a failure is logged, never raised)."""
    try:
        client = redis_client()
        with client.pipeline(transaction=False) as pipe:
            pipe.xadd(_key(adventure_id), {"e": event, "d": json.dumps(data)}, maxlen=KEPT, approximate=True)
            pipe.expire(_key(adventure_id), KEEP_S)
            pipe.execute()
    except redis.RedisError as exc:
        log.warning("live event %s of adventure %s not sent: %s", event, adventure_id, exc)


def publish_after_commit(adventure_id: int, event: str, data: dict) -> None:
    transaction.on_commit(lambda: publish(adventure_id, event, data))


def _fields(event: str, data: dict, seen_by: list[int] | None) -> dict:
    return {"e": event, "d": json.dumps(data)} | ({"s": json.dumps(seen_by)} if seen_by is not None else {})


async def publish_soon(adventure_id: int, event: str, data: dict, *, seen_by: list[int] | None = None) -> None:
    """``publish`` from the event loop, on its asyncio Redis client (no thread hop). ``seen_by``: a
    secret's event (stories.party.secrets), sent only to the pages of those it was told to."""
    await _publish_many([(adventure_id, event, _fields(event, data, seen_by))])


async def _publish_many(events: list[tuple[int, str, dict]]) -> None:
    """Each (adventure id, event, fields) appended to its story's stream, in order, in one round trip."""
    try:
        async with loop_redis().pipeline(transaction=False) as pipe:
            for adventure_id, event, fields in events:
                pipe.xadd(_key(adventure_id), fields, maxlen=KEPT, approximate=True)
                if event != "token":  # a reply's pieces come between its turn's events, which keep the stream
                    pipe.expire(_key(adventure_id), KEEP_S)
            await pipe.execute()
    except redis.RedisError as exc:
        log.warning("%d live events (of adventures %s) not sent: %s", len(events), sorted({e[0] for e in events}), exc)


class Relay:
    """The reply's pieces on their way to the members' pages: the first at once, then what came
    meanwhile at the process's next tick (every RELAY_EVERY_S), in one event (a piece an event would
    cost each page a wake-up a piece). The first send is a task of its own: the actor's own stream
    never waits on Redis (measured: awaiting the first piece's send put a Redis round trip, and the
    busy loop's turn back to the request, before the actor's first word). At a tick, every reply of
    the process with pieces held goes in one round trip (_Ticker: a send a reply was 8% of a web
    process's CPU, bench/together.py); a reply's sends stay one at a time and in order."""

    def __init__(self, adventure_id: int, *, seen_by: list[int] | None = None, after: asyncio.Task | None = None):
        self.adventure_id, self.seen_by, self.held, self.started = adventure_id, seen_by, [], False
        self.after = after  # the turn's own event, published first (its pieces and its end come after it)
        self.sending: asyncio.Task | None = None

    def add(self, piece: str) -> None:
        self.held.append(piece)
        if not self.started:
            self.started = True
            self.sending = asyncio.create_task(self._send())
        else:
            _ticker().want(self)

    def ready(self) -> bool:
        """Whether what is held may go with a tick: the turn's event and the sends before are out."""
        return (
            bool(self.held)
            and (self.after is None or self.after.done())
            and (self.sending is None or self.sending.done())
        )

    def take(self) -> tuple[int, str, dict]:
        text, self.held, self.after = "".join(self.held), [], None
        return (self.adventure_id, "token", _fields("token", {"text": text}, self.seen_by))

    async def _send(self) -> None:
        if self.after is not None:
            await self.after
            self.after = None
        if self.held:  # what came meanwhile goes too
            await _publish_many([self.take()])

    async def flush(self) -> None:
        """Send what is held, after the sends under way (the reply's end comes after its pieces)."""
        _ticker().drop(self)
        if self.sending is not None:
            await self.sending
        await self._send()


class _Ticker:
    """The event loop's clock of replies' pieces: every RELAY_EVERY_S while a reply holds any, what
    each holds goes in one round trip for all of them (publishes at random moments, one a reply,
    never shared one)."""

    def __init__(self):
        self.waiting: dict[Relay, None] = {}  # in the order they asked
        self.task: asyncio.Task | None = None

    def want(self, relay: Relay) -> None:
        self.waiting[relay] = None
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())

    def drop(self, relay: Relay) -> None:
        self.waiting.pop(relay, None)

    async def _run(self) -> None:
        while self.waiting:
            await asyncio.sleep(RELAY_EVERY_S)
            ready = [relay for relay in self.waiting if relay.ready()]
            if not ready:
                continue
            for relay in ready:
                del self.waiting[relay]
            batch = asyncio.get_running_loop().create_task(_publish_many([relay.take() for relay in ready]))
            for relay in ready:
                relay.sending = batch  # its next send, and its end, wait for this one
            await asyncio.shield(batch)


_tickers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # per event loop


def _ticker() -> _Ticker:
    loop = asyncio.get_running_loop()
    ticker = _tickers.get(loop)
    if ticker is None:
        ticker = _tickers[loop] = _Ticker()
    return ticker


def action_data(action) -> dict:
    """A node as the live stream tells it (the story API's shape, less the take count)."""
    return {
        "id": action.pk,
        "branch": action.branch_id,
        "depth": action.depth,
        "kind": action.kind,
        "text": "" if action.hidden else action.text,
        "actor": action.actor,
        "told_to": secrets.told_to(action),
    }


# ---------------------------------------------------------------------------- reading


_clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # per event loop (a closed loop's goes)


def loop_redis() -> aredis.Redis:
    """An asyncio Redis client of this event loop (blocking reads wait on the loop, not a thread).
    Its connections are few and shared: a call waits up to CONNECTION_WAIT_S for one. Measured
    (bench/together.py): with a connection a caller, 1,000 pages opening at once opened hundreds,
    their connects timed out on the busy loop, and the pages came back again and again."""
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        pool = aredis.BlockingConnectionPool.from_url(
            settings.REDIS_URL,
            max_connections=CONNECTIONS,
            timeout=CONNECTION_WAIT_S,
            socket_timeout=SOCKET_TIMEOUT_S,
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            connection_class=AsyncConnection,
        )
        client = _clients[loop] = aredis.Redis(connection_pool=pool)
    return client


def last_id(adventure_id: int) -> str:
    """The id of the story's newest event ("0-0": none yet): a page that starts reads after it."""
    try:
        newest = redis_client().xrevrange(_key(adventure_id), count=1)
    except redis.RedisError:
        return "0-0"
    return _text(newest[0][0]) if newest else "0-0"


def gap(adventure_id: int, after: str) -> bool:
    """Whether events after ``after`` were trimmed from the stream (the page must reload)."""
    if after == "0-0":
        return False
    try:
        oldest = redis_client().xrange(_key(adventure_id), count=1)
    except redis.RedisError:
        return True
    return bool(oldest) and order_of(_text(oldest[0][0])) > order_of(after) and not _held(adventure_id, after)


def _held(adventure_id: int, event_id: str) -> bool:
    return bool(redis_client().xrange(_key(adventure_id), min=event_id, max=event_id))


def order_of(event_id: str) -> tuple[int, int]:
    """An event id as it sorts in the stream."""
    ms, _, seq = event_id.partition("-")
    return int(ms), int(seq or 0)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def since(adventure_id: int, after: str, upto: str) -> list[tuple[str, str, str, list | None]]:
    """The story's events after ``after`` up to ``upto`` (both ids; what a resumed page missed)."""
    found = await loop_redis().xrange(_key(adventure_id), min=f"({after}", max=upto)
    return [parsed(event_id, fields) for event_id, fields in found]


def parsed(event_id, fields) -> tuple[str, str, str, list | None]:
    """An event as the stream holds it: (id, event, its data as JSON text, the user ids a secret's event
    is for). The data stays text: a page sends it as it was stored, never parsed and written again."""
    fields = {_text(k): _text(v) for k, v in fields.items()}
    seen = json.loads(fields["s"]) if "s" in fields else None
    return _text(event_id), fields.get("e", ""), fields.get("d") or "{}", seen


# ---------------------------------------------------------------------------- who is here


def here_clear(adventure_id: int, user_id: int) -> None:
    try:
        redis_client().delete(f"live:{adventure_id}:here:{user_id}")
    except redis.RedisError:
        pass


def here(adventure_id: int, user_ids: list[int]) -> set[int]:
    """Which of ``user_ids`` have the story open live now."""
    if not user_ids:
        return set()
    try:
        marks = redis_client().mget([f"live:{adventure_id}:here:{uid}" for uid in user_ids])
    except redis.RedisError:
        return set()
    return {uid for uid, mark in zip(user_ids, marks, strict=True) if mark}


def stream_open(user_id: int) -> str | None:
    """A slot for one more live stream of ``user_id`` (its token), or None past PER_USER. A slot
    lasts HERE_S unless its stream renews it, so one whose stream never ran is free soon."""
    key, token, now = f"live:slots:{user_id}", tokens.token_hex(8), time.time()
    try:
        with redis_client().pipeline(transaction=False) as pipe:
            pipe.zremrangebyscore(key, "-inf", now)
            pipe.zcard(key)
            if pipe.execute()[1] >= PER_USER:
                return None
            pipe.zadd(key, {token: now + HERE_S})
            pipe.expire(key, HERE_S * 2)
            pipe.execute()
        return token
    except redis.RedisError:
        return None


async def stream_alive(adventure_id: int, user_id: int, token: str) -> None:
    """A page still follows: its presence and its stream's slot last HERE_S more (one round trip on the
    event loop's client)."""
    try:
        async with loop_redis().pipeline(transaction=False) as pipe:
            pipe.set(f"live:{adventure_id}:here:{user_id}", 1, ex=HERE_S)
            pipe.zadd(f"live:slots:{user_id}", {token: time.time() + HERE_S})
            pipe.expire(f"live:slots:{user_id}", HERE_S * 2)
            await pipe.execute()
    except redis.RedisError:
        pass


def stream_closed(user_id: int, token: str) -> None:
    try:
        redis_client().zrem(f"live:slots:{user_id}", token)
    except redis.RedisError:
        pass


def on_tree_changed(sender, *, adventure_id: int, **details) -> None:
    """A tree signal (an undo, an edit, a take chosen, a moderator's hide, a branch switch): the
    pages of a story played together read the story again once the change commits."""
    from stories.party.models import Membership

    if Membership.objects.filter(adventure_id=adventure_id).exists():
        publish_after_commit(adventure_id, "story", {"change": details.get("change", "head")})


def on_access_changed(sender, *, adventure_id: int, **details) -> None:
    """A moderator suspended a member or hid the story: its live pages ask again at once."""
    members_changed(adventure_id, access=True)


def members_changed(adventure_id: int, **details) -> None:
    """Someone joined, left, was removed or changed role, or the turns changed: every page of the
    story reads its members again (and a removed member's stream ends)."""
    publish_after_commit(adventure_id, "members", details)
