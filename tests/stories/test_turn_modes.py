"""How a story played together takes its turns: free (a turn sent while a reply is written waits its
place in line and plays after, in the order sent, never lost or merged) and round-robin (the site
says whose turn it is; anyone else gets a 409 naming who is up; an idle player is skipped)."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import F

from config.errors import Conflict
from config.redis_pool import redis_client
from stories.models import Action
from tests.conftest import ALICE_KEY, api_client_for


def _story(alice_plays):
    made = alice_plays.post(
        "/api/adventures/",
        {
            "title": "The Ford",
            "opening": "The river runs high.",
            "persona_name": "Mira",
            "cards": [
                {"name": "Sela", "type": "character", "keys": ["Sela"], "entry": "A scout."},
                {"name": "Oric", "type": "character", "keys": ["Oric"], "entry": "A general."},
            ],
        },
        format="json",
    ).json()
    aid = made["id"]
    cards = {c["name"]: c["id"] for c in alice_plays.get(f"/api/adventures/{aid}/cards/").json()}
    link = alice_plays.post(f"/api/adventures/{aid}/invites/", {}, format="json").json()
    return aid, cards, link["token"]


def _joined(user, code, card):
    api = api_client_for(user)
    assert api.post(f"/api/join/{code}/", {"character": {"card": card}}, format="json").status_code == 201
    return api


def _until(condition, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition never came"
        time.sleep(0.02)


def _play(aid, api, text):
    """A turn from a thread of its own (its database connection closed after)."""
    try:
        return api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": text}, format="json").status_code
    finally:
        connection.close()


def _players_acts(aid):
    return list(
        Action.objects.filter(adventure_id=aid, kind__in=["do", "say"]).order_by("depth").values_list("actor", "text")
    )


@pytest.mark.django_db(transaction=True)
def test_in_free_mode_turns_sent_while_a_reply_is_written_wait_in_line_and_play_in_order(
    alice_plays, bob, charlie, fake_llm
):
    aid, cards, code = _story(alice_plays)
    bob_api, carol_api = _joined(bob, code, cards["Sela"]), _joined(charlie, code, cards["Oric"])
    fake_llm.latency = 0.6  # each reply takes a while: the story is busy meanwhile
    line = f"turnline:{aid}"

    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(_play, aid, alice_plays, "I wade in")
        _until(lambda: fake_llm.in_flight == 1)  # alice's reply is being written
        second = pool.submit(_play, aid, bob_api, "I follow Mira")
        _until(lambda: redis_client().zcard(line) == 1)  # bob waits in line
        third = pool.submit(_play, aid, carol_api, "I hold the bank")
        _until(lambda: redis_client().zcard(line) == 2)
        assert [first.result(), second.result(), third.result()] == [201, 201, 201]

    assert _players_acts(aid) == [("", "I wade in"), ("Sela", "I follow Mira"), ("Oric", "I hold the bank")]
    kinds = list(Action.objects.filter(adventure_id=aid).order_by("depth").values_list("kind", flat=True))
    assert kinds == ["start", "do", "ai", "do", "ai", "do", "ai"], "each turn its own node, each answered"
    assert fake_llm.in_flight_max == 1, "one reply written at a time"
    assert redis_client().zcard(line) == 0


@pytest.mark.django_db(transaction=True)
def test_in_free_mode_a_turn_refused_the_busy_story_keeps_the_place_it_arrived_at(
    alice_plays, bob, charlie, fake_llm, monkeypatch
):
    """A turn holds its place from the moment it reaches the site, not from the moment the site has
    told it the story is busy: a turn sent after it, even one that comes when the reply has just
    been stored, plays after it (the bench once stored a later turn first, 2 in ~1,600)."""
    from play import turns

    aid, cards, code = _story(alice_plays)
    bob_api, carol_api = _joined(bob, code, cards["Sela"]), _joined(charlie, code, cards["Oric"])
    fake_llm.latency = 0.6
    line = f"turnline:{aid}"
    real, refused, go_on = turns.begin_play, threading.Event(), threading.Event()

    def slow_after_refusal(**sent):  # bob's turn is refused the story, then its thread is slow
        try:
            return real(**sent)
        except Conflict:
            if sent["text"] == "I follow Mira" and not refused.is_set():
                refused.set()
                go_on.wait(20)
            raise

    monkeypatch.setattr(turns, "begin_play", slow_after_refusal)

    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(_play, aid, alice_plays, "I wade in")
        _until(lambda: fake_llm.in_flight == 1)
        second = pool.submit(_play, aid, bob_api, "I follow Mira")
        _until(refused.is_set)
        assert first.result() == 201  # the story is free now; bob's turn has not played yet
        third = pool.submit(_play, aid, carol_api, "I hold the bank")
        _until(lambda: third.done() or redis_client().zcard(line) == 2)
        go_on.set()
        assert [second.result(), third.result()] == [201, 201]

    assert _players_acts(aid) == [("", "I wade in"), ("Sela", "I follow Mira"), ("Oric", "I hold the bank")]


@pytest.mark.django_db(transaction=True)
def test_in_free_mode_a_turn_that_reached_the_site_first_plays_first_though_it_took_its_place_later(
    alice_plays, bob, charlie, fake_llm, monkeypatch
):
    """The line keeps the order turns reached the site, not the order they got to it: a turn held on its
    way (the door's wait for a turn-start place, a thread) after it arrived goes ahead of one that arrived
    after it and took its place first (the bench saw a turn sent 50 ms later to the other web process
    stored first)."""
    from play import turn_line

    aid, cards, code = _story(alice_plays)
    bob_api, carol_api = _joined(bob, code, cards["Sela"]), _joined(charlie, code, cards["Oric"])
    fake_llm.latency = 0.6
    line = f"turnline:{aid}"
    real, held, carol_placed = turn_line.Line.join, threading.Event(), threading.Event()

    def join(self, arrived):
        if carol_placed.is_set() or held.is_set():  # alice's, carol's
            placed = real(self, arrived)
            if held.is_set():
                carol_placed.set()
            return placed
        if not redis_client().exists(f"{line}:held"):  # alice's turn: the first to come
            redis_client().set(f"{line}:held", 1, ex=60)
            return real(self, arrived)
        held.set()  # bob's: held after it arrived, until carol, who came after, has her place
        assert carol_placed.wait(20)
        return real(self, arrived)

    monkeypatch.setattr(turn_line.Line, "join", join)

    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(_play, aid, alice_plays, "I wade in")
        _until(lambda: fake_llm.in_flight == 1)
        second = pool.submit(_play, aid, bob_api, "I follow Mira")
        _until(held.is_set)
        third = pool.submit(_play, aid, carol_api, "I hold the bank")
        assert [first.result(), second.result(), third.result()] == [201, 201, 201]

    assert _players_acts(aid) == [("", "I wade in"), ("Sela", "I follow Mira"), ("Oric", "I hold the bank")]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("seen_here", [True, False], ids=["seen-here", "first-here"])
def test_in_free_mode_a_turn_held_on_its_way_to_a_free_story_plays_before_one_that_came_after_it(
    alice_plays, bob, charlie, fake_llm, monkeypatch, seen_here
):
    """The story is free, and a turn that reached the site first is still on its way to its place (the
    door's wait, a thread, its first step): a turn that came after it and found the story free does not
    play ahead of it (the bench stored a turn sent later first, twice in ~1,700, with the site behind).
    The turn holds its place from the moment its request is read, on the event loop. ``first-here``:
    the held turn is the first of its story to reach its web process (another process played the
    story so far); the process learns from the others that the story lines up."""
    from play import turn_line

    aid, cards, code = _story(alice_plays)
    bob_api, carol_api = _joined(bob, code, cards["Sela"]), _joined(charlie, code, cards["Oric"])
    assert _play(aid, alice_plays, "I wade in") == 201  # played: the story is free
    if not seen_here:
        monkeypatch.setattr(turn_line, "_lined", {})  # this process forgets: as a process that never saw it
    line = f"turnline:{aid}"
    real, held, go_on = turn_line.Line.join, threading.Event(), threading.Event()

    def join(self, arrived):
        if not held.is_set():  # bob's turn: held on its way, after it reached the site
            held.set()
            go_on.wait(20)
        return real(self, arrived)

    monkeypatch.setattr(turn_line.Line, "join", join)

    with ThreadPoolExecutor(2) as pool:
        second = pool.submit(_play, aid, bob_api, "I follow Mira")
        _until(held.is_set)
        third = pool.submit(_play, aid, carol_api, "I hold the bank")
        _until(lambda: third.done() or redis_client().zcard(line) == 2)  # carol waits behind bob's place
        go_on.set()
        assert [second.result(), third.result()] == [201, 201]

    assert _players_acts(aid) == [("", "I wade in"), ("Sela", "I follow Mira"), ("Oric", "I hold the bank")]
    assert redis_client().zcard(line) == 0, "every place left once its turn played"


@pytest.mark.django_db(transaction=True)
def test_a_turn_refused_before_its_place_in_line_leaves_no_place_behind(alice_plays, bob, charlie, fake_llm):
    """A turn taken to a place as its request is read, then refused (not a member, bad input), leaves
    its place at once: the next turn of the story plays without waiting for the place to run out."""
    aid, cards, code = _story(alice_plays)
    bob_api = _joined(bob, code, cards["Sela"])
    assert _play(aid, alice_plays, "I wade in") == 201
    line = f"turnline:{aid}"
    stranger = api_client_for(charlie)
    refused = stranger.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "I barge in"}, format="json")
    assert refused.status_code == 404
    bad = bob_api.post(f"/api/adventures/{aid}/turns/", {"mode": "fly", "text": "x"}, format="json")
    assert bad.status_code == 400
    assert redis_client().zcard(line) == 0
    started = time.monotonic()
    assert _play(aid, bob_api, "I follow Mira") == 201
    assert time.monotonic() - started < turn_line_alive_s(), "played at once, not after a stale place ran out"
    assert _players_acts(aid) == [("", "I wade in"), ("Sela", "I follow Mira")]


def turn_line_alive_s():
    from play import turn_line

    return turn_line.ALIVE_S


@pytest.mark.django_db
def test_round_robin_says_whose_turn_it_is_refuses_the_others_and_skips_an_idle_player(alice_plays, bob, charlie):
    aid, cards, code = _story(alice_plays)
    bob_api, carol_api = _joined(bob, code, cards["Sela"]), _joined(charlie, code, cards["Oric"])
    assert (
        carol_api.patch(f"/api/adventures/{aid}/members/", {"turn_mode": "round_robin"}, format="json").status_code
        == 403
    )
    set_up = alice_plays.patch(
        f"/api/adventures/{aid}/members/", {"turn_mode": "round_robin", "idle_skip_s": 60}, format="json"
    )
    assert set_up.status_code == 200 and set_up.json()["up"]["name"] == "Mira"

    def turn(api, text):
        return api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": text}, format="json")

    early = turn(bob_api, "I jump the queue")
    assert early.status_code == 409 and early.json() == {
        "detail": "it is Mira's turn; yours comes in order",
        "error": "not_your_turn",
    }
    assert turn(alice_plays, "I wade in").status_code == 201
    assert bob_api.get(f"/api/adventures/{aid}/members/").json()["up"]["name"] == "Sela"
    assert turn(carol_api, "I shout").json()["detail"].startswith("it is Sela's turn")
    assert turn(bob_api, "I follow").status_code == 201
    assert turn(carol_api, "I hold the bank").status_code == 201
    assert carol_api.get(f"/api/adventures/{aid}/members/").json()["up"]["name"] == "Mira"

    # Mira lets the minute pass: she is skipped, and Sela is up
    Action.objects.filter(adventure_id=aid).update(created_at=F("created_at") - timedelta(seconds=61))
    seen = bob_api.get(f"/api/adventures/{aid}/members/").json()["up"]
    assert seen["name"] == "Sela"
    assert turn(alice_plays, "I wake").json()["error"] == "not_your_turn"
    assert turn(bob_api, "I go first then").status_code == 201
    assert _players_acts(aid)[-1] == ("Sela", "I go first then")


@pytest.mark.django_db
def test_gather_keeps_each_players_action_and_one_narration_answers_the_round_when_all_wrote_or_it_closed(
    alice_plays, bob, charlie, fake_llm
):
    aid, cards, code = _story(alice_plays)
    bob_api, carol_api = _joined(bob, code, cards["Sela"]), _joined(charlie, code, cards["Oric"])
    set_up = alice_plays.patch(
        f"/api/adventures/{aid}/members/", {"turn_mode": "gather", "gather_s": 60}, format="json"
    )
    assert set_up.status_code == 200 and set_up.json()["gather"]["waiting"] == ["Mira", "Sela", "Oric"]

    def turn(api, text, mode="do"):
        return api.post(f"/api/adventures/{aid}/turns/", {"mode": mode, "text": text}, format="json")

    kept = turn(bob_api, "I scout the far bank")
    assert kept.status_code == 202, kept.json()
    assert kept.json()["gather"]["waiting"] == ["Mira", "Oric"] and kept.json()["gather"]["closes_at"]
    again = turn(bob_api, "I scout again")
    assert again.status_code == 409 and again.json()["error"] == "written"
    early = carol_api.post(f"/api/adventures/{aid}/turns/", {"mode": "continue"}, format="json")
    assert early.status_code == 409 and "waiting for Mira, Oric" in early.json()["detail"]
    whisper = carol_api.post(
        f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "I hide", "private": True}, format="json"
    )
    assert whisper.status_code == 400 and "whisper" in whisper.json()["detail"]
    assert turn(alice_plays, "I ready the boats").status_code == 202
    assert fake_llm.chat_requests() == []  # no narration before the round is done
    done = turn(carol_api, "I hold the ford", mode="say")
    assert done.status_code == 201, done.json()
    assert len(fake_llm.chat_requests()) == 1, "one narration for the round"
    prompt = "\n".join(m["content"] for m in fake_llm.chat_requests()[0].body["messages"])
    for told in ("> Sela: I scout the far bank", "> You ready the boats", '> Oric says "I hold the ford"'):
        assert told in prompt
    kinds = list(Action.objects.filter(adventure_id=aid).order_by("depth").values_list("kind", flat=True))
    assert kinds == ["start", "do", "do", "say", "ai"]  # each action its own node, one reply

    # a round not everyone writes in is narrated once it closes, by whoever asks (their page does)
    assert turn(bob_api, "I wait by the boats").status_code == 202
    Action.objects.filter(adventure_id=aid, text="I wait by the boats").update(
        created_at=F("created_at") - timedelta(seconds=61)
    )
    closed = carol_api.post(f"/api/adventures/{aid}/turns/", {"mode": "continue"}, format="json")
    assert closed.status_code == 201, closed.json()
    assert len(fake_llm.chat_requests()) == 2
    nothing = carol_api.post(f"/api/adventures/{aid}/turns/", {"mode": "continue"}, format="json")
    assert nothing.status_code == 409 and nothing.json()["error"] == "nothing_gathered"


@pytest.mark.django_db(transaction=True)
def test_a_gather_round_whose_time_passed_with_no_page_open_is_narrated_by_the_sweep(
    alice_plays, bob, charlie, fake_llm
):
    from play import party

    aid, cards, code = _story(alice_plays)
    bob_api, _ = _joined(bob, code, cards["Sela"]), _joined(charlie, code, cards["Oric"])
    alice_plays.patch(f"/api/adventures/{aid}/members/", {"turn_mode": "gather", "gather_s": 30}, format="json")
    assert (
        bob_api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "I scout"}, format="json").status_code
        == 202
    )
    assert party.rounds_due() == [] and party.round_close(adventure_id=aid) is False  # still open
    Action.objects.filter(adventure_id=aid, text="I scout").update(created_at=F("created_at") - timedelta(seconds=31))
    assert party.rounds_due() == [aid]
    assert party.round_close(adventure_id=aid) is True
    assert len(fake_llm.chat_requests()) == 1
    assert fake_llm.chat_requests()[0].headers["authorization"] == f"Bearer {ALICE_KEY}"  # the owner's key
    kinds = list(Action.objects.filter(adventure_id=aid).order_by("depth").values_list("kind", flat=True))
    assert kinds == ["start", "do", "continue"] and party.rounds_due() == []
