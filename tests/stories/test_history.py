"""History a player understands: undo takes back a whole turn (the action and its reply), redo
brings it back while the story has not moved on, and forking from a player's action keeps its
reply."""

import pytest

pytestmark = pytest.mark.django_db


def story(api, aid):
    return [(a["kind"], a["text"]) for a in api.get(f"/api/adventures/{aid}/story/").json()["actions"]]


def turn(api, aid, text, mode="do"):
    made = api.post(f"/api/adventures/{aid}/turns/", {"mode": mode, "text": text}, format="json")
    assert made.status_code == 201, made.json()
    return made.json()["actions"]


@pytest.fixture
def inn(owner, alice_api):
    aid = alice_api.post("/api/adventures/", {"title": "Inn", "opening": "Rain."}, format="json").json()["id"]
    turn(alice_api, aid, "knock")
    turn(alice_api, aid, "step inside")
    return aid


def test_undo_takes_back_the_action_and_its_reply_and_redo_brings_both_back(inn, alice_api):
    before = story(alice_api, inn)
    assert len(before) == 5
    undone = alice_api.post(f"/api/adventures/{inn}/undo/").json()
    assert undone == {"removed_depth": 4, "removed": 2, "tip_depth": 3, "can_redo": True}
    assert story(alice_api, inn) == before[:3]
    undone = alice_api.post(f"/api/adventures/{inn}/undo/").json()
    assert undone["tip_depth"] == 1 and story(alice_api, inn) == before[:1]

    redone = alice_api.post(f"/api/adventures/{inn}/redo/")
    assert redone.status_code == 200 and redone.json()["can_redo"] is True
    assert [a["text"] for a in redone.json()["actions"]] == [before[1][1], before[2][1]]
    assert alice_api.post(f"/api/adventures/{inn}/redo/").json()["can_redo"] is False
    assert story(alice_api, inn) == before, "the same turns, in order"
    nothing = alice_api.post(f"/api/adventures/{inn}/redo/")
    assert nothing.status_code == 409 and "nothing to redo" in nothing.json()["detail"]


def test_a_new_turn_after_an_undo_ends_the_redo(inn, alice_api):
    alice_api.post(f"/api/adventures/{inn}/undo/")
    turn(alice_api, inn, "run away")
    before = story(alice_api, inn)
    refused = alice_api.post(f"/api/adventures/{inn}/redo/")
    assert refused.status_code == 409 and story(alice_api, inn) == before


def test_a_continue_is_a_turn_of_its_own(inn, alice_api):
    assert alice_api.post(f"/api/adventures/{inn}/turns/", {"mode": "continue"}, format="json").status_code == 201
    undone = alice_api.post(f"/api/adventures/{inn}/undo/").json()
    assert undone["removed"] == 1 and undone["tip_depth"] == 5


def test_nothing_to_undo_at_the_opening_is_a_409(owner, alice_api):
    aid = alice_api.post("/api/adventures/", {"title": "New", "opening": "Rain."}, format="json").json()["id"]
    refused = alice_api.post(f"/api/adventures/{aid}/undo/")
    assert refused.status_code == 409 and "nothing to undo" in refused.json()["detail"]


def test_forking_from_a_players_action_keeps_its_reply(inn, alice_api):
    actions = alice_api.get(f"/api/adventures/{inn}/story/").json()["actions"]
    knock = next(a for a in actions if a["text"] == "knock")
    fork = alice_api.post(f"/api/adventures/{inn}/actions/{knock['id']}/fork/", {}, format="json")
    assert fork.status_code == 201 and fork.json()["tip_depth"] == knock["depth"] + 1
    assert [k for k, _ in story(alice_api, inn)] == ["start", "do", "ai"], "never two player actions in a row"


def test_another_players_undo_and_redo_are_not_found(inn, bob_api):
    for path in ("undo/", "redo/"):
        assert bob_api.post(f"/api/adventures/{inn}/{path}").status_code == 404


def test_an_edit_after_an_undo_ends_the_redo_and_redo_says_why(inn, alice_api):
    """Undo a turn, edit the new last action, press Redo: the undone turn never comes back on top
    of the edited story."""
    alice_api.post(f"/api/adventures/{inn}/undo/")
    last = alice_api.get(f"/api/adventures/{inn}/story/").json()["actions"][-1]
    edited = alice_api.patch(
        f"/api/adventures/{inn}/actions/{last['id']}/", {"text": "The well is dry and full of bones."}, format="json"
    )
    assert edited.status_code == 200
    before = story(alice_api, inn)
    refused = alice_api.post(f"/api/adventures/{inn}/redo/")
    assert refused.status_code == 409 and "changed since" in refused.json()["detail"], refused.json()
    assert story(alice_api, inn) == before


@pytest.mark.parametrize("change", ["retry", "delete", "take"])
def test_any_other_change_at_the_end_ends_the_redo(inn, alice_api, change):
    alice_api.post(f"/api/adventures/{inn}/turns/", {"mode": "continue"}, format="json")
    alice_api.post(f"/api/adventures/{inn}/undo/")
    last = alice_api.get(f"/api/adventures/{inn}/story/").json()["actions"][-1]
    if change == "retry":
        assert alice_api.post(f"/api/adventures/{inn}/retry/").status_code == 201
    elif change == "delete":
        assert alice_api.delete(f"/api/adventures/{inn}/actions/{last['id']}/").status_code == 204
    else:
        alice_api.post(f"/api/adventures/{inn}/retry/")
        newest = alice_api.get(f"/api/adventures/{inn}/story/").json()["actions"][-1]
        chosen = alice_api.post(
            f"/api/adventures/{inn}/actions/{newest['id']}/takes/", {"take_id": last["id"]}, format="json"
        )
        assert chosen.status_code == 200, chosen.json()
    before = story(alice_api, inn)
    assert alice_api.post(f"/api/adventures/{inn}/redo/").status_code == 409
    assert story(alice_api, inn) == before


@pytest.mark.django_db(transaction=True)
def test_three_redos_at_once_bring_the_turn_back_once_and_two_undos_take_back_two_turns(owner):
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    from tests.conftest import api_client_for

    api = api_client_for(owner)
    aid = api.post("/api/adventures/", {"title": "Inn", "opening": "Rain."}, format="json").json()["id"]
    for text in ("knock", "step inside", "sit down"):
        turn(api, aid, text)
    before = story(api, aid)

    def at_once(path, count):
        def one(_):
            try:
                return api_client_for(owner).post(f"/api/adventures/{aid}/{path}").status_code
            finally:
                connection.close()

        with ThreadPoolExecutor(count) as pool:
            return sorted(pool.map(one, range(count)))

    assert api.post(f"/api/adventures/{aid}/undo/").status_code == 200
    assert at_once("redo/", 3) == [200, 409, 409]
    assert story(api, aid) == before, "the turn placed once"
    assert at_once("undo/", 2) == [200, 200]
    assert story(api, aid) == before[:3], "two turns taken back, not one twice"
    assert at_once("redo/", 3) == [200, 200, 409]
    assert story(api, aid) == before, "both back, in order"


def test_the_story_says_whether_redo_has_anything_to_bring_back(inn, alice_api):
    def can_redo():
        return alice_api.get(f"/api/adventures/{inn}/story/").json()["can_redo"]

    assert can_redo() is False, "after a turn there is nothing to redo (the page keeps Redo off)"
    alice_api.post(f"/api/adventures/{inn}/undo/")
    assert can_redo() is True
    alice_api.post(f"/api/adventures/{inn}/redo/")
    assert can_redo() is False
    alice_api.post(f"/api/adventures/{inn}/undo/")
    turn(alice_api, inn, "sit by the fire")
    assert can_redo() is False, "a new turn ends the redo"
