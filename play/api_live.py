"""GET /api/adventures/{id}/live/: a story played together, as server-sent events (play.live).

    id: <the event's id>   event: turn    data: {"actions": [the player's node], "retake": false}
                           event: token   data: {"text": "..."}   the reply as it is written
    (a secret's turn, its reply's pieces and its end reach only the pages of those it was told to)
                           event: done    data: {"actions": [the nodes stored], "stopped": false}
                           event: failed  data: {"error": "<code>"}
                           event: secret  data: {}               a turn told to others was played
                           event: gathered data: {"actions": [...], "waiting": [...], "closes_at": "..."}
                                                                  a gather round's action, kept for its narration
                           event: members data: {...}             someone joined, left, or the turns changed
                           event: story   data: {...}             the story changed otherwise: read it again
                           event: presence data: {"user_id": 3, "here": true}
                           event: reset   data: {}                events were missed: read the story again
                           event: gone    data: {}                you are no longer a member: the stream ends

Any member may follow (players and watchers). Sent ``Last-Event-ID`` (a browser's EventSource does
on its own), the stream goes on after that event. Access is asked again on every members event (a
removal, a suspension or a hidden story sends one) and every CHECK_S, so a removed or suspended
member stops at once. The stream waits on the event loop (its queue at this process's one reader of
the streams, play.live_hub), with no thread and no database connection held. Under the site's own
server (config.web_protocol's body writer) the hub writes the events onto the connection itself
while the stream's task waits; the task wakes to ask again, to ping and to renew its presence."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass

import redis
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.renderers import JSONRenderer
from rest_framework.views import APIView

from config import errors
from config.async_db import db_side_step, db_step
from config.errors import RateLimited
from config.web_protocol import BODY_WRITER
from play import live, live_hub
from play.api_support import adventure_for as _adventure
from play.api_support import json_answer as _json
from stories.party import members

EVENTS = "text/event-stream"
EVENT_ID = re.compile(r"\d{1,20}-\d{1,20}")
# A removal, a suspension or a hidden story sends a members event: access is asked again at once.
# The look every CHECK_S is the net under that, so an idle page costs next to nothing.
# measured (bench/together.py): 1,000 open pages asking every 30 s cost more database work than the turns
CHECK_S = 60.0
PING_S = (
    25.0  # a comment line after this long quiet keeps proxies (which close after 60 s quiet) from closing the stream
)
HERE_EVERY_S = 40.0  # presence lasts live.HERE_S (60 s): renewed well before


@dataclass(frozen=True)
class Following:
    adventure_id: int
    user_id: int
    after: str
    resumed: bool


class LiveView(APIView):
    view_is_async = True

    def perform_content_negotiation(self, request, force=False):
        return JSONRenderer(), JSONRenderer.media_type

    def finalize_response(self, request, response, *args, **kwargs):
        if isinstance(response, Following):
            return response
        response = super().finalize_response(request, response, *args, **kwargs)
        response.render()
        return response

    async def dispatch(self, request, *args, **kwargs):
        following = await db_step(super().dispatch, request, *args, **kwargs)
        if not isinstance(following, Following):
            return following
        slot = await asyncio.to_thread(live.stream_open, following.user_id)
        if slot is None:
            limited = RateLimited(f"at most {live.PER_USER} live streams at once; close another page first", 30)
            return _json(*errors.answer(limited))
        writer = request.scope.get("extensions", {}).get(BODY_WRITER) if hasattr(request, "scope") else None
        response = StreamingHttpResponse(_follow(following, slot, writer), content_type=EVENTS)
        # the slot is given back when the response closes, even one whose stream never ran (a HEAD)
        response._resource_closers.append(lambda: live.stream_closed(following.user_id, slot))
        response["X-Accel-Buffering"] = "no"
        response["Cache-Control"] = "no-store"
        return response

    @extend_schema(
        responses={(200, EVENTS): OpenApiResponse(response=OpenApiTypes.STR, description=__doc__)},
        tags=["together"],
        summary="Follow the story live",
    )
    def get(self, request, adventure_id):
        adventure = _adventure(request, adventure_id, may="watch")
        sent = request.headers.get("Last-Event-ID", "").strip()
        if EVENT_ID.fullmatch(sent):
            return Following(adventure.pk, request.user.id, sent, True)
        return Following(adventure.pk, request.user.id, "", False)  # from now on: where the hub stands


def _still_member(following: Following) -> bool:
    return members.may_follow(adventure_id=following.adventure_id, user_id=following.user_id)


def _sse(event_id: str | None, name: str, data: dict) -> bytes:
    return live_hub.sse(event_id, name, json.dumps(data))


async def _follow(f: Following, slot: str, writer=None):
    """The stream's events; ``writer`` (the connection's body writer, when the server gives one): the
    hub writes the story's events itself while this waits (play.live_hub.Page)."""
    aid, uid = f.adventure_id, f.user_id
    page = None
    loop = asyncio.get_running_loop()
    try:
        yield b"retry: 2000\n\n"
        after = f.after
        if f.resumed and await asyncio.to_thread(live.gap, aid, after):
            after = await asyncio.to_thread(live.last_id, aid)
            yield _sse(after, "reset", {})
        page, at = await live_hub.hub().join(aid, uid, writer)
        after = after or at
        page.after = live.order_of(after)
        missed = await live.since(aid, after, at) if live.order_of(at) > page.after else []
        await live.stream_alive(aid, uid, slot)  # here, and the slot kept
        await live.publish_soon(aid, "presence", {"user_id": uid, "here": True})
        now = loop.time()
        page.sent_at = now
        check_at, here_at = now + CHECK_S, now + HERE_EVERY_S
        while True:
            if missed:
                found, missed = missed, []
            else:
                wait = min(check_at, page.sent_at + PING_S, here_at) - loop.time()
                try:
                    found = await page.take(timeout=wait, direct=True)
                except live_hub.Lagged:
                    yield _sse(None, "unavailable", {"detail": "the live stream fell behind; the page reconnects"})
                    return
            ask = False
            if any(item is live_hub.ASK for item in found):  # a members event the hub wrote: ask first
                k = next(k for k, item in enumerate(found) if item is live_hub.ASK)
                found, missed, ask = found[:k], found[k + 1 :], True
            sent, stop = page.render(found, live_hub.Wire(found))
            if stop is not None:  # who may follow changed: nothing after it is sent before the member is asked
                missed, ask = found[stop:] + missed, True
            now = loop.time()
            if sent:
                page.sent_at = now  # a stream that carries events needs no ping
                yield b"".join(sent)  # the events waiting, in one write
            if ask or now >= check_at:
                if not await db_side_step(_still_member, f):
                    yield _sse(None, "gone", {})
                    return
                check_at = now + CHECK_S
            if now >= here_at:
                await live.stream_alive(aid, uid, slot)
                here_at = now + HERE_EVERY_S
            if now >= page.sent_at + PING_S:
                page.sent_at = now
                yield b": ping\n\n"
    except redis.RedisError:
        yield _sse(None, "unavailable", {"detail": "the live stream is away; the page reconnects"})
    finally:
        if page is not None:
            live_hub.hub().leave(page)
        await asyncio.shield(_closed(aid, uid, slot))


async def _closed(aid: int, uid: int, slot: str) -> None:
    await asyncio.to_thread(live.stream_closed, uid, slot)
    await asyncio.to_thread(live.here_clear, aid, uid)
    await live.publish_soon(aid, "presence", {"user_id": uid, "here": False})
