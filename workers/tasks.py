"""Celery tasks: doorways that take ids and call one function; no logic here
beyond the lock that keeps one pass per adventure at a time."""

from __future__ import annotations

import logging

from celery import shared_task
from django.db import transaction

from config.health import database_status
from memory import bank
from workers.locks import adventure_lock

log = logging.getLogger(__name__)


@shared_task(name="workers.health_probe", bind=True)
def health_probe(self) -> dict:
    """Answer from a worker with its name and what it sees of the database."""
    return {"worker": self.request.hostname, "database": database_status()}


@shared_task(name="workers.post_turn", acks_late=True)
def post_turn(adventure_id: int) -> str:
    """Run the memory pass of one adventure under its lock. A job that finds the
    lock held asks the holder to run again (coalescing) and returns at once."""
    lock = adventure_lock(adventure_id)
    if not lock.acquire():
        lock.request_rerun()
        if not lock.acquire():  # the holder may have finished just now
            return "coalesced"
    try:
        while True:
            lock.take_rerun()
            bank.run(adventure_id)
            if not lock.take_rerun():
                break
    finally:
        lock.release()
    # A job that arrived between the last check and the release set the flag
    # and then found the lock still held: run its pass as a new job.
    if lock.take_rerun():
        post_turn.apply_async(args=[adventure_id])
    return "done"


def enqueue_post_turn(adventure_id: int) -> None:
    """Queue the memory pass once the current transaction commits. Never raises:
    a broker outage is logged and the sweeper catches the adventure up later."""

    def send():
        try:
            post_turn.apply_async(args=[adventure_id], retry=False)
        except Exception as exc:  # kombu/redis raise many types when the broker is away
            log.warning("post-turn job for adventure %s not queued (%s); the sweeper will catch up",
                        adventure_id, exc.__class__.__name__)

    transaction.on_commit(send)
