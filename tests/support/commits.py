"""A test's transaction never commits, so the jobs its earlier requests asked for stay waiting for
that commit (config.jobs asks once per job while it waits). ``as_if_committed`` drops them, as a
commit would have run them: a later request's ask is then seen on its own."""

from django.db import connection


def as_if_committed() -> None:
    connection.run_on_commit.clear()
