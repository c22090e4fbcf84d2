import pytest

from tests.support.processes import Worker
from workers.tasks import health_probe


@pytest.mark.django_db
@pytest.mark.slow
def test_task_round_trips_through_redis_to_a_real_worker_process_and_back():
    worker = Worker().wait_ready()
    try:
        result = health_probe.apply_async().get(timeout=60)
    finally:
        worker.stop()
    assert result["worker"] == worker.hostname, "answered by the worker process, not in-process"
    assert result["database"]["ok"] is True
    assert result["database"]["pgvector"].startswith("0.")


@pytest.mark.django_db
@pytest.mark.slow
def test_a_worker_keeps_its_database_connection_from_one_job_to_the_next():
    """A new Postgres connection for every job cost a worker ~10% of its CPU and the database a
    backend's start (workers.connections): the same connection serves job after job, and one the
    database dropped meanwhile is replaced before a job uses it."""
    from django.db import connection

    def workers_connections():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")  # this transaction's view of the activity, renewed
            cursor.execute(
                "SELECT pid, backend_start FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            )
            return set(cursor.fetchall())

    worker = Worker().wait_ready()
    try:
        assert health_probe.apply_async().get(timeout=60)["database"]["ok"] is True
        first = workers_connections()
        for _ in range(10):
            assert health_probe.apply_async().get(timeout=60)["database"]["ok"] is True
        after = workers_connections()
        # a connection the database dropped (a restart, a failover) is tried before the next job uses it
        with connection.cursor() as cursor:
            for pid, _ in after:
                cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        again = health_probe.apply_async().get(timeout=60)
    finally:
        worker.stop()
    assert first, "the worker's connection, open after its first job"
    assert after == first, "the same connections, not one a job"
    assert again["database"]["ok"] is True, again
