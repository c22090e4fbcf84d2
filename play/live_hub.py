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

from play import live

log = logging.getLogger(__name__)

BLOCK_SHARE = 0.6  # the hub's blocking read waits this share of the client's socket timeout when nothing
# happens: a read that waited longer would fail as a timeout (redis-py's default is 5 s), and it did: every
# quiet stretch ended every page, and 1,000 pages came back at once (bench/together.py)
QUEUE_MAX = 2_000  # events a page may lag behind before its stream ends (it comes back where it was)
COUNT = 500  # events one read takes across all streams
# after a read that found events, the hub lets others come this long before it reads again: one read
# (its every stream's key and id sent, its answer parsed) for many events, not one a piece
# measured (bench/together.py, 1,000 pages): a read per event was ~12% of the web processes' CPU
GATHER_S = 0.025
AWAY_S = 5.0  # Redis away this long, the pages are told the live stream is away


class Lagged(Exception):
    """The page fell QUEUE_MAX events behind (or the hub lost Redis): it reads the story again."""


class Page:
    """A page's place at the hub: its queue of (id, event, data, seen_by)."""

    def __init__(self, adventure_id: int):
        self.adventure_id = adventure_id
        self.queue: asyncio.Queue = asyncio.Queue()
        self.lagged = False

    def put(self, item) -> None:
        if self.lagged:
            return
        if self.queue.qsize() >= QUEUE_MAX:
            self.end()
        else:
            self.queue.put_nowait(item)

    def end(self) -> None:
        """The page's next get raises Lagged (it fell behind, or the hub lost Redis)."""
        self.lagged = True
        self.queue.put_nowait(None)

    async def take(self, timeout: float) -> list:
        """The events waiting (at least one, or none once ``timeout`` passed); Lagged when the page
        must read the story again."""
        items = []
        if self.queue.empty():
            try:
                async with asyncio.timeout(max(0.0, timeout)):  # no task a wait (asyncio.wait_for makes one)
                    items.append(await self.queue.get())
            except TimeoutError:
                return []
        while not self.queue.empty():
            items.append(self.queue.get_nowait())
        if None in items:
            raise Lagged()
        return items


class Hub:
    def __init__(self):
        self.pages: dict[int, set[Page]] = {}
        self.position: dict[int, str] = {}  # per story: the id the hub has read up to
        self.wake_key = f"live:hub:{secrets.token_hex(8)}"
        self.wake_at = "0-0"
        self.task: asyncio.Task | None = None

    async def join(self, adventure_id: int) -> tuple[Page, str]:
        """A page of ``adventure_id`` at the hub, and the id of the last event the hub read of it
        (the page gets every event after that one)."""
        page = Page(adventure_id)
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
        client = live.loop_redis()
        away_since = None
        while self.position:
            streams = {self.wake_key: self.wake_at} | {live._key(a): at for a, at in self.position.items()}
            try:
                found = await client.xread(streams, count=COUNT, block=int(live.SOCKET_TIMEOUT_S * 1000 * BLOCK_SHARE))
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
                for event_id, fields in entries:
                    item = live.parsed(event_id, fields)
                    self.position[adventure_id] = item[0]
                    for page in self.pages.get(adventure_id, ()):
                        page.put(item)
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
