"""A turn's answers as the player gets them: the 201 body (the stored actions, the context, the usage,
the memories used), a failed turn's (its error and the actions kept), a gather round's 202, and a
server-sent event's bytes."""

from __future__ import annotations

from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from config import errors
from config.serializer_fields import represent
from play import live, turns
from play import serializers as s
from stories.tree import lineage


def event(name: str, data) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + JSONRenderer().render(data) + b"\n\n"


def answer(result: turns.TurnResult, retried: bool) -> dict:
    """The 201 answer: the stored actions, the context, the usage and the memories used."""
    # A new node has one take; only a retry adds a take to an existing node.
    counts = lineage.take_counts(result.actions) if retried else {}
    return represent(
        s.TurnResultSerializer,
        {
            "actions": result.actions,
            "context": result.context.as_dict(),
            "usage": {
                "model": result.completion.model,
                "prompt_tokens": result.completion.prompt_tokens,
                "completion_tokens": result.completion.completion_tokens,
                "cached_tokens": result.completion.cached_tokens,
                "prefix_reused": result.context.prefix_reused,
                "latency_ms": result.completion.latency_ms,
                "demo": result.demo,
            },
            "memories": [
                {"id": m.id, "text": m.text, "similarity": m.similarity, "pinned": m.pinned}
                for m in result.memories
                if m.id in result.context.memory_ids
            ],
            "recall_note": result.context.recall_note,
            "notices": list(result.notices),
        },
        context={"take_counts": counts},
    )


def failed(exc: turns.TurnFailed) -> tuple[int, dict, dict]:
    """The model (or the database) failed the turn: its error, and the player's actions that were kept."""
    status, body, headers = errors.answer(exc.error)
    body = {
        **body,
        "stored_actions": s.ActionSerializer(exc.stored, many=True).data,
        "hint": "your action was kept; fix the problem and use retry to get the reply",
    }
    return status, body, headers


def gathered(exc: turns.Gathered, adventure_id: int) -> dict:
    """The 202 answer of an action a gather round keeps until its narration (and the members' pages
    are told at once)."""
    body = {
        "actions": s.ActionSerializer([exc.action], many=True).data,
        "gather": {
            "waiting": [name for _, name in exc.round.waiting],
            "closes_at": exc.round.closes_at.isoformat() if exc.round.closes_at else None,
        },
    }
    live.publish_after_commit(adventure_id, "gathered", {"actions": [live.action_data(exc.action)], **body["gather"]})
    return body


def failed_response(exc: turns.TurnFailed) -> Response:
    status, body, headers = failed(exc)
    return Response(body, status=status, headers=headers)
