"""A turn's idempotency key: the client's name for an action it sends (the play page sends one with
each), kept in Redis for TURN_KEY_TTL_S so that the same action sent again is used again while it
still waits for its reply, never stored twice. Redis keeps it for convenience: when Redis cannot be
reached the turn is played without it and the answer says so (``UNAVAILABLE``), never refused."""

from __future__ import annotations

import logging

import redis

from config.errors import Conflict
from config.redis_pool import redis_client
from stories.models import Action, Adventure
from stories.tree import lineage

log = logging.getLogger(__name__)

TURN_KEY_TTL_S = 600  # how long a turn's idempotency key is remembered
UNAVAILABLE = (
    "this action's Idempotency-Key could not be checked or kept just now (the site's short-term store is "
    "unreachable): it was played once; before sending it again, look whether the story already holds it"
)


class KeyUnavailable(Exception):
    """Redis could not be asked: the turn goes on without its key."""


def _name(user_id: int, adventure_id: int, key: str) -> str:
    return f"turn-key:{user_id}:{adventure_id}:{key}"


def sent_before(*, user_id: int, adventure: Adventure, key: str) -> Action | None:
    """The action an earlier request with ``key`` stored, if it still waits for its reply at the
    end of the story; None when the key is new (or forgotten). An action already answered, or no
    longer at the end, is a 409: the story moved on since. KeyUnavailable when Redis is away."""
    try:
        stored = redis_client().get(_name(user_id, adventure.pk, key))
    except redis.RedisError as exc:
        log.warning("turn key not checked: Redis unreachable (%s)", exc.__class__.__name__)
        raise KeyUnavailable from None
    if stored is None:
        return None
    branch = lineage.head(adventure)
    tip = lineage.node_at_even_hidden(branch, branch.tip_depth)
    if tip is None or tip.pk != int(stored):
        raise Conflict("this action was already played (the request was sent twice): reload the story")
    return tip


def remember(*, user_id: int, adventure_id: int, key: str, action_id: int) -> bool:
    """Keep ``key`` for the action just stored; False when Redis is away (the turn goes on)."""
    try:
        redis_client().set(_name(user_id, adventure_id, key), action_id, ex=TURN_KEY_TTL_S)
    except redis.RedisError as exc:
        log.warning("turn key not kept: Redis unreachable (%s)", exc.__class__.__name__)
        return False
    return True
