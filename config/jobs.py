"""The one door for background work. A service that changes a story or a memory bank
asks here for the post-turn pass (``memory_pass_after_commit``) or an agent's
pass (``agent_pass_after_commit``); the request is sent once the transaction
commits (never for a rolled-back one), once per atomic block for the same id,
and never raises (a broker outage is logged; the sweeper catches the story up).
A job sent twice is harmless: the workers coalesce passes of one adventure.

The workers app provides the senders when it starts (``workers.apps``), so
nothing outside ``workers/`` and ``config/`` imports ``workers``."""

from __future__ import annotations

import logging
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


def memory_pass_after_commit(*, adventure_id: int) -> None:
    """Queue the adventure's post-turn memory pass after the current transaction commits."""
    _after_commit(STORY_PASS, adventure_id)


def agent_pass_after_commit(*, agent_id: int) -> None:
    """Queue the agent's background pass (embed, consolidate) after the current transaction commits."""
    _after_commit(AGENT_PASS, agent_id)


def import_after_commit(*, job_id: int) -> None:
    """Queue an adventure import job (stories.imports) after the current transaction commits."""
    _after_commit(IMPORT, job_id)


def _after_commit(kind: str, ident: int) -> None:
    job = (kind, int(ident))
    connection = transaction.get_connection()
    if connection.in_atomic_block:
        here = set(connection.savepoint_ids)
        # Newest first, and only this block's (their savepoints include this block's): a long
        # transaction with thousands of earlier callbacks is not scanned again on every change.
        for sids, func, *_ in reversed(connection.run_on_commit):
            if not here <= sids:
                break
            if sids == here and getattr(func, "job", None) == job:
                return  # already asked for in this atomic block (a service that makes several changes)

    def send() -> None:
        sender = _senders.get(kind)
        if sender is None:
            log.warning("no sender for %s work (the workers app is not installed); %s %s not queued", kind, kind, ident)
            return
        try:
            sender(int(ident))
        except Exception as exc:  # kombu/redis raise many types when the broker is away
            log.warning("%s pass for %s not queued (%s); the sweeper will catch up", kind, ident,
                        exc.__class__.__name__)

    send.job = job
    if not connection.in_atomic_block:
        send()  # no transaction is open (nor, maybe, a connection: an outage), so nothing to wait for
        return
    transaction.on_commit(send)
