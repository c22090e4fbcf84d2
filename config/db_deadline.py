"""A database that stops answering is a 503 within seconds, not a request that hangs.

A server that is down refuses connections (a 503 at once), and a new connection to a server that
does not answer gives up after ``connect_timeout``. But a server that stops answering on a
connection already open (a frozen host, a network that drops packets, a stopped process) leaves a
query waiting as long as the operating system keeps the socket: minutes. The server's own
``statement_timeout`` cannot help, since the server is what stopped; libpq's ``tcp_user_timeout``
and keepalives (set below) close a connection whose packets are dropped, but cannot see a frozen
server: its kernel acknowledges the bytes for it (and a local socket has neither).

So in the web processes every round trip to the server (a query, a commit, a rollback) has a
deadline on the client's side, DB_QUERY_TIMEOUT seconds: past it the connection is closed (it is
in an unknown state), the pool drops it, and the request answers 503 with Retry-After like any
other database outage; the next request opens a new connection and play resumes when the server
does. The server cancels a query of its own a second earlier (``statement_timeout``), so a query
that is merely slow ends cleanly and keeps its connection.
"""

from __future__ import annotations

import logging

import psycopg
from psycopg import errors

log = logging.getLogger(__name__)


class DeadlineConnection(psycopg.Connection):
    """psycopg's connection whose every wait on the server ends after ``deadline_s`` (0: never)."""

    deadline_s: float = 0

    def wait(self, gen, interval: float = 0.1, timeout: float | None = None):
        if timeout is not None or not self.deadline_s:
            return super().wait(gen, interval=interval, timeout=timeout)
        try:
            return super().wait(gen, interval=interval, timeout=self.deadline_s)
        except errors._WaitTimeout:
            log.warning("the database did not answer within %s s; connection closed", self.deadline_s)
            self.pgconn.finish()  # its state is unknown: the pool must not hand it out again
            raise psycopg.OperationalError(f"the database did not answer within {self.deadline_s:g} seconds") from None


def pooled_options(options: dict, *, deadline_s: int) -> None:
    """Give a pooled database's OPTIONS the deadline: the connection class for the pool, and the
    server's statement_timeout a second under it (kept if the URL sets its own ``options``)."""
    if not deadline_s:
        return
    DeadlineConnection.deadline_s = float(deadline_s)
    options["pool"]["connection_class"] = DeadlineConnection
    # a network that drops packets: libpq closes the connection once sent bytes stay unacknowledged
    options.setdefault("tcp_user_timeout", deadline_s * 1000)
    options.setdefault("keepalives", 1)
    options.setdefault("keepalives_idle", 30)
    options.setdefault("keepalives_interval", 5)
    options.setdefault("keepalives_count", 3)
    server_ms = max(500, deadline_s * 1000 - 1000)
    existing = options.get("options", "")
    if "statement_timeout" not in existing:
        options["options"] = f"{existing} -c statement_timeout={server_ms}".strip()
