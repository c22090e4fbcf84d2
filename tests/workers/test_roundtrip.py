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
