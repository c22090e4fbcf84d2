"""A worker's database connection lives across its tasks, as a web request's does under
CONN_MAX_AGE. Celery's Django fixup closes it before and after every task unless
CELERY_DB_REUSE_MAX says otherwise: a new Postgres connection for every post-turn job, ~10% of
a worker's CPU and a backend started on the database each time (the evening bench's profile).
With CELERY_DB_REUSE_MAX set the fixup closes it once in that many tasks; between, every task
starts and ends as Django starts and ends a request: a connection past CONN_MAX_AGE, or one an
error may have broken, is closed (and CONN_HEALTH_CHECKS tries it before it serves again).

A worker runs niced (`make run`: background work yields the cores to the turns); so does the
Postgres backend serving it, when Postgres runs on this machine: a niced worker's queries at nice 0
competed with the turns' own on a busy machine."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from celery.signals import task_postrun, task_prerun
from django.db import DatabaseError, connections
from django.db.backends.signals import connection_created

log = logging.getLogger(__name__)


def _as_a_request_does(sender=None, task=None, **kwargs) -> None:
    task = task or sender
    if getattr(getattr(task, "request", None), "is_eager", False):
        return  # run in the caller's own transaction: its connection is the caller's
    for conn in connections.all(initialized_only=True):
        conn.close_if_unusable_or_obsolete()


def _backend_as_nice(sender, connection, **kwargs) -> None:
    """A new connection of a niced process: its backend, when it is a Postgres process on this machine
    (its title names the connection's user and database), niced as much. Else nothing: Postgres
    elsewhere, or no right to."""
    level = os.getpriority(os.PRIO_PROCESS, 0)
    if level <= 0 or connection.vendor != "postgresql":
        return
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid(), current_user, current_database()")
            pid, user, database = cursor.fetchone()
        title = Path(f"/proc/{pid}/cmdline").read_bytes()
        if not title.startswith(f"postgres: {user} {database} ".encode()):
            return  # not this connection's backend (Postgres is elsewhere)
        if os.getpriority(os.PRIO_PROCESS, pid) < level:
            os.setpriority(os.PRIO_PROCESS, pid, level)
    except (OSError, DatabaseError) as exc:
        log.debug("the database backend keeps its priority: %s", exc)


def connect() -> None:
    connection_created.connect(_backend_as_nice, weak=False, dispatch_uid="workers.connections.nice")
    task_prerun.connect(_as_a_request_does, weak=False, dispatch_uid="workers.connections.prerun")
    task_postrun.connect(_as_a_request_does, weak=False, dispatch_uid="workers.connections.postrun")
