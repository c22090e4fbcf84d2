"""The live hub (play.live_hub): one blocking read of the streams per web process, feeding every
page of a story played together. A story can be quiet for minutes between turns: its pages must
still get the next event, and the hub must not fail its read for waiting (redis-py's read timeout
is shorter than a wait on a quiet stream would be)."""

import asyncio
import logging
import time

import pytest
import redis.asyncio as aredis

from play import live, live_hub
from stories.models import Adventure

pytestmark = pytest.mark.django_db


@pytest.fixture
def story(alice):
    return Adventure.objects.create(owner=alice, title="Quiet")


@pytest.mark.parametrize("busy_s", [0.0, 0.8])
def test_a_quiet_storys_page_gets_the_next_event_and_the_hub_never_times_out_waiting(
    story, monkeypatch, caplog, busy_s
):
    """Quiet for several of the hub's blocking reads, and (busy_s) with the event loop held busy past
    the end of one read's wait: no read fails as a Redis timeout, and the next event arrives. A read
    whose answer the busy loop took late once failed as a timeout, tripped the Redis breaker and lost
    the event published next (CI)."""
    monkeypatch.setattr(live_hub, "BLOCK_S", 0.2)  # the hub's wait, shortened for the test

    async def follow():
        hub = live_hub.Hub()
        page, _ = await hub.join(story.pk)
        try:
            assert await page.take(timeout=0.1) == []  # the hub's first read is waiting
            busy_until = time.monotonic() + busy_s  # the event loop runs other work this long (a busy web
            while time.monotonic() < busy_until:  # process): the read's answer waits for it
                pass
            assert await page.take(timeout=1.0) == []
            await live.publish_soon(story.pk, "story", {"change": "head"})
            return await page.take(timeout=10.0)
        finally:
            hub.leave(page)
            hub.task.cancel()

    with caplog.at_level(logging.WARNING):
        found = asyncio.run(follow())
    assert [name for _, name, _, _ in found] == ["story"], "the page got the story's next event"
    assert "lost Redis" not in caplog.text, "the hub's wait on a quiet story failed as a Redis timeout"
    assert "not sent" not in caplog.text, "an event was lost"


def test_a_page_that_joins_while_the_hubs_last_read_closes_gets_the_next_event(story, monkeypatch):
    """The process's last page of any story leaves, so the hub's read ends after its wait and closes its
    connection; a page that joins meanwhile (a member coming back) must get the story's events. One
    that joined while the old read was closing was left to it and got nothing more: the member's
    removal never ended its stream (CI)."""
    monkeypatch.setattr(live_hub, "BLOCK_S", 0.2)  # the hub's wait, shortened for the test
    closing: list[asyncio.Event] = []
    close = aredis.Redis.aclose

    async def slow_close(self, *args, **kwargs):  # the hub's connection takes a while to close
        if closing:
            closing[0].set()
        await asyncio.sleep(0.5)
        return await close(self, *args, **kwargs)

    monkeypatch.setattr(aredis.Redis, "aclose", slow_close)

    async def follow():
        # the loop's client connects first: a connect the CI machine stalled past its 1 s bound lost the
        # event this test publishes (a Redis blip, not the hub's handover this test is about)
        await live.loop_redis().ping()
        closing.append(asyncio.Event())
        hub = live_hub.Hub()
        first, _ = await hub.join(story.pk)
        hub.leave(first)  # no page left: the read ends when its wait does
        await asyncio.wait_for(closing[0].wait(), 5.0)
        page, _ = await hub.join(story.pk)  # while the ended read closes its connection
        try:
            await live.publish_soon(story.pk, "story", {"change": "head"})
            return await page.take(timeout=5.0)
        finally:
            hub.leave(page)
            if hub.task is not None:
                hub.task.cancel()

    found = asyncio.run(follow())
    assert [name for _, name, _, _ in found] == ["story"], "the page that came back got the story's next event"


def test_the_turn_first_in_line_is_woken_by_the_reply_stored_not_by_a_timer(story):
    """A turn waiting its place follows its story at the hub: the reply's end wakes it at once."""
    from play.live_hub import reply_stored

    async def wait():
        hub = live_hub.hub()
        page, _ = await hub.join(story.pk)
        try:
            waiting = asyncio.create_task(reply_stored(page, within=30.0))
            await live.publish_soon(story.pk, "token", {"text": "The door"})  # pieces do not wake it
            await asyncio.sleep(0.2)
            assert not waiting.done()
            await live.publish_soon(story.pk, "done", {"actions": [], "stopped": False})
            return await asyncio.wait_for(waiting, 10.0)  # far under the 30 s it would wait unwoken
        finally:
            hub.leave(page)
            hub.task.cancel()

    assert asyncio.run(wait()) is True
