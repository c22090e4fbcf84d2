"""A worker's database connection lives across its tasks, as a web request's does under
CONN_MAX_AGE. Celery's Django fixup closes it before and after every task unless
CELERY_DB_REUSE_MAX says otherwise: a new Postgres connection for every post-turn job, ~10% of
a worker's CPU and a backend started on the database each time (the evening bench's profile).
With CELERY_DB_REUSE_MAX set the fixup closes it once in that many tasks; between, every task
starts and ends as Django starts and ends a request: a connection past CONN_MAX_AGE, or one an
error may have broken, is closed (and CONN_HEALTH_CHECKS tries it before it serves again).

A worker runs niced (`make run`: background work yields the cores to the turns); the Postgres backend
serving it does not. Niced backends were tried (2026-12-07) and dropped: a backend holds locks other
backends wait on (Postgres's own lightweight locks and spinlocks, rows), and at nice 10 on saturated
cores it can hold them far longer (priority inversion); the together bench read no gain (16.7 turns/s and 133.7 ms of CPU a turn
niced, 17.7 and 123.8 not, one run each on the same machine)."""

from __future__ import annotations

from celery.signals import task_postrun, task_prerun
from django.db import connections


def _as_a_request_does(sender=None, task=None, **kwargs) -> None:
    task = task or sender
    if getattr(getattr(task, "request", None), "is_eager", False):
        return  # run in the caller's own transaction: its connection is the caller's
    for conn in connections.all(initialized_only=True):
        conn.close_if_unusable_or_obsolete()


def connect() -> None:
    task_prerun.connect(_as_a_request_does, weak=False, dispatch_uid="workers.connections.prerun")
    task_postrun.connect(_as_a_request_does, weak=False, dispatch_uid="workers.connections.postrun")
