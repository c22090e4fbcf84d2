import pytest

from tests.support.processes import RedisServer, Worker, wait_for


@pytest.fixture
def lone_redis(tmp_path, settings):
    """A Redis of this test's own, so stopping it harms no other test."""
    server = RedisServer(tmp_path / "redis")
    settings.REDIS_URL = server.url
    yield server
    server.stop()


@pytest.mark.django_db
@pytest.mark.slow
def test_healthz_is_ok_with_everything_up_then_503_naming_redis_when_it_stops(client, lone_redis):
    worker = Worker(redis_url=lone_redis.url).wait_ready()
    try:
        ok = client.get("/healthz")
        assert ok.status_code == 200, ok.json()
        body = ok.json()
        assert body["status"] == "ok"
        assert body["database"]["ok"] and body["database"]["pgvector"].startswith("0.")
        assert body["worker"]["workers"] >= 1
        assert body["down"] == []

        lone_redis.stop()
        down = client.get("/healthz")
        assert down.status_code == 503
        body = down.json()
        assert body["redis"]["ok"] is False
        assert any(reason.startswith("redis: unreachable") for reason in body["down"])
        assert body["database"]["ok"] is True, "the database is still up and must say so"
    finally:
        worker.stop()


@pytest.mark.django_db
def test_healthz_is_503_naming_the_worker_when_none_runs(client, lone_redis):
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["redis"]["ok"] is True
    assert [r for r in body["down"] if r.startswith("worker: no worker heartbeat")]


def test_liveness_answers_without_touching_services(client):
    assert client.get("/healthz/live").json() == {"status": "ok"}


@pytest.mark.django_db
@pytest.mark.slow
def test_worker_heartbeat_disappears_when_the_worker_stops(lone_redis):
    import redis

    from workers.heartbeat import HEARTBEAT_PREFIX

    worker = Worker(redis_url=lone_redis.url).wait_ready()
    worker.stop()
    client = redis.Redis.from_url(lone_redis.url)
    wait_for(lambda: not client.exists(HEARTBEAT_PREFIX + worker.hostname), timeout=10, what="heartbeat cleared")
