"""One reader of the live streams per process: a single blocking XREAD over every story a page of
this process follows, its events handed to each page's queue (play.api_live). A page per read
cost each page a Redis round trip, a wake-up and a parse per event (measured: about half the web
CPU a turn of a story played together costs beyond one played alone, bench/together.py).

A page joins at the hub's position for its story; a page resumed from an older event reads what it
missed itself (one XRANGE) and then takes the hub's events, each once. A new story wakes the hub's
read at once (an event on the hub's own stream), so no page waits for the next round."""

from __future__ import annotations

import asyncio
import logging
import secrets
import weakref

import redis
import redis.asyncio as aredis
from django.conf import settings

from config.redis_pool import CONNECT_TIMEOUT_S, PackedConnection
from play import live

log = logging.getLogger(__name__)

BLOCK_S = 3.0  # the hub's blocking read waits this long when nothing happens, then reads again
# The blocking read is on a connection of the hub's own, outside the process's Redis breaker
# (config.redis_pool), whose read timeout is the wait and READ_MARGIN_S: the answer to a read whose wait
# ran out comes when the event loop next runs, and on a busy loop that is late. With the shared client
# (its 5 s timeout, the wait a share of it) a loop late by more than the margin failed the read as a
# Redis timeout, which tripped the breaker and lost the events published meanwhile (CI, a test's 0.4 s
# timeout). A read that times out with this margin is a Redis gone silent: the hub waits and reads again.
READ_MARGIN_S = 5.0
QUEUE_MAX = 2_000  # events a page may lag behind before its stream ends (it comes back where it was)
COUNT = 500  # events one read takes across all streams
# after a read that found events, the hub lets others come this long before it reads again: one read
# (its every stream's key and id sent, its answer parsed) for many events, not one a piece
# measured (bench/together.py, 1,000 pages): a read per event was ~12% of the web processes' CPU
GATHER_S = 0.025
AWAY_S = 5.0  # Redis away this long, the pages are told the live stream is away


class Lagged(Exception):
    """The page fell QUEUE_MAX events behind (or the hub lost Redis): it reads the story again."""


ASK = ("", "members?", "{}", None)  # put on a written page's queue: a members event went out, ask again


class Page:
    """A page's place at the hub: its queue of (id, event, data, seen_by).

    A page with a ``writer`` (config.web_protocol's body writer: the live route under the site's own
    server) is written by the hub itself while its task waits (``take(direct=True)``): each event's
    bytes once for every page that may see it, one write per page a read, no wake-up of the page's
    task. A members event ends that until the task has asked again whether its member still may follow
    (an ASK on its queue; what comes meanwhile queues), so a removed member is written nothing more."""

    def __init__(self, adventure_id: int, user_id: int | None = None, writer=None):
        self.adventure_id, self.user_id, self.writer = adventure_id, user_id, writer
        self.queue: asyncio.Queue = asyncio.Queue()
        self.lagged = False
        self.direct = False  # the hub writes this page's events itself
        self.after = (0, 0)  # the order of the last event the page was given (api_live keeps it)
        self.sent_at = 0.0  # the event loop's time of the last bytes written to the page

    def put(self, item) -> None:
        if self.lagged:
            return
        if self.queue.qsize() >= QUEUE_MAX:
            self.end()
        else:
            self.queue.put_nowait(item)

    def deliver(self, items: list, wire: Wire) -> None:
        """The hub's events of a read: written at once (direct), or queued for the page's task."""
        if not self.direct or self.lagged:
            for item in items:
                self.put(item)
            return
        out, stop = self.render(items, wire)
        if stop is not None:  # a members event: the rest waits for the task's question
            self.direct = False
            self.queue.put_nowait(ASK)
            for item in items[stop:]:
                self.put(item)
        if out:
            self.sent_at = asyncio.get_running_loop().time()
            if not self.writer(b"".join(out)):  # the connection closed or stopped reading: the page ends
                self.end()

    def render(self, items: list, wire: Wire) -> tuple[list[bytes], int | None]:
        """What this page is shown of ``items`` (the one rule for both paths): each event once, in order;
        a secret's events only to those it was told to (the others a bare ``secret`` event at its end,
        so they learn a turn was played); nothing after a members event, whose index + 1 is returned
        (None when there is none): the member is asked again first."""
        out = []
        for k, item in enumerate(items):
            order = wire.orders[k]
            if order <= self.after:
                continue  # the hub was behind this page: already sent
            self.after = order
            seen_by = item[3]
            if seen_by is None or self.user_id in seen_by:
                out.append(wire.told(k))
            elif item[1] in ("done", "failed"):
                out.append(wire.notice(k))
            if item[1] == "members":
                return out, k + 1
        return out, None

    def end(self) -> None:
        """The page's next get raises Lagged (it fell behind, or the hub lost Redis)."""
        self.lagged = True
        self.direct = False
        self.queue.put_nowait(None)

    async def take(self, timeout: float, *, direct: bool = False) -> list:
        """The events waiting (at least one, or none once ``timeout`` passed); Lagged when the page
        must read the story again. ``direct``: while nothing waits, the hub writes the page's events
        itself (the page has a writer), and the wait ends on an ASK, the end, or the timeout."""
        items = []
        if self.queue.empty():
            self.direct = direct and self.writer is not None and not self.lagged
            try:
                async with asyncio.timeout(max(0.0, timeout)):  # no task a wait (asyncio.wait_for makes one)
                    items.append(await self.queue.get())
            except TimeoutError:
                return []
            finally:
                self.direct = False
        while not self.queue.empty():
            items.append(self.queue.get_nowait())
        if None in items:
            raise Lagged()
        return items


async def reply_stored(page: Page, within: float) -> bool:
    """Whether the story's reply was stored or failed (or the story changed) within ``within`` seconds."""
    loop = asyncio.get_running_loop()
    until = loop.time() + within
    while (left := until - loop.time()) > 0:
        try:
            events = await page.take(timeout=left)
        except Lagged:
            return True  # events were dropped: look again
        if any(name in ("done", "failed", "story") for _, name, _, _ in events):
            return True
    return False


def sse(event_id: str | None, name: str, data: str) -> bytes:
    """An event as a page reads it; ``data`` is JSON text already (as the stream keeps it: one line)."""
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}event: {name}\ndata: {data}\n\n".encode()


class Wire:
    """A read's events of one story as bytes, each made once for all the pages that get it."""

    __slots__ = ("items", "orders", "_told", "_notice")

    def __init__(self, items: list):
        self.items = items
        self.orders = [live.order_of(item[0]) for item in items]
        self._told: dict[int, bytes] = {}
        self._notice: dict[int, bytes] = {}

    def told(self, k: int) -> bytes:
        found = self._told.get(k)
        if found is None:
            event_id, name, data, _ = self.items[k]
            found = self._told[k] = sse(event_id, name, data)
        return found

    def notice(self, k: int) -> bytes:
        found = self._notice.get(k)
        if found is None:
            found = self._notice[k] = sse(self.items[k][0], "secret", "{}")
        return found


class Hub:
    def __init__(self):
        self.pages: dict[int, set[Page]] = {}
        self.position: dict[int, str] = {}  # per story: the id the hub has read up to
        self.wake_key = f"live:hub:{secrets.token_hex(8)}"
        self.wake_at = "0-0"
        self.task: asyncio.Task | None = None

    async def join(self, adventure_id: int, user_id: int | None = None, writer=None) -> tuple[Page, str]:
        """A page of ``adventure_id`` at the hub, and the id of the last event the hub read of it
        (the page gets every event after that one); ``writer``: see Page."""
        page = Page(adventure_id, user_id, writer)
        new = adventure_id not in self.position
        if new:
            self.position[adventure_id] = await asyncio.to_thread(live.last_id, adventure_id)
        self.pages.setdefault(adventure_id, set()).add(page)
        at = self.position[adventure_id]
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._run())
        elif new:
            await self._wake()
        return page, at

    def leave(self, page: Page) -> None:
        pages = self.pages.get(page.adventure_id)
        if pages is not None:
            pages.discard(page)
            if not pages:
                del self.pages[page.adventure_id]
                self.position.pop(page.adventure_id, None)

    async def _wake(self) -> None:
        try:
            client = live.loop_redis()
            await client.xadd(self.wake_key, {"w": "1"}, maxlen=10, approximate=True)
            await client.expire(self.wake_key, 3600)
        except redis.RedisError as exc:
            log.warning("the live hub could not be woken: %s", exc)

    async def _run(self) -> None:
        try:
            await self._read()
        except Exception:  # a bug: every page ends (and comes back where it was); the next page starts a hub
            log.exception("the live hub stopped")
            for pages in self.pages.values():
                for page in pages:
                    page.end()
            raise

    async def _read(self) -> None:
        client = aredis.Redis.from_url(
            settings.REDIS_URL,
            max_connections=1,
            socket_timeout=BLOCK_S + READ_MARGIN_S,
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            connection_class=PackedConnection,
        )
        try:
            await self._read_on(client)
        finally:
            # this read reads no more: a page that joins while its connection closes (an await) starts
            # a new one. Given to this task, it was never read for (its member's removal never ended it)
            if self.task is asyncio.current_task():
                self.task = None
            await asyncio.shield(client.aclose())

    async def _read_on(self, client) -> None:
        away_since = None
        while self.position:
            streams = {self.wake_key: self.wake_at} | {live._key(a): at for a, at in self.position.items()}
            try:
                found = await client.xread(streams, count=COUNT, block=int(BLOCK_S * 1000))
            except redis.RedisError as exc:
                # the hub keeps its place in every stream: a blip loses nothing, and the pages wait;
                # Redis away for AWAY_S, they are told (each comes back where it was)
                now = asyncio.get_running_loop().time()
                away_since = away_since or now
                log.warning("the live hub lost Redis: %s", exc)
                if now - away_since >= AWAY_S:
                    for pages in self.pages.values():
                        for page in pages:
                            page.end()
                await asyncio.sleep(1.0)
                continue
            away_since = None
            for key, entries in found or ():
                key = live._text(key)
                if key == self.wake_key:
                    self.wake_at = live._text(entries[-1][0])
                    continue
                adventure_id = int(key.rsplit(":", 1)[1])
                if adventure_id not in self.position:
                    continue  # its last page left meanwhile
                items = [live.parsed(event_id, fields) for event_id, fields in entries]
                self.position[adventure_id] = items[-1][0]
                wire = Wire(items)
                for page in self.pages.get(adventure_id, ()):
                    page.deliver(items, wire)
            if found:
                await asyncio.sleep(GATHER_S)  # the next read takes what came meanwhile, in one round


_hubs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # per event loop (a closed loop's goes)


def hub() -> Hub:
    """This event loop's hub."""
    loop = asyncio.get_running_loop()
    found = _hubs.get(loop)
    if found is None:
        found = _hubs[loop] = Hub()
    return found
