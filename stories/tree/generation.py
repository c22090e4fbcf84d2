"""One reply is written at a time per adventure. A turn, retry or continue
claims the adventure (a conditional UPDATE: the database decides) before it
stores anything, and frees it when the reply is placed or the call fails.
While it holds the claim, every other write to that story's tree (another
turn, an edit, undo, a take or branch switch) is refused with a 409: the tree
asks ``generation_check`` under the adventure's row lock. The claim lasts
HOLD and is renewed while the reply is being written (keep_claimed), so a web process that
dies mid-turn frees the story within HOLD; a release a database outage
interrupted is retried by the process's next claim (and expires anyway)."""

from __future__ import annotations

import asyncio
import logging
import secrets
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import timedelta

from django.db import DatabaseError, connection
from django.utils import timezone

from config.async_db import db_side_step
from config.errors import Conflict
from stories.models import Adventure

log = logging.getLogger(__name__)

BUSY = "a reply is being written for this adventure; wait for it to finish, then try again"
HOLD = timedelta(seconds=30)  # a claim not renewed for this long is free
RENEW_EVERY_S = 15  # seconds between renewals while the reply is being written: half of HOLD, so most replies
# (under 15 s) need none, and a renewal late by 15 s (a stalled process) still finds its claim
_HELD_BY: ContextVar[str] = ContextVar("generation_held_by", default="")
_unreleased: set[tuple[int, str]] = set()  # releases a database outage interrupted, retried by the next claim


# The claim's statements as written (an ORM update compiles its SQL on every call: ~1 ms of a turn)
_TABLE = Adventure._meta.db_table
_CLAIM = (
    f"UPDATE {_TABLE} SET generation_token = %s, generation_until = %s"
    " WHERE id = %s AND (generation_until IS NULL OR generation_until < %s)"
)
_RELEASE = f"UPDATE {_TABLE} SET generation_token = '', generation_until = NULL WHERE id = %s AND generation_token = %s"
_RENEW = f"UPDATE {_TABLE} SET generation_until = %s WHERE id = %s AND generation_token = %s"
_BUSY = f"SELECT 1 FROM {_TABLE} WHERE id = %s AND generation_until > %s"


def _update(sql: str, params: list) -> int:
    """Rows ``sql`` changed."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def generation_claim(*, adventure_id: int) -> str:
    """Claim the adventure for one generation; returns the claim's token.
    Raises Conflict (409) while another generation holds it."""
    for pending in list(_unreleased):
        generation_release(adventure_id=pending[0], token=pending[1])
    token = secrets.token_hex(16)
    now = timezone.now()
    if _update(_CLAIM, [token, now + HOLD, adventure_id, now]) != 1:
        raise Conflict(BUSY, code="generating")
    return token


def generation_busy(*, adventure_id: int) -> bool:
    """Whether a generation holds the adventure now (one indexed read; the claim itself decides). As
    written: a turn in line asks it each time its place may have come (the ORM's was 2.6% of a web
    process's CPU, bench/together.py)."""
    with connection.cursor() as cursor:
        cursor.execute(_BUSY, [adventure_id, timezone.now()])
        return cursor.fetchone() is not None


def generation_release(*, adventure_id: int, token: str) -> None:
    """Free the adventure, if this claim still holds it. Never raises: a release
    lost to a database outage expires within HOLD."""
    try:
        _update(_RELEASE, [adventure_id, token])
    except DatabaseError:
        _unreleased.add((adventure_id, token))
        log.warning("generation claim on adventure %s not released (database away); it expires", adventure_id)
    else:
        _unreleased.discard((adventure_id, token))


def _renew(adventure_id: int, token: str) -> None:
    try:
        _update(_RENEW, [timezone.now() + HOLD, adventure_id, token])
    except DatabaseError:
        pass  # the next renewal tries again; the claim may lapse meanwhile


async def keep_claimed(*, adventure_id: int, token: str) -> None:
    """Renew the claim every RENEW_EVERY_S seconds until cancelled (run as a
    task beside the awaited model call)."""
    while True:
        await asyncio.sleep(RENEW_EVERY_S)
        await db_side_step(_renew, adventure_id, token)


@contextmanager
def held(token: str):
    """The block's tree writes are the generation's own: they pass the check."""
    reset = _HELD_BY.set(token)
    try:
        yield
    finally:
        _HELD_BY.reset(reset)


def generation_check(adventure: Adventure) -> None:
    """Raise Conflict when another generation holds ``adventure`` (a row the
    caller has locked). The generation's own writes pass."""
    if (
        adventure.generation_until is not None
        and adventure.generation_until > timezone.now()
        and adventure.generation_token != _HELD_BY.get()
    ):
        raise Conflict(BUSY, code="generating")


def held_claim() -> str:
    """The claim token this context's generation holds ("" for none): its own tree writes pass the check."""
    return _HELD_BY.get()
