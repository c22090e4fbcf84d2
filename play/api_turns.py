"""Turns, continues and retries over HTTP, as JSON (201, the whole answer at
once) or, when the client sends ``Accept: text/event-stream``, as server-sent
events while the model writes:

    event: token   data: {"text": "..."}          one per piece of text, in order
    event: done    data: <the 201 JSON answer>    the reply was stored
    event: error   data: <the 424/429 JSON answer, with "status">   the model failed

Everything before the model call (authentication, CSRF, parsing, the adventure's owner, rate
limits, a 409 while another reply is written) runs as in every DRF view, in one database step, and
its errors answer JSON with their status as before. The model is then awaited on the event loop
with no thread and no database connection held. A client that disconnects stops the reply: the
model call is cancelled and the text written so far is kept as the reply (nothing when nothing was
written; the player's action stays).
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from config import admission, errors, server_timing
from config.async_db import db_step
from config.errors import Conflict, DomainError, InvalidRequest, NotFound
from config.serializer_fields import valid as _valid
from config.web_protocol import BODY_WRITER, arrived
from play import live_hub, turn_line, turns
from play import serializers as s
from play import turn_answers as answers
from play.api_support import adventure_for as _adventure
from play.api_support import json_answer as _json
from play.api_support import token_event
from stories import limits
from stories.adventures import access_adventure
from stories.tree.generation import BUSY, generation_busy

TURN_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")  # an Idempotency-Key header's shape

EVENTS = "text/event-stream"
_STREAM_DOC = OpenApiResponse(
    response=OpenApiTypes.STR,
    description=(
        "With `Accept: text/event-stream`: the reply as server-sent events while the model writes it. "
        '`event: token` carries `{"text": ...}` (a piece of the reply); the stream ends with `event: done` '
        "carrying exactly the 201 JSON answer, or `event: error` carrying the 424/429 JSON answer with its "
        "`status`. Closing the connection stops the reply and keeps the text written so far."
    ),
    examples=[
        OpenApiExample(
            "stream",
            media_type=EVENTS,
            value=(
                'event: token\ndata: {"text": "The door"}\n\nevent: token\ndata: {"text": " opens."}\n\n'
                'event: done\ndata: {"actions": [...], "context": {...}, "usage": {...}, "memories": [...]}\n\n'
            ),
        )
    ],
)


@dataclass(frozen=True)
class Begun:
    """A turn that may go on to its model call: what the synchronous part hands the awaited part."""

    prepared: turns.Prepared
    retried: bool


@dataclass(frozen=True)
class Waiting:
    """A turn of a story played together in free mode, sent while a reply is written: it waits its
    place in line (play.turn_line) with nothing stored yet, then plays as sent."""

    adventure_id: int
    user_id: int
    mode: str
    text: str
    key: str
    place: str = ""  # its place in line, by when it reached the site (turn_line.Line)
    private: bool = False  # a secret (stories.party.secrets): told to the narrator alone, or
    to: tuple[str, ...] = ()  # whispered to these characters


LINED = (None, "free", "gather")  # turn modes whose turns wait in line while a reply is written


def _in_line(adventure) -> bool:
    """Whether a busy story makes this turn wait in line rather than answer 409: a story played
    together, in free or gather mode."""
    return bool(getattr(adventure, "together", False)) and getattr(adventure, "turn_mode", None) in LINED


def _sent(waiting: Waiting) -> dict:
    """The turn as its player sent it, for turns.begin_play."""
    return {
        "user_id": waiting.user_id,
        "mode": waiting.mode,
        "text": waiting.text,
        "key": waiting.key,
        "private": waiting.private,
        "to": list(waiting.to),
    }


def _play(waiting: Waiting):
    """A turn whose place in line came: access asked again (a member removed meanwhile is refused),
    then played; Waiting again while the story is still busy. One database step."""
    if generation_busy(adventure_id=waiting.adventure_id):
        return waiting  # one indexed read; a turn's first step (access, the claim) only once it is free
    try:
        if not get_user_model().objects.filter(pk=waiting.user_id, is_active=True).exists():
            raise NotFound()  # suspended while in line: nothing is played
        adventure = access_adventure(
            user_id=waiting.user_id, adventure_id=waiting.adventure_id, for_play=True, may="play"
        )
        prepared = turns.begin_play(adventure=adventure, **_sent(waiting))
    except turns.TurnFailed as exc:
        return _json(*answers.failed(exc))
    except turns.Gathered as exc:
        return _json(202, answers.gathered(exc, waiting.adventure_id))
    except Conflict as exc:
        if exc.code == "generating":
            return waiting
        return _json(*errors.answer(exc))
    except DomainError as exc:
        return _json(*errors.answer(exc))
    return Begun(prepared, retried=False)


def _lined(adventure, waiting: Waiting, arrived_at: float, *, line: turn_line.Line | None = None):
    """A turn of a story whose turns wait in line: its place first (by ``arrived_at``, when its request
    reached the site; ``line``: the place it took then, _early_place), then the story when no place is
    ahead of it; Waiting (in its place) while a turn ahead or a reply has the story. Redis away: no
    line, and a busy story answers the 409 it always had."""
    line = line or turn_line.Line(waiting.adventure_id)
    first = line.join(arrived_at)
    if first is None:
        return Begun(turns.begin_play(adventure=adventure, **_sent(waiting)), retried=False)
    waiting = dataclasses.replace(waiting, place=line.me)
    if not first:
        return waiting
    try:
        begun = Begun(turns.begin_play(adventure=adventure, **_sent(waiting)), retried=False)
    except Conflict as exc:
        if exc.code == "generating":
            return waiting  # keeps its place
        line.leave_now()
        raise
    except BaseException:
        line.leave_now()
        raise
    line.leave_now()
    return begun


async def _wait_in_line(waiting: Waiting):
    """Begun when the turn's place in line comes and the story is free, or an answer (a 409 after
    turn_line.WAIT_S; the client leaving drops the place and stores nothing).

    The turn follows its story at this process's hub (play.live_hub) and tries to play when a reply
    is stored or failed (the story's ``done`` or ``failed`` event, published after the claim is
    freed), so a 10 s reply costs the turn first in line one try, not one a second; its place's
    heartbeat is renewed every turn_line.RENEW_EVERY_S, and every turn_line.TRY_EVERY_S it tries
    anyway (a reply whose process died frees the story without an event)."""
    loop = asyncio.get_running_loop()
    line = turn_line.Line(waiting.adventure_id, me=waiting.place)
    deadline = loop.time() + turn_line.WAIT_S
    page, _ = await live_hub.hub().join(waiting.adventure_id)  # before the first try: no event missed
    try:
        tried_at, freed = None, True
        while loop.time() < deadline:
            if await line.first():
                if freed or tried_at is None or loop.time() - tried_at >= turn_line.TRY_EVERY_S:
                    tried_at = loop.time()
                    outcome = await db_step(_play, waiting)
                    if not isinstance(outcome, Waiting):
                        return outcome
            # no thread and no database connection while waiting
            freed = await live_hub.reply_stored(page, min(turn_line.RENEW_EVERY_S, deadline - loop.time()))
        return _json(*errors.answer(Conflict(BUSY, code="generating")))
    finally:
        live_hub.hub().leave(page)
        await asyncio.shield(line.leave())


class _TurnView(APIView):
    """An async DRF view. DRF's part (authentication, CSRF, parsing, throttles,
    the adventure's owner, limits; its exception handling) is DRF's own
    ``dispatch``, run as one database step; its handler answers either a
    Response (the turn ends there, JSON whatever the client accepts) or a
    ``Begun`` turn, whose model is then awaited with no thread held."""

    view_is_async = True  # Django awaits ``dispatch``; the handlers below are DRF's synchronous part

    def perform_content_negotiation(self, request, force=False):
        return JSONRenderer(), JSONRenderer.media_type

    def finalize_response(self, request, response, *args, **kwargs):
        if isinstance(response, (Begun, Waiting)):
            return response
        response = super().finalize_response(request, response, *args, **kwargs)
        response.render()  # inside the database step: a serializer may read rows
        return response

    lined = False  # whether a turn of this view takes its place in a story's line (play.turn_line)

    async def _first_step(self, request, *args, **kwargs):
        try:
            asked = server_timing.now()
            async with admission.turn_start():  # past what this process starts promptly: 503 at once
                server_timing.since("admit", asked)
                return await db_step(super().dispatch, request, *args, **kwargs)
        except admission.Overloaded as exc:
            return _json(*errors.answer(exc))

    async def dispatch(self, request, *args, **kwargs):
        timing = server_timing.begin()
        place = await _early_place(self, request, kwargs.get("adventure_id"))
        try:
            begun = await self._first_step(request, *args, **kwargs)
        except BaseException:
            if place is not None:
                await asyncio.shield(place.leave())
            raise
        if place is not None and not isinstance(begun, (Begun, Waiting)):
            await asyncio.shield(place.leave())  # refused or answered: its place goes at once
        if isinstance(begun, Waiting):
            with server_timing.phase("line"):
                begun = await _wait_in_line(begun)
        if not isinstance(begun, Begun):
            return server_timing.stamp(begun, timing)
        reply = turns.Reply(begun.prepared, stream=EVENTS in request.headers.get("Accept", ""))
        if reply.call.stream:
            writer = request.scope.get("extensions", {}).get(BODY_WRITER) if hasattr(request, "scope") else None
            response = StreamingHttpResponse(_events(reply, retried=begun.retried, writer=writer), content_type=EVENTS)
            response["X-Accel-Buffering"] = "no"  # a proxy passes each event on as it comes
            return server_timing.stamp(response, timing)
        try:
            async for _ in reply.deltas():
                pass
        except asyncio.CancelledError:  # the client left: nothing was shown, nothing of the reply is kept
            await reply.stop()
            raise
        try:
            result = await reply.finish()
        except turns.TurnFailed as exc:
            return server_timing.stamp(_json(*await db_step(answers.failed, exc)), timing)
        return server_timing.stamp(_json(201, await db_step(answers.answer, result, begun.retried)), timing)


async def _early_place(view, request, adventure_id) -> turn_line.Line | None:
    """The place in its story's line a turn takes as its request is read, on the event loop, when this
    story was seen played in line (turn_line.lined): held through the door's wait, a thread
    and the first step, so no turn that came after it can play ahead meanwhile. The first step joins
    it again, with the same arrival (``request.turn_place``)."""
    if not view.lined or not isinstance(adventure_id, int) or not await turn_line.lined(adventure_id):
        return None
    line, stamp = turn_line.Line(adventure_id), arrived(getattr(request, "scope", None))
    if not await line.early(stamp):
        return None
    request.turn_place = (line, stamp)
    return line


class TurnView(_TurnView):
    lined = True

    @extend_schema(
        request=s.TURN_INPUT_SCHEMA,
        responses={201: s.TurnResultSerializer, 202: s.GatheredSerializer, (200, EVENTS): _STREAM_DOC},
        tags=["story"],
        summary="Play a turn",
        description="Stores the player's action (`do`, `say`, `story`; `continue` with no text) and the "
        "model's reply on the current branch. 409 while another reply is being written; "
        "when the model fails, the action is kept (`stored_actions`) and retry gets the reply. "
        "Send an `Idempotency-Key` per action: the same key sent again uses the action already stored "
        "(while it still waits for its reply) instead of storing it twice.",
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                required=False,
                description="1 to 64 letters, digits, '-' or '_', new for each action the player writes; "
                "remembered 10 minutes; empty: no key",
                pattern=r"^[A-Za-z0-9_-]{0,64}$",
            )
        ],
    )
    def post(self, request, adventure_id):
        with server_timing.phase("access"):
            adventure = _adventure(request, adventure_id, for_play=True, may="play")
        data = _valid(s.TurnInputSerializer, request)
        limits.turn(user_id=request.user.id)
        key = request.headers.get("Idempotency-Key", "")
        if key and not TURN_KEY.fullmatch(key):
            raise InvalidRequest(
                "Idempotency-Key: 1 to 64 letters, digits, '-' or '_' (one per action the player sends)"
            )
        waiting = Waiting(
            adventure.pk,
            request.user.id,
            data["mode"],
            data["text"].strip(),
            key,
            private=data["private"],
            to=data["to"],
        )
        early = getattr(request, "turn_place", None)  # (Line, arrival): taken as the request was read
        lined = _in_line(adventure)
        turn_line.seen(adventure.pk, lined)
        if early is not None and not lined:
            early[0].leave_now()
        try:
            if lined:
                with server_timing.phase("join"):
                    if early is not None:
                        return _lined(adventure, waiting, early[1], line=early[0])
                    return _lined(adventure, waiting, arrived(getattr(request, "scope", None)))
            return Begun(turns.begin_play(adventure=adventure, **_sent(waiting)), retried=False)
        except turns.TurnFailed as exc:
            return answers.failed_response(exc)
        except turns.Gathered as exc:
            return Response(answers.gathered(exc, adventure.pk), status=202)


class RetryView(_TurnView):
    @extend_schema(
        request=None,
        responses={201: s.TurnResultSerializer, (200, EVENTS): _STREAM_DOC},
        tags=["story"],
        summary="Retry the last reply",
        description="Writes another take of the newest reply (or the missing reply after a failed turn); "
        "the earlier takes stay and can be chosen again.",
    )
    def post(self, request, adventure_id):
        adventure = _adventure(request, adventure_id, for_play=True, may="play")
        limits.turn(user_id=request.user.id)
        try:
            prepared = turns.begin_retry(user_id=request.user.id, adventure=adventure)
        except turns.TurnFailed as exc:
            return answers.failed_response(exc)
        return Begun(prepared, retried=True)


async def _events(reply: turns.Reply, *, retried: bool, writer=None):
    """The reply's events; ``writer``: the connection's body writer (config.web_protocol), which writes
    each piece with no pass through Django's streaming response and the ASGI send (an empty part
    through that send waits for a reader that fell behind)."""
    try:
        yield ": the model is writing\n\n"
        async for piece in reply.deltas():
            event = token_event(piece)
            if writer is None or not writer.takes():
                yield event
            elif not writer(event) or writer.behind():
                yield b""
    except (asyncio.CancelledError, GeneratorExit):  # stopped: keep what was written
        await reply.stop()
        raise
    try:
        result = await reply.finish()
    except turns.TurnFailed as exc:
        status, body, headers = await db_step(answers.failed, exc)
        yield answers.event(
            "error",
            {
                **body,
                "status": status,
                **({"retry_after": int(headers["Retry-After"])} if "Retry-After" in headers else {}),
            },
        )
        return
    yield answers.event("done", await db_step(answers.answer, result, retried))


turn = TurnView.as_view()
retry = RetryView.as_view()
