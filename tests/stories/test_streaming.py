"""Turns stream the reply as the model writes it (server-sent events), end
with exactly the JSON answer a plain request gets, and a player who stops a
reply keeps what was written. On the real server (uvicorn, as `make run`
serves the site) a turn waiting on its model holds no database connection and
no thread, and a client that leaves cancels the model call."""

import http.client
import json
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
from django.db import connection
from hypothesis import given, settings
from hypothesis import strategies as st

from stories.models import Action, Adventure, ProviderCall
from tests.support.events import parse_events, streamed
from tests.support.examples import examples
from tests.support.fake_llm import Reply
from tests.support.processes import Site, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

EVENTS = {"HTTP_ACCEPT": "text/event-stream"}


def _adventure(api, opening="The gate stands open."):
    response = api.post("/api/adventures/", {"title": "Gate", "opening": opening}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def test_a_streamed_turn_sends_the_reply_piece_by_piece_then_the_same_answer_as_json(alice_plays, fake_llm):
    api = alice_plays
    aid = _adventure(api)
    fake_llm.reply = lambda body, n: "The wind carries a song over the hill."
    fake_llm.stream_delay = 0.05  # each word its own network read (pieces that share a read share an event)
    response = api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "listen"}, format="json", **EVENTS)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    events = parse_events(streamed(response))
    tokens = [data["text"] for name, data in events if name == "token"]
    assert 4 <= len(tokens) <= 8, "the pieces arrive as the model writes them, not all at the end"
    assert "".join(tokens) == "The wind carries a song over the hill."
    name, done = events[-1]
    assert name == "done"
    assert [a["text"] for a in done["actions"]] == ["listen", "The wind carries a song over the hill."]
    assert done["usage"]["completion_tokens"] == 8 and done["usage"]["model"] == "fake-model"
    assert set(done) == set(
        api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "sing"}, format="json").json()
    ), "the final event carries the plain 201 answer"
    assert fake_llm.chat_requests()[0].body["stream"] is True
    assert "stream" not in fake_llm.chat_requests()[-1].body, "without the Accept header the API answers as before"
    texts = list(Action.objects.filter(adventure_id=aid).order_by("depth").values_list("text", flat=True))
    assert texts[:3] == ["The gate stands open.", "listen", "The wind carries a song over the hill."]
    # retry and continue stream the same way
    for path, body in ((f"/api/adventures/{aid}/retry/", {}), (f"/api/adventures/{aid}/turns/", {"mode": "continue"})):
        events = parse_events(streamed(api.post(path, body, format="json", **EVENTS)))
        assert events[0][0] == "token" and events[-1][0] == "done", (path, events)


@pytest.mark.parametrize(
    "framing",
    [
        {"wire_slice": 100_000},  # the whole reply in one read: one event carries it
        {"wire_slice": 7, "newline": "\r\n", "terminated": False},  # cut mid-line, CRLF, no final blank line
        {"wire_slice": 1},
    ],
)
def test_however_the_model_cuts_its_stream_the_player_gets_every_word_once(alice_plays, fake_llm, framing):
    api = alice_plays
    aid = _adventure(api)
    text = "Rain — café lights blur; the ferry's horn sounds twice."
    fake_llm.queue(Reply(text=text, **framing))
    events = parse_events(
        streamed(api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "wait"}, format="json", **EVENTS))
    )
    tokens = [data["text"] for name, data in events if name == "token"]
    assert "".join(tokens) == text and events[-1][0] == "done"
    assert events[-1][1]["actions"][-1]["text"] == text
    assert events[-1][1]["usage"]["completion_tokens"] == 9, "the usage event is read wherever it was cut"
    if framing["wire_slice"] > 1000:
        assert len(tokens) == 1, "what arrives in one read goes on as one event"
    assert Action.objects.filter(adventure_id=aid).order_by("-depth").first().text == text


def test_the_event_parser_gives_every_event_once_wherever_the_bytes_are_cut():
    """The same parser as above, fed every cut of one stream: the network decides where reads end."""
    from stories.providers.awaited import _EventStream

    wire = (
        b': keep-alive\r\n\r\ndata: {"a": 1}\r\n\r\nevent: message\ndata: line one\ndata: line two\n\n'
        b"data:no-space\n\ndata: [DONE]"
    )  # the last event is left unterminated
    expected = [b'{"a": 1}', b"line one\nline two", b"no-space", b"[DONE]"]
    for cut in range(len(wire) + 1):
        for second in (cut, min(len(wire), cut + 3), min(len(wire), cut + 11)):
            parser = _EventStream()
            out = parser.feed(wire[:cut]) + parser.feed(wire[cut:second]) + parser.feed(wire[second:])
            out += parser.feed(b"\n\n")  # the end of the stream
            assert out == expected, (cut, second)


def test_a_model_error_midway_ends_the_stream_with_the_424_answer_and_keeps_the_action(alice_plays, fake_llm):
    api = alice_plays
    aid = _adventure(api)
    fake_llm.queue(Reply(text="The bridge sways under your feet.", error_after=3))
    response = api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "cross"}, format="json", **EVENTS)
    events = parse_events(streamed(response))
    names = [name for name, _ in events]
    assert names[-1] == "error" and set(names[:-1]) == {"token"}
    assert "".join(data["text"] for name, data in events[:-1]) == "The bridge sways ", (
        "what was written, then the error"
    )
    error = events[-1][1]
    assert error["status"] == 424 and error["error"] == "endpoint_error"
    assert "overloaded" in error["detail"]
    assert [a["text"] for a in error["stored_actions"]] == ["cross"], "the player's action is kept"
    assert "retry" in error["hint"]
    texts = list(Action.objects.filter(adventure_id=aid).order_by("depth").values_list("text", flat=True))
    assert texts == ["The gate stands open.", "cross"], "a failed reply stores none of its text"
    assert ProviderCall.objects.filter(outcome="endpoint_error").count() == 1, "the debug log shows the failure"
    # errors before the model writes answer as before, with their status
    fake_llm.queue(Reply(status=401))
    refused = api.post(f"/api/adventures/{aid}/retry/", {}, format="json", **EVENTS)
    events = parse_events(streamed(refused))
    assert events == [("error", {**events[0][1], "status": 424, "error": "bad_key"})]
    missing = api.post("/api/adventures/999999/turns/", {"mode": "do", "text": "x"}, format="json", **EVENTS)
    assert missing.status_code == 404 and missing.json()["detail"]


def test_a_reply_longer_than_an_action_holds_is_shown_as_far_as_it_is_kept(alice_plays, fake_llm):
    """An action holds ACTION_TEXT_MAX characters: a reply that runs past them ends there, on the page
    as in the story (the page never shows words that were not kept), streamed or not."""
    from stories.models import ACTION_TEXT_MAX

    api = alice_plays
    aid = _adventure(api)
    long = " ".join(f"word{i}" for i in range(1500))  # ~11,000 characters
    fake_llm.queue(Reply(text=long))
    events = parse_events(
        streamed(api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "go"}, format="json", **EVENTS))
    )
    shown = "".join(data["text"] for name, data in events if name == "token")
    assert events[-1][0] == "done" and len(shown) == ACTION_TEXT_MAX and long.startswith(shown)
    stored = Action.objects.filter(adventure_id=aid).order_by("-depth").first().text
    assert stored == shown.strip() and events[-1][1]["actions"][-1]["text"] == stored
    fake_llm.queue(Reply(text=long))
    whole = api.post(f"/api/adventures/{aid}/retry/", {}, format="json")
    assert whole.status_code == 201 and whole.json()["actions"][-1]["text"] == long[:ACTION_TEXT_MAX].strip()


def test_a_model_that_answers_without_end_is_read_no_further_than_the_bound_and_the_action_is_kept(
    alice_plays, fake_llm
):
    """The endpoint is the player's to choose: one that streams (or answers at once) more than an
    answer may hold (netguard.ANSWER_MAX_BYTES), or sends a compressed answer that could inflate to any
    size, gets a 424 naming it, and nothing past the bound is read or kept; the player's action stays."""
    from stories.providers import netguard

    api = alice_plays
    aid = _adventure(api)
    huge = "x" * 12_000_000  # one event of 12 MB: the bound is met before the event ends
    assert len(huge) > netguard.ANSWER_MAX_BYTES
    fake_llm.queue(Reply(text=huge))
    response = api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "listen"}, format="json", **EVENTS)
    events = parse_events(streamed(response))
    assert events[-1][0] == "error" and {name for name, _ in events[:-1]} <= {"token"}
    error = events[-1][1]
    assert error["status"] == 424 and error["error"] == "too_large" and "larger than 8 MB" in error["detail"]
    assert not events[:-1], "nothing of the event past the bound reached the player"
    assert [a["text"] for a in error["stored_actions"]] == ["listen"]
    fake_llm.queue(Reply(text=huge))  # answered at once, not streamed
    whole = api.post(f"/api/adventures/{aid}/retry/", {}, format="json")
    assert whole.status_code == 424 and whole.json()["error"] == "too_large", whole.json()
    fake_llm.queue(Reply(text="A small reply.", headers={"Content-Encoding": "gzip"}))
    packed = api.post(f"/api/adventures/{aid}/retry/", {}, format="json")
    assert packed.status_code == 424 and "compressed" in packed.json()["detail"], packed.json()
    texts = list(Action.objects.filter(adventure_id=aid).order_by("depth").values_list("text", flat=True))
    assert texts == ["The gate stands open.", "listen"], "no reply text was stored"
    assert ProviderCall.objects.filter(outcome="too_large").count() == 3, "the debug log says why"


# ---------------------------------------------------------------------------- the real server


@pytest.fixture(scope="module")
def site(django_db_setup, tmp_path_factory):
    """One server for the module's tests (each brings its own rows): starting one costs seconds of a core."""
    folder = tmp_path_factory.mktemp("site")
    server = Site(
        folder,
        DB_POOL_SIZE="3",
        # each Python thread it starts is logged, with where (test_turns_and_pages_start_no_thread_...)
        PYTHONPATH=str(Path(__file__).resolve().parents[1] / "support" / "thread_log"),
        EVERLORE_THREAD_LOG=str(folder / "threads.jsonl"),
    )
    server.thread_log = folder / "threads.jsonl"
    yield server
    server.stop()


def _token(user):
    from stories.accounts.auth import api_token_for

    return api_token_for(user)


def _stream_turn(site, token, aid, text, *, stop_after: int | None = None, timeout=60):
    """Play a streamed turn; with ``stop_after``, leave after that many token events.
    Returns the token texts received and the final event (or None)."""
    conn = http.client.HTTPConnection("127.0.0.1", site.port, timeout=timeout)
    conn.request(
        "POST",
        f"/api/adventures/{aid}/turns/",
        body=json.dumps({"mode": "do", "text": text}),
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json", "Accept": "text/event-stream"},
    )
    response = conn.getresponse()
    assert response.status == 200, response.read()
    tokens, buffer = [], b""
    while True:
        line = response.readline()
        if not line:
            return tokens, None
        buffer += line
        if line != b"\n":
            continue
        for name, data in parse_events(buffer):
            if name == "token":
                tokens.append(data["text"])
                if stop_after is not None and len(tokens) == stop_after:
                    conn.sock.shutdown(2)
                    conn.close()
                    return tokens, None
            else:
                conn.close()
                return tokens, (name, data)
        buffer = b""


def test_stopping_a_reply_cancels_the_model_call_and_keeps_exactly_the_text_streamed(
    site, alice, alice_plays, fake_llm
):
    aid = _adventure(alice_plays)
    token = _token(alice)
    fake_llm.stream_delay = 0.3
    fake_llm.reply = lambda body, n: "One two three four five six seven eight nine ten eleven twelve."
    tokens, final = _stream_turn(site, token, aid, "count", stop_after=4)
    assert final is None and tokens == ["One ", "two ", "three ", "four "]
    wait_for(lambda: fake_llm.streams_cut == 1, timeout=20, what="the model call to be cut")

    def stored():
        return list(Action.objects.filter(adventure_id=aid).order_by("depth").values_list("text", flat=True))

    wait_for(lambda: len(stored()) == 3, timeout=20, what="the stopped reply to be stored")
    assert stored() == ["The gate stands open.", "count", "One two three four"], "exactly the text streamed"
    assert ProviderCall.objects.filter(outcome="stopped").count() == 1
    # stopped before a word: the player's action stays alone; the adventure is free at once
    fake_llm.first_token_delay = 30
    conn = http.client.HTTPConnection("127.0.0.1", site.port, timeout=30)
    conn.request(
        "POST",
        f"/api/adventures/{aid}/turns/",
        body=json.dumps({"mode": "do", "text": "wait"}),
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json", "Accept": "text/event-stream"},
    )
    assert conn.getresponse().status == 200
    wait_for(lambda: fake_llm.streaming == 1, timeout=20, what="the model call to start")
    conn.sock.shutdown(2)
    conn.close()
    wait_for(lambda: len(stored()) == 4, timeout=20, what="the player's action")
    wait_for(
        lambda: Adventure.objects.filter(pk=aid, generation_token="").exists(),
        timeout=20,
        what="the adventure to be freed",
    )
    assert stored()[-1] == "wait"
    fake_llm.first_token_delay = 0
    fake_llm.stream_delay = 0
    tokens, final = _stream_turn(site, token, aid, "go on")
    assert final[0] == "done", final


def test_turns_waiting_on_the_model_hold_no_database_connection_and_no_thread(
    site, alice, alice_plays, fake_llm, django_db_blocker
):
    """12 turns wait on a slow model at once through a pool of 3 connections:
    all are answered, and while they wait the server holds no connection in
    use, and no thread per turn."""
    players = 12
    adventures = [_adventure(alice_plays, f"Room {i}.") for i in range(players)]
    token = _token(alice)
    release = threading.Event()
    fake_llm.reply = lambda body, n: (release.wait(60), "The lamp flickers.")[1]
    server = psutil.Process(site.proc.pid)
    threads_idle = server.num_threads()
    results = [None] * players

    def play(i):
        results[i] = _stream_turn(site, token, adventures[i], "look", timeout=90)

    clients = [threading.Thread(target=play, args=(i,)) for i in range(players)]
    for client in clients:
        client.start()
    try:
        wait_for(lambda: fake_llm.in_flight == players, timeout=60, what="every turn to reach the model")
        with connection.cursor() as cursor:
            cursor.execute("SELECT state FROM pg_stat_activity WHERE application_name = %s", [site.application_name])
            states = [row[0] for row in cursor.fetchall()]
        assert len(states) <= 3, f"never more connections than the pool holds: {states}"
        assert all(state == "idle" for state in states), f"no connection is in use while the model writes: {states}"
        threads_waiting = server.num_threads()
        assert threads_waiting < threads_idle + players, (threads_idle, threads_waiting)
        health = http.client.HTTPConnection("127.0.0.1", site.port, timeout=5)
        health.request("GET", "/healthz")
        answer = json.loads(health.getresponse().read())
        assert answer["database"]["ok"] is True, f"health checks the database while every turn waits: {answer}"
    finally:
        release.set()
        for client in clients:
            client.join(90)
    assert all(result is not None and result[1][0] == "done" for result in results), results
    assert Action.objects.filter(text="The lamp flickers.").count() == players


def test_the_api_schema_documents_the_event_stream_of_turns_and_retries(client):
    schema = client.get("/api/schema/?format=json").json()
    for path in ("/api/adventures/{adventure_id}/turns/", "/api/adventures/{adventure_id}/retry/"):
        answers = schema["paths"][path]["post"]["responses"]
        assert "text/event-stream" in answers["200"]["content"], path
        assert "event: done" in answers["200"]["description"] or "`event: done`" in answers["200"]["description"]
        assert "application/json" in answers["201"]["content"], "without the header: the JSON answer as before"


def _logged_ids(site) -> set[int]:
    """The native ids of the threads the server started from Python (its thread log)."""
    if not site.thread_log.exists():
        return set()
    return {json.loads(line)["tid"] for line in site.thread_log.read_text().splitlines()}


def _threads_said(site, started: set[int]) -> str:
    """What is known of the threads ``started``: each one's kernel name, and for a Python thread the
    stack that started it (the server's thread log); then the server's threads now (py-spy)."""
    logged = {}
    if site.thread_log.exists():
        for line in site.thread_log.read_text().splitlines():
            entry = json.loads(line)
            logged[entry["tid"]] = entry
    said = []
    for tid in sorted(started):
        entry = logged.get(tid)
        said.append(
            f"thread {tid} ({_comms.get(tid, '?')}): "
            + (f"{entry['name']}, started at\n{entry['stack']}" if entry else "not a Python thread's start logged")
        )
    return "\n".join(said) + "\n" + _threads_now(site)


_comms: dict[int, str] = {}  # a thread's kernel name, read when the watcher first sees it


def _threads_now(site) -> str:
    """The server's threads by name and stack (py-spy)."""
    spy = Path(sys.executable).with_name("py-spy")
    try:
        return subprocess.run(
            [spy, "dump", "--pid", str(site.proc.pid)], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(py-spy could not read them: {exc})"


def test_turns_and_pages_start_no_thread_once_the_server_is_warm(site, alice, alice_plays, fake_llm):
    """Every request's synchronous parts run on threads the server started ahead (config.async_db):
    starting a thread on a busy process holds its event loop, and with it every reply's stream,
    until the new thread gets the interpreter lock. Counted by the server's thread ids."""
    adventures = [_adventure(alice_plays, f"Room {i}.") for i in range(8)]
    token = _token(alice)
    server = psutil.Process(site.proc.pid)

    def thread_ids():
        ids = {t.id for t in server.threads()}
        for tid in ids - _comms.keys():
            try:
                _comms[tid] = Path(f"/proc/{server.pid}/task/{tid}/comm").read_text().strip()
            except OSError:
                pass
        return ids

    def round_of_play(text, at_once):
        results = [None] * at_once

        def play(i):
            results[i] = _stream_turn(site, token, adventures[i], text)

        clients = [threading.Thread(target=play, args=(i,)) for i in range(at_once)]
        for client in clients:
            client.start()
        for client in clients:
            client.join(60)
        for path in ("/api/adventures/", "/healthz/live", "/accounts/login/"):
            page = http.client.HTTPConnection("127.0.0.1", site.port, timeout=10)
            page.request("GET", path, headers={"Authorization": f"Token {token}"})
            assert page.getresponse().status == 200, path
        assert all(r is not None and r[1][0] == "done" for r in results), results

    fake_llm.stream_delay = 0.02  # each reply streams for a while: a thread a request started lives that long
    # lazily started pools (the model client's, the loop's resolver) reach the size twice as many
    # turns at once need: a busy machine's timing never asks for more than the warm-up did
    round_of_play("warm up", 8)
    warm = thread_ids()
    seen, playing = set(), threading.Event()

    def watch():  # thread ids as often as /proc gives them: a short-lived thread is seen too
        while not playing.is_set():
            seen.update(thread_ids())

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for n in range(3):
            round_of_play(f"look {n}", 4)
    finally:
        playing.set()
        watcher.join(10)
    started = seen - warm
    python = started & _logged_ids(site)
    # A native library may make a helper thread of its own now and then (one seen in about one full
    # run of ten, never a Python thread); a thread per request would be one for each of the 21 here.
    assert not python and len(started) <= 2, (
        f"{len(started)} threads were started for requests on a warm server:\n{_threads_said(site, started)}"
    )


# ---------------------------------------------------------------------------- a story played together, live
# (on the same server: a member's page follows another's turn and the reply as it is written, from one
# model call; a page that reconnects goes on after the last event it saw, with no gap and no repeat;
# a removed member's stream ends at once)


class Follower:
    """A member's page following the story: the events as they come, on a thread of its own."""

    def __init__(self, site, token, aid, *, last_event_id=None):
        self.events, self.ended = [], threading.Event()
        self.conn = http.client.HTTPConnection("127.0.0.1", site.port, timeout=30)
        headers = {"Authorization": f"Token {token}", "Accept": "text/event-stream"}
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        self.conn.request("GET", f"/api/adventures/{aid}/live/", headers=headers)
        self.response = self.conn.getresponse()
        self.status = self.response.status
        if self.status == 200:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        block = {}
        try:
            while True:
                line = self.response.readline()
                if not line:
                    break
                line = line.decode().rstrip("\n")
                if not line:
                    if "event" in block:
                        self.events.append((block.get("id"), block["event"], json.loads(block.get("data", "{}"))))
                    block = {}
                elif not line.startswith(":") and ": " in line:
                    name, value = line.split(": ", 1)
                    block[name] = value
        except (OSError, AttributeError, ValueError):  # the page closed its connection
            pass
        finally:
            self.ended.set()

    def names(self):
        return [name for _, name, _ in self.events]

    def close(self):
        """As a browser closes a page: the connection ends at once (the server sees it leave)."""
        if self.conn.sock is not None:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        self.conn.close()


def test_a_members_page_follows_the_others_turn_live_resumes_without_gaps_and_ends_when_removed(
    site, alice, alice_plays, bob, bob_api, charlie, fake_llm
):
    made = alice_plays.post(
        "/api/adventures/",
        {
            "title": "The Ford",
            "opening": "The river runs high.",
            "persona_name": "Mira",
            "cards": [{"name": "Sela", "type": "character", "keys": ["Sela"], "entry": "A scout."}],
        },
        format="json",
    ).json()
    aid = made["id"]
    sela = alice_plays.get(f"/api/adventures/{aid}/cards/").json()[0]["id"]
    link = alice_plays.post(f"/api/adventures/{aid}/invites/", {}, format="json").json()
    assert bob_api.post(f"/api/join/{link['token']}/", {"character": {"card": sela}}, format="json").status_code == 201

    page = Follower(site, _token(bob), aid)
    assert page.status == 200
    wait_for(lambda: "presence" in page.names(), timeout=20, what="bob's page to be following")

    fake_llm.reply = lambda body, n: "The water closes over your boots and the current pulls."
    fake_llm.stream_delay = 0.02
    conn = http.client.HTTPConnection("127.0.0.1", site.port, timeout=60)
    conn.request(
        "POST",
        f"/api/adventures/{aid}/turns/",
        body=json.dumps({"mode": "do", "text": "I wade in"}),
        headers={"Authorization": f"Token {_token(alice)}", "Content-Type": "application/json"},
    )
    assert conn.getresponse().status == 201
    wait_for(lambda: "done" in page.names(), timeout=30, what="the reply to reach bob's page")

    turn_id, _, began = next(e for e in page.events if e[1] == "turn")
    assert [(a["kind"], a["text"]) for a in began["actions"]] == [("do", "I wade in")]
    tokens = [data["text"] for _, name, data in page.events if name == "token"]
    assert "".join(tokens) == "The water closes over your boots and the current pulls."
    done = next(data for _, name, data in page.events if name == "done")
    assert [a["text"] for a in done["actions"]][-1] == "The water closes over your boots and the current pulls."
    assert len(fake_llm.chat_requests()) == 1, "one model call, whoever watches"
    page.close()

    # back after a dropped connection: everything after the last event seen, once
    seen = [e for e in page.events if e[0]]
    after_turn = [e[0] for e in seen[seen.index(next(e for e in seen if e[0] == turn_id)) + 1 :]]
    again = Follower(site, _token(bob), aid, last_event_id=turn_id)
    wait_for(lambda: len([e for e in again.events if e[0]]) >= len(after_turn), timeout=20, what="the replay")
    replayed = [e[0] for e in again.events if e[0]][: len(after_turn)]
    assert replayed == after_turn, "no gap and no repeat"
    assert "turn" not in [name for event_id, name, _ in again.events if event_id == turn_id]

    # removed: the stream says so and ends at once
    assert alice_plays.delete(f"/api/adventures/{aid}/members/{bob.pk}/").status_code == 204
    assert again.ended.wait(10), "the removed member's stream ended"
    assert again.names()[-1] == "gone"

    outsider = Follower(site, _token(charlie), aid)
    assert outsider.status == 404
    outsider.close()

    # a moderator suspends a member: the stream ends (asked again at once, not at its next look)
    from stories import moderation
    from tests.conftest import api_client_for

    watch = alice_plays.post(f"/api/adventures/{aid}/invites/", {"role": "watcher"}, format="json").json()
    assert api_client_for(charlie).post(f"/api/join/{watch['token']}/", {}, format="json").status_code == 201
    watcher = Follower(site, _token(charlie), aid)
    wait_for(lambda: "presence" in watcher.names(), timeout=20, what="carol's page to be following")

    # a secret's turn, its reply's pieces and its end never reach a page it was not told to
    from tests.support.fake_llm import Reply

    fake_llm.queue(Reply(text="The ring hums with a cold light."))
    for body in ({"mode": "do", "text": "I pocket the silver ring", "private": True}, {"mode": "do", "text": "I wait"}):
        conn = http.client.HTTPConnection("127.0.0.1", site.port, timeout=60)
        headers = {"Authorization": f"Token {_token(alice)}", "Content-Type": "application/json"}
        conn.request("POST", f"/api/adventures/{aid}/turns/", body=json.dumps(body), headers=headers)
        assert conn.getresponse().status == 201
    wait_for(lambda: "done" in watcher.names(), timeout=30, what="the shared turn to reach carol's page")
    assert [a["text"] for _, name, d in watcher.events if name == "turn" for a in d["actions"]] == ["I wait"]
    assert not any("ring" in json.dumps(d) for _, _, d in watcher.events)
    assert "secret" in watcher.names()  # told a turn was played, and nothing of it
    moderation.user_suspend(user_id=charlie.pk)
    assert watcher.ended.wait(4), "the suspended member's stream ended"
    assert watcher.names()[-1] == "gone"


def _shared_story(alice_plays, bob_api, *, title="The Pass", opening="Snow on the pass.", card="Sela"):
    """alice's story with bob a player in it (playing ``card``); its id."""
    made = alice_plays.post(
        "/api/adventures/",
        {
            "title": title,
            "opening": opening,
            "cards": [{"name": card, "type": "character", "keys": [card], "entry": "A scout."}],
        },
        format="json",
    ).json()
    sela = alice_plays.get(f"/api/adventures/{made['id']}/cards/").json()[0]["id"]
    link = alice_plays.post(f"/api/adventures/{made['id']}/invites/", {}, format="json").json()
    joined = bob_api.post(f"/api/join/{link['token']}/", {"character": {"card": sela}}, format="json")
    assert joined.status_code == 201
    return made["id"]


def test_replies_written_at_once_in_two_stories_reach_each_page_whole_in_order_and_a_secret_nowhere_else(
    site, alice, alice_plays, bob, bob_api, fake_llm
):
    """The process sends every reply's pieces held at its tick in one round trip: each story's page
    still gets its own reply's pieces, all of them, in order, and a secret reply's pieces go to no page
    it was not told to, whatever they shared a round trip with."""
    river = "The water closes over your boots and the current pulls at you as the far bank nears"
    ring = "The silver ring hums with a cold light that only you can see in the dark of your pocket"
    pass_ = "Snow falls thicker on the pass and the wind carries voices from somewhere above the ridge"

    def reply(body, n):  # by the action the prompt ends on (the owner's own prompt holds her secret too)
        told = json.dumps(body)
        if "river runs" in told:
            return river
        return ring if told.rfind("pocket the silver") > told.rfind("climb") else pass_  # "I" is told as "you"

    fake_llm.reply = reply
    fake_llm.stream_delay = 0.08  # ~1.4 s a reply: pieces held over several ticks, both replies at once
    first = _shared_story(alice_plays, bob_api)
    second = _shared_story(alice_plays, bob_api, title="The Ford", opening="The river runs high.", card="Oric")
    pages = {aid: Follower(site, _token(bob), aid) for aid in (first, second)}
    for page in pages.values():
        assert page.status == 200
        wait_for(lambda page=page: "presence" in page.names(), timeout=20, what="bob's pages to be following")

    def played(story, text, private=False):
        conn = http.client.HTTPConnection("127.0.0.1", site.port, timeout=60)
        headers = {
            "Authorization": f"Token {_token(alice)}",
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
        }
        conn.request(
            "POST",
            f"/api/adventures/{story}/turns/",
            body=json.dumps({"mode": "do", "text": text, "private": private}),
            headers=headers,
        )
        answer = conn.getresponse()  # streamed: the model streams its pieces
        return [name for name, _ in parse_events(answer.read())][-1] if answer.status == 200 else answer.status

    with ThreadPoolExecutor(3) as pool:
        turns = [
            pool.submit(played, first, "I climb"),
            pool.submit(played, second, "I wade in"),
            pool.submit(played, first, "I pocket the silver ring", True),  # waits its place in line,
        ]
        assert [t.result() for t in turns] == ["done", "done", "done"]
    wait_for(lambda: pages[second].names().count("done") == 1, timeout=30, what="the river's reply")
    wait_for(lambda: pages[first].names().count("done") == 1, timeout=30, what="the pass's reply")

    def told(aid):
        return "".join(d["text"] for _, name, d in pages[aid].events if name == "token")

    assert told(second) == river, "the river's page: its reply whole and in order"
    assert told(first) == pass_, "the pass's page: its shared reply, none of the secret's pieces"
    assert sum(name == "token" for _, name, _ in pages[second].events) >= 2, "pieces sent at ticks too"
    assert not any(
        "silver" in json.dumps(d) or "cold light" in json.dumps(d) for p in pages.values() for _, _, d in p.events
    )
    ids = [int(e[0].split("-")[0]) * 10**6 + int(e[0].split("-")[1]) for e in pages[second].events if e[0]]
    assert ids == sorted(ids)
    for page in pages.values():
        page.close()


def test_a_removed_members_page_gets_nothing_written_after_the_removal_even_in_the_same_read(
    site, alice, alice_plays, bob, bob_api
):
    """The removal's event and the next turn's reach the server's one reader of the streams together:
    the page is asked again before anything after the removal is written to it."""
    import redis as redis_lib
    from django.conf import settings

    from play import live
    from stories.models import Membership

    aid = _shared_story(alice_plays, bob_api)
    page = Follower(site, _token(bob), aid)
    assert page.status == 200
    wait_for(lambda: "presence" in page.names(), timeout=20, what="bob's page to be following")

    Membership.objects.filter(adventure_id=aid, user_id=bob.pk).delete()  # removed; its event comes below
    # both in one MULTI: the reader is woken once both are in, and takes them in one read
    with redis_lib.Redis.from_url(settings.REDIS_URL).pipeline(transaction=True) as pipe:
        pipe.xadd(live._key(aid), {"e": "members", "d": json.dumps({"removed": bob.pk})})
        secret = {"actions": [{"id": 1, "kind": "do", "text": "I hide the map under the floor"}], "retake": False}
        pipe.xadd(live._key(aid), {"e": "turn", "d": json.dumps(secret)})
        pipe.execute()
    assert page.ended.wait(10), "the removed member's stream ended"
    assert page.names()[-2:] == ["members", "gone"], page.names()
    assert "turn" not in page.names(), "the turn after the removal was written to a removed member"


def test_a_page_that_stops_reading_is_ended_not_held_without_bound(site, alice, alice_plays, bob, bob_api):
    """A page whose reader stops (a frozen tab, a stalled proxy) while the story goes on: the server
    keeps a bounded amount for it and then ends its stream (its next connection resumes where it was),
    instead of holding every event of the story in memory for it."""
    from play import live

    aid = _shared_story(alice_plays, bob_api)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: a small window
    sock.settimeout(30)
    sock.connect(("127.0.0.1", site.port))
    sock.sendall(
        f"GET /api/adventures/{aid}/live/ HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Token {_token(bob)}\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    head = b""
    while b"event: presence" not in head:
        head += sock.recv(4096)
    published, pad = 1500, "x" * 8000  # 12 MB: past any kernel buffer, and under the hub's queue bound
    for n in range(published):
        live.publish(aid, "story", {"change": "head", "n": n, "pad": pad})
    received = head
    sock.settimeout(5)
    try:
        while True:  # now read it all: what was kept for the page, then the stream's end
            chunk = sock.recv(1 << 20)
            received += chunk
            if not chunk or received.endswith(b"0\r\n\r\n"):
                break
    except TimeoutError:
        pass  # the stream did not end: the assertions below say so
    finally:
        sock.close()
    stories = received.count(b"event: story")
    assert 0 < stories < published, f"{stories} of {published} events were held for a page that stopped reading"
    assert b"event: unavailable" in received and b"the page reconnects" in received


def test_an_operator_who_turns_on_server_timing_reads_where_a_turns_first_step_went(alice_plays, fake_llm, settings):
    api = alice_plays
    aid = _adventure(api)
    fake_llm.reply = lambda body, n: "The gate creaks."
    response = api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "push"}, format="json", **EVENTS)
    assert not response.has_header("Server-Timing"), "off unless the operator turns it on"
    streamed(response)
    settings.SERVER_TIMING = True
    for extra in (EVENTS, {}):  # streamed and plain
        response = api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "wait"}, format="json", **extra)
        if extra:
            streamed(response)
        phases = {
            part.split(";dur=")[0].strip(): float(part.split(";dur=")[1])
            for part in response["Server-Timing"].split(",")
        }
        assert {"admit", "access", "claim", "place", "context", "total"} <= set(phases), phases
        assert all(ms >= 0 for ms in phases.values())
        assert phases["total"] >= phases["context"] + phases["claim"], "the phases lie inside the whole"
        parts = ("cards", "query", "embed", "rank", "build")
        assert set(parts) <= set(phases), phases
        assert sum(phases[p] for p in parts) <= phases["context"] + 0.5, "the context's parts lie inside it"


def test_server_timing_names_a_garbage_collection_inside_the_step(settings):
    import gc

    from config import server_timing

    settings.SERVER_TIMING = True
    server_timing.time_collections()
    server_timing.time_collections()  # once is enough: a second call adds no second callback
    timing = server_timing.begin()
    with server_timing.phase("context"):
        gc.collect()
    header = timing.header()
    assert header.count("gc2;dur=") == 1, header
    server_timing.begin()
    settings.SERVER_TIMING = False
    assert server_timing.begin() is None
    gc.collect()  # no request timed: nothing recorded anywhere
    assert timing.header().count("gc2;dur=") == 1


@settings(max_examples=examples(300), deadline=None)
@given(piece=st.text())
def test_a_streamed_piece_is_sent_as_the_json_of_its_text_whatever_it_holds(piece):
    """The hot path writes a piece's event without json.dumps's dict walk: byte for byte what
    json.dumps({"text": piece}) gives, for quotes, controls, surrogates and any script."""
    from play.api_support import token_event

    assert token_event(piece) == b"event: token\ndata: " + json.dumps({"text": piece}).encode() + b"\n\n"


def test_a_model_that_goes_silent_midway_ends_the_stream_with_the_timeout_answer_and_keeps_the_action(
    alice_plays, fake_llm, fast_provider
):
    """The model writes a few words, then nothing for longer than the read timeout: the player is told
    it timed out (a 424 they can act on, not a broken stream), the action is kept, and the debug log
    says so. The stream's body is read past the SDK, so its failures came raw and were not told."""
    api = alice_plays
    aid = _adventure(api)
    fake_llm.queue(Reply(text="The bridge sways under your feet.", stall_after=3, stall_s=3.0))
    response = api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "cross"}, format="json", **EVENTS)
    events = parse_events(streamed(response))
    assert [name for name, _ in events] == ["token"] * (len(events) - 1) + ["error"]
    assert "".join(data["text"] for _, data in events[:-1]) == "The bridge sways "
    error = events[-1][1]
    assert error["status"] == 424 and error["error"] == "timeout", error
    assert "stopped writing" in error["detail"]
    assert [a["text"] for a in error["stored_actions"]] == ["cross"], "the player's action is kept"
    texts = list(Action.objects.filter(adventure_id=aid).order_by("depth").values_list("text", flat=True))
    assert texts == ["The gate stands open.", "cross"]
    assert list(ProviderCall.objects.values_list("outcome", flat=True)) == ["timeout"]
