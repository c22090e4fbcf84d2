"""What every API view of the story room shares: the owner-checked adventure."""

from __future__ import annotations

from json.encoder import encode_basestring_ascii

from django.http import HttpResponse
from rest_framework.renderers import JSONRenderer

from stories import adventures
from stories.models import Adventure


def adventure_for(request, adventure_id, *, for_play: bool = False, may: str = "own") -> Adventure:
    """The request user's adventure (``may``: "own", or "play" / "watch" for a story's members); a
    non-member's id is a 404, a member asking more than their role a 403. ``for_play``: with the
    owner's AI settings."""
    return adventures.access_adventure(user_id=request.user.id, adventure_id=adventure_id, for_play=for_play, may=may)


def member_id(request, adventure: Adventure) -> int | None:
    """The request user's id when they are a member of ``adventure``, not its owner."""
    return None if adventure.owner_id == request.user.id else request.user.id


def json_answer(status: int, body: dict, headers: dict | None = None) -> HttpResponse:
    """A JSON answer from a view Django awaits (outside DRF's rendering)."""
    response = HttpResponse(JSONRenderer().render(body), status=status, content_type="application/json")
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def token_event(piece: str) -> bytes:
    """A streamed turn's piece as its server-sent event: ``json.dumps({"text": piece})``'s very bytes,
    the text through the C encoder alone (the hot path: a reply is ~60 of them)."""
    return b'event: token\ndata: {"text": ' + encode_basestring_ascii(piece).encode() + b"}\n\n"
