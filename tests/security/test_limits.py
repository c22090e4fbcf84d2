"""Resource limits: bodies over the limit get 413 through the real server
(with and without Content-Length), every documented size limit is the one the
code enforces and gets a 400 naming the field with nothing stored, and every
list endpoint pages with a bounded ``limit``."""

import http.client
import importlib
import json
import re
import socket
from pathlib import Path

import pytest
from drf_spectacular.generators import SchemaGenerator

from memory.models import AgentMemory, Memory
from stories.models import Action, StoryCard
from tests.support.processes import Site

README = Path(__file__).resolve().parents[2] / "docs" / "security.md"
BODY_LIMIT = 4096


# ---------------------------------------------------------------------------- the real server


@pytest.fixture(scope="module")
def site(django_db_setup, tmp_path_factory):
    """The production web server (config.web_server, as runsite starts it) on the test database, one
    for the module's tests."""
    server = Site(
        tmp_path_factory.mktemp("site"),
        REQUEST_BODY_MAX_BYTES=str(BODY_LIMIT),
        REQUEST_BODY_TIMEOUT="2",
        REQUEST_HEADER_TIMEOUT="2",
    )
    yield server.port
    server.stop()


def post(port, path, body: bytes, *, chunked: bool):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    if chunked:
        pieces = (body[i : i + 1000] for i in range(0, len(body), 1000))
        conn.request("POST", path, body=pieces, headers={"Content-Type": "application/json"}, encode_chunked=True)
    else:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    return response.status, response.read()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_over_the_limit_is_413_through_the_real_server(site, django_user_model, chunked):
    big = json.dumps({"username": "dora", "password": "x" * (BODY_LIMIT + 10)}).encode()
    status, body = post(site, "/api/auth/signup/", big, chunked=chunked)
    assert status == 413
    assert json.loads(body) == {"detail": f"the request body is over the limit of {BODY_LIMIT} bytes"}
    assert not django_user_model.objects.filter(username="dora").exists()
    # Under the limit the same way of sending is read in full (not taken for an empty body).
    status, body = post(
        site,
        "/api/auth/signup/",
        json.dumps({"username": "dora", "password": "a long passphrase 42"}).encode(),
        chunked=chunked,
    )
    assert status == 201, body
    assert django_user_model.objects.filter(username="dora").exists()


@pytest.mark.django_db(transaction=True)
def test_slow_clients_hold_only_their_own_connection_and_a_body_that_never_ends_is_408(site, django_user_model):
    """40 clients that send half their headers and 40 that send half a body
    (more than the old server had threads) do not keep anyone else waiting; a
    body still unfinished REQUEST_BODY_TIMEOUT seconds after its headers is a 408."""
    slow = []
    try:
        for i in range(40):
            half_headers = socket.create_connection(("127.0.0.1", site), timeout=10)
            half_headers.sendall(b"GET /healthz/live HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            half_body = socket.create_connection(("127.0.0.1", site), timeout=10)
            half_body.sendall(
                b"POST /api/auth/signup/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"username": '
            )
            slow += [half_headers, half_body]
        for i in range(5):
            signup = {"username": f"eve{i}", "password": "a long passphrase 42"}
            status, _ = post(site, "/api/auth/signup/", json.dumps(signup).encode(), chunked=False)
            assert status == 201, "other requests are answered while the slow clients wait"
        answer = b""
        while chunk := slow[1].recv(4096):  # the first half body: refused once its time is up
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert b"did not arrive within 2 seconds" in answer
        answer = b""
        while chunk := slow[0].recv(4096):  # the first half headers: refused and closed once their time is up
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert b"headers did not arrive within 2 seconds" in answer and b"nosniff" in answer
    finally:
        for sock in slow:
            sock.close()
    assert django_user_model.objects.filter(username__startswith="eve").count() == 5


def read_all(sock) -> bytes:
    answer = b""
    while chunk := sock.recv(4096):
        answer += chunk
    return answer


@pytest.mark.django_db(transaction=True)
def test_headers_that_trickle_are_cut_off_on_the_first_request_and_on_a_kept_alive_one(site):
    """A byte every half second keeps a connection busy forever unless the headers have a
    deadline of their own (REQUEST_HEADER_TIMEOUT, 2 s here): each is answered 408 and closed,
    while a client that sends its headers at once on the same kind of connection is served."""
    import time

    def trickle(sock, data: bytes, gap: float = 0.4):
        try:
            for byte in data:
                sock.sendall(bytes([byte]))
                time.sleep(gap)
        except OSError:
            pass  # the server closed the connection: what is asserted below

    first = socket.create_connection(("127.0.0.1", site), timeout=15)
    started = time.monotonic()
    trickle(first, b"GET /healthz/live HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Trickle: abcdefghijklmn\r\n\r\n")
    answer = read_all(first)
    assert answer.startswith(b"HTTP/1.1 408") and b"headers did not arrive within 2 seconds" in answer, answer
    assert time.monotonic() - started < 10, "cut off near its deadline, not when the client finished"
    first.close()

    kept = socket.create_connection(("127.0.0.1", site), timeout=15)
    kept.sendall(b"GET /healthz/live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    response = b""
    while b'{"status": "ok"}' not in response:  # the whole first answer (headers and body may come apart)
        chunk = kept.recv(4096)
        assert chunk, response
        response += chunk
    assert response.startswith(b"HTTP/1.1 200"), response
    trickle(kept, b"GET /healthz/live HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Trickle: abcdefghijklmn\r\n\r\n")
    answer = read_all(kept)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    kept.close()

    prompt = socket.create_connection(("127.0.0.1", site), timeout=15)
    prompt.sendall(b"GET /healthz/live HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    assert read_all(prompt).startswith(b"HTTP/1.1 200")
    prompt.close()


# ---------------------------------------------------------------------------- documented limits


def documented_limits():
    """(what, number, python name) rows of the security doc's limits table."""
    text = README.read_text()
    table = text.split("<!-- limits -->")[1]
    rows = []
    for line in table.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        number = int(re.match(r"[\d,]+", cells[1]).group(0).replace(",", ""))
        rows.append((cells[0], number, cells[2].strip("`")))
    return rows


def test_the_readme_documents_the_limits_the_code_enforces():
    rows = documented_limits()
    assert len(rows) >= 14
    for what, number, name in rows:
        module, _, attr = name.rpartition(".")
        assert getattr(importlib.import_module(module), attr) == number, f"docs/security.md says {what} is {number}"


def stored():
    return (Action.objects.count(), StoryCard.objects.count(), Memory.objects.count(), AgentMemory.objects.count())


@pytest.mark.django_db
def test_every_size_limit_answers_400_naming_the_field_and_stores_nothing(alices_world, alice_plays):
    from memory.agents import agent_events, agent_recall
    from stories import models

    aid, wid = alices_world["adventure_id"], alices_world["world_id"]
    event = {"type": "say", "actor": "ann", "text": "hi"}
    over = [
        ("post", f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "x" * (models.ACTION_TEXT_MAX + 1)}, "text"),
        (
            "post",
            f"/api/adventures/{aid}/cards/",
            {"name": "C", "keys": ["c"], "entry": "x" * (models.CARD_ENTRY_MAX + 1)},
            "entry",
        ),
        (
            "post",
            f"/api/adventures/{aid}/cards/",
            {"name": "C", "keys": [f"k{i}" for i in range(models.CARD_KEYS_MAX + 1)], "entry": "e"},
            "keys",
        ),
        ("post", f"/api/adventures/{aid}/memories/", {"text": "x" * 1001}, "text"),
        ("post", f"/api/worlds/{wid}/events/", {**event, "text": "x" * (agent_events.EVENT_TEXT_MAX + 1)}, "text"),
        (
            "post",
            f"/api/worlds/{wid}/events/",
            {**event, "nearby": [f"a{i}" for i in range(agent_events.NEARBY_MAX + 1)]},
            "nearby",
        ),
        ("post", f"/api/worlds/{wid}/events/", {"events": [event] * (agent_events.BATCH_MAX + 1)}, "events"),
        ("post", f"/api/worlds/{wid}/agents/ann/recall/", {"limit": agent_recall.RECALL_LIMIT_MAX + 1}, "limit"),
        ("post", f"/api/worlds/{wid}/agents/ann/memories/", {"content": "x" * 1001}, "content"),
    ]
    before = stored()
    for method, url, body, field in over:
        response = getattr(alice_plays, method)(url, body, format="json")
        assert response.status_code == 400, f"{url} {field}: {response.status_code}"
        assert field in json.dumps(response.json()), f"{url}: the error must name {field}: {response.json()}"
    assert stored() == before


# Lists bounded by construction, each by a limit in the security doc's table.
BOUNDED_LISTS = {
    "/api/debug/requests/": "the last 30 provider calls",
    "/api/adventures/{adventure_id}/cards/export/": "at most 500 cards",
    "/api/adventures/{adventure_id}/memories/{memory_id}/source/": "the 6 actions of one memory's block",
    "/api/adventures/{adventure_id}/cast/": "the protagonist and at most 500 character cards",
}


def list_operations():
    """Every GET in the OpenAPI schema whose 200 answer is a JSON array."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    for path, item in schema["paths"].items():
        op = item.get("get")
        if not op:
            continue
        content = op["responses"].get("200", {}).get("content", {}).get("application/json", {})
        if content.get("schema", {}).get("type") == "array":
            yield path, op


@pytest.mark.django_db
def test_every_list_endpoint_pages_with_a_bounded_limit(alices_world, alice_plays):
    operations = list(list_operations())
    assert len(operations) >= 9
    for path, op in operations:
        url = re.sub(r"\{(\w+)\}", lambda m: str(alices_world[m.group(1)]), path)
        params = {p["name"]: p for p in op.get("parameters", []) if p["in"] == "query"}
        if path in BOUNDED_LISTS:
            continue
        assert "limit" in params and "offset" in params, f"{path} lists rows without paging"
        maximum = int(re.search(r"1-(\d+)", params["limit"]["description"]).group(1))
        too_big = alice_plays.get(url, {"limit": maximum + 1})
        assert too_big.status_code == 400 and "limit" in too_big.json(), path
        assert alice_plays.get(url, {"limit": 0}).status_code == 400, path
        assert alice_plays.get(url, {"offset": -1}).status_code == 400, path
        first = alice_plays.get(url, {"limit": 1})
        assert first.status_code == 200 and len(first.json()) <= 1, path
        total = int(first["X-Total-Count"])
        assert total == len(alice_plays.get(url, {"limit": maximum}).json()) or total > maximum, path
        if total > 1:
            assert 'rel="next"' in first["Link"] and "offset=1" in first["Link"], path


@pytest.mark.django_db
def test_pages_walk_a_long_list_without_gaps_or_repeats(alice_api):
    ids = [alice_api.post("/api/adventures/", {"title": f"Tale {i}"}, format="json").json()["id"] for i in range(7)]
    seen, url = [], "/api/adventures/?limit=3"
    while url:
        response = alice_api.get(url)
        assert response["X-Total-Count"] == "7"
        seen += [a["id"] for a in response.json()]
        link = response.get("Link")
        url = re.search(r"<http://testserver([^>]+)>", link).group(1) if link else None
    assert sorted(seen) == sorted(ids) and len(seen) == 7


@pytest.mark.django_db
def test_the_adventures_page_shows_fifty_at_a_time(alice, client):
    from stories.adventures import story_create

    for i in range(52):
        story_create(owner_id=alice.pk, title=f"Tale number {i:02d}")
    client.force_login(alice)
    first = client.get("/play/").content.decode()
    assert first.count("Tale number") == 50 and "Page 1 of 2" in first
    second = client.get("/play/?page=2").content.decode()
    assert second.count("Tale number") == 2 and "Tale number 00" in second, "oldest last"
    assert client.get("/play/?page=junk").status_code == 200
