"""A database that stops answering (every Postgres process stopped with SIGSTOP: a frozen host, a
network that drops packets) is a 503 with Retry-After within seconds on every kind of route of the
real server, never a request that hangs; when it answers again play resumes by itself."""

import http.client
import json
import threading
import time

import psutil
import pytest

from config import embedded
from tests.support.processes import Site, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.alone]

DEADLINE_S = 3  # DB_QUERY_TIMEOUT for the site under test


def request(site, method, path, token, body=None):
    """(status, headers, body, seconds) of one request; a client timeout far past the deadline."""
    conn = http.client.HTTPConnection("127.0.0.1", site.port, timeout=40)
    started = time.monotonic()
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    response = conn.getresponse()
    data = response.read()
    return response.status, dict(response.getheaders()), data, time.monotonic() - started


@pytest.fixture
def frozen_postgres(settings):
    """Stop (SIGSTOP) and continue every process of the session's embedded Postgres; always continued."""
    pid = embedded.postgres_pid(settings.DATA_DIR)
    if pid is None:
        pytest.skip("needs the embedded Postgres (DATABASE_URL names another server)")
    stopped: list[psutil.Process] = []

    class Control:
        def freeze(self):
            postmaster = psutil.Process(pid)
            for proc in [postmaster, *postmaster.children(recursive=True)]:
                proc.suspend()
                stopped.append(proc)

        def thaw(self):
            for proc in stopped:
                try:
                    proc.resume()
                except psutil.NoSuchProcess:
                    pass
            stopped.clear()

    control = Control()
    try:
        yield control
    finally:
        control.thaw()


def test_a_frozen_database_is_a_503_within_seconds_on_every_route_and_play_resumes(
    tmp_path, alice, alice_plays, fake_llm, frozen_postgres
):
    from stories.accounts.auth import api_token_for

    token = api_token_for(alice)
    aid = alice_plays.post("/api/adventures/", {"title": "Ice", "opening": "The lake is still."}, format="json").json()[
        "id"
    ]
    site = Site(tmp_path / "site", DB_QUERY_TIMEOUT=str(DEADLINE_S))
    try:
        routes = [
            ("GET", "/api/adventures/", None),
            ("GET", f"/api/adventures/{aid}/", None),
            ("POST", f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "step onto the ice"}),
            ("GET", f"/api/adventures/{aid}/memories/", None),
            ("GET", "/api/settings/", None),
        ]
        for method, path, body in routes[:2]:  # the site is warm: its pool holds open connections
            assert request(site, method, path, token)[0] == 200

        frozen_postgres.freeze()
        answers: dict = {}

        def one(route):
            answers[route[1]] = request(site, route[0], route[1], token, route[2])

        threads = [threading.Thread(target=one, args=(route,)) for route in routes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(answers) == len(routes), f"only {sorted(answers)} answered within a minute"
        for path, (status, headers, data, seconds) in answers.items():
            assert status == 503, (path, status, data[:300])
            assert int(headers["Retry-After"]) > 0 and json.loads(data)["error"] == "unavailable", path
            assert seconds < DEADLINE_S + 5, f"{path} answered after {seconds:.1f} s: it waited on the frozen server"
        health = request(site, "GET", "/healthz", token)
        assert health[0] == 503 and health[3] < DEADLINE_S + 5, health[:3]

        frozen_postgres.thaw()
        wait_for(
            lambda: request(site, "GET", "/api/adventures/", token)[0] == 200,
            timeout=30,
            what="the site to answer again once the database does",
        )
        status, _, data, _ = request(
            site, "POST", f"/api/adventures/{aid}/turns/", token, {"mode": "do", "text": "step onto the ice"}
        )
        assert status == 201, data[:300]
        texts = [a["text"] for a in json.loads(data)["actions"]]
        assert "step onto the ice" in texts
    finally:
        frozen_postgres.thaw()
        site.stop()
