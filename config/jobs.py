"""The one door for background work. A service that changes a story or a memory bank
asks here for the post-turn pass (``memory_pass_after_commit``) or an agent's
pass (``agent_pass_after_commit``); the request is sent once the transaction
commits (never for a rolled-back one), once per transaction for the same id,
and never raises (a broker outage is logged; the sweeper catches the story up).
A job sent twice is harmless: the workers coalesce passes of one adventure.

The workers app provides the senders when it starts (``workers.apps``), so
nothing outside ``workers/`` and ``config/`` imports ``workers``."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable

from django.db import transaction

log = logging.getLogger(__name__)

STORY_PASS = "story"
AGENT_PASS = "agent"
IMPORT = "import"

_senders: dict[str, Callable[[int], None]] = {}


def provide(kind: str, send: Callable[[int], None]) -> None:
    """Register the function that queues ``kind`` work for an id (the workers app does, at start)."""
    _senders[kind] = send


def memory_pass_after_commit(*, adventure_id: int, grown_to: int | None = None) -> None:
    """Queue the adventure's post-turn memory pass after the current transaction commits.
    ``grown_to``: the change only grew the path to this depth (a turn's reply), and the sender may
    skip a pass its last one said growth there leaves nothing to do (memory.story.marks.quiet_at);
    any other change asked in the same transaction sends it."""
    _after_commit(STORY_PASS, adventure_id, grown_to)


def agent_pass_after_commit(*, agent_id: int) -> None:
    """Queue the agent's background pass (embed, consolidate) after the current transaction commits."""
    _after_commit(AGENT_PASS, agent_id)


def import_after_commit(*, job_id: int) -> None:
    """Queue an adventure import job (play.imports) after the current transaction commits."""
    _after_commit(IMPORT, job_id)


def _after_commit(kind: str, ident: int, grown_to: int | None = None) -> None:
    job = (kind, int(ident))
    connection = transaction.get_connection()
    if not connection.in_atomic_block:
        # no transaction is open (nor, maybe, a connection: an outage), so nothing to wait for
        _send(kind, ident, grown_to)
        return
    # Asked for once while it waits for this connection's commit. Django holds the callbacks it
    # will run; a rolled-back block drops them, so a weak reference that died (or a callback that
    # has run) means the job is no longer waiting and is asked for again.
    waiting = _waiting.setdefault(connection, {})
    queued = waiting.get(job)
    queued = queued() if queued is not None else None
    if queued is not None and not queued.ran:
        # already asked for in this transaction (a service that makes several changes): it may be
        # skipped only if every change asked in it only grew the path
        queued.grown_to = None if grown_to is None or queued.grown_to is None else max(queued.grown_to, grown_to)
        return

    send = _Send(job, grown_to)
    waiting[job] = weakref.ref(send)
    transaction.on_commit(send, robust=True)


class _Send:
    """A job waiting for its commit (a plain object: a closure that named itself would live on in
    a reference cycle after Django dropped it, and a rolled-back job would look still waiting)."""

    def __init__(self, job: tuple[str, int], grown_to: int | None = None):
        self.job, self.grown_to, self.ran = job, grown_to, False

    def __call__(self) -> None:
        self.ran = True
        _send(*self.job, self.grown_to)


# connection -> job -> the callback waiting for its commit (weakly: Django owns the callbacks)
_waiting: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _send(kind: str, ident: int, grown_to: int | None = None) -> None:
    sender = _senders.get(kind)
    if sender is None:
        log.warning("no sender for %s work (the workers app is not installed); %s %s not queued", kind, kind, ident)
        return
    try:
        sender(int(ident)) if grown_to is None else sender(int(ident), grown_to=grown_to)
    except Exception as exc:  # kombu/redis raise many types when the broker is away
        log.warning("%s pass for %s not queued (%s); the sweeper will catch up", kind, ident, exc.__class__.__name__)
