"""A story played together, live, on the real server: a member's page follows another's turn and
the reply as it is written, from one model call; a page that reconnects goes on after the last
event it saw, with no gap and no repeat; a removed member's stream ends at once."""

import http.client
import json
import threading

import pytest

from tests.support.processes import Site, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def site(django_db_setup, tmp_path_factory):
    server = Site(tmp_path_factory.mktemp("live-site"), DB_POOL_SIZE="3")
    yield server
    server.stop()


def _token(user):
    from stories.accounts.auth import api_token_for

    return api_token_for(user)


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
