"""The plot essentials and the author's note are true on the branch being played (issue 47's first
rule, for the adventure's two texts): an edit applies from the node it was made at down that
branch; a branch switch, an undo, a retry and a fork show the text of their point at once, with no
model call; what the player wrote is never lost (the history keeps a version whose node was undone
away); and the model is told the path's text."""

import pytest

from tests.stories.test_history import story, turn

pytestmark = pytest.mark.django_db

BEFORE = "Bram, the blacksmith, keeps the forge."
AFTER = "Bram died in the mill fire."


@pytest.fixture
def mill(owner, alice_api):
    """A story of three turns whose plot essentials say Bram is alive."""
    made = alice_api.post(
        "/api/adventures/",
        {"title": "Mill", "opening": "Smoke over the village.", "plot_essentials": BEFORE},
        format="json",
    )
    aid = made.json()["id"]
    for text in ("walk to the forge", "watch the mill burn", "search the ashes"):
        turn(alice_api, aid, text)
    return aid


def _plot(api, aid):
    return api.get(f"/api/adventures/{aid}/").json()["plot_essentials"]


def _edit(api, aid, **fields):
    answer = api.patch(f"/api/adventures/{aid}/", fields, format="json")
    assert answer.status_code == 200, answer.json()
    return answer.json()


def test_an_edit_holds_down_its_branch_and_a_fork_from_before_it_keeps_the_old_text(mill, alice_api, memory_llm):
    actions = alice_api.get(f"/api/adventures/{mill}/story/").json()["actions"]
    _edit(alice_api, mill, plot_essentials=AFTER, authors_note="Grief, ash and rain.")
    assert _plot(alice_api, mill) == AFTER
    main = alice_api.get(f"/api/adventures/{mill}/").json()["head_branch"]

    forge = next(a for a in actions if a["text"] == "walk to the forge")
    fork = alice_api.post(f"/api/adventures/{mill}/actions/{forge['id']}/fork/", {}, format="json")
    assert fork.status_code == 201, fork.json()
    adventure = alice_api.get(f"/api/adventures/{mill}/").json()
    assert (adventure["plot_essentials"], adventure["authors_note"]) == (BEFORE, ""), "before the fire, Bram lives"

    calls = len(memory_llm.chat_requests())
    turn(alice_api, mill, "ask Bram about the mill")
    sent = memory_llm.chat_requests()[calls].body["messages"]
    told = "\n".join(m["content"] for m in sent)
    assert BEFORE in told and AFTER not in told, "the model is told the fork's text"

    back = alice_api.post(f"/api/adventures/{mill}/branches/{main}/checkout/")
    assert back.status_code == 200, back.json()
    assert _plot(alice_api, mill) == AFTER, "back on the main branch, at once"


def test_an_undo_past_the_edit_shows_the_text_from_before_and_the_history_keeps_the_edit(mill, alice_api):
    _edit(alice_api, mill, plot_essentials=AFTER)
    assert alice_api.post(f"/api/adventures/{mill}/undo/").status_code == 200
    assert _plot(alice_api, mill) == BEFORE, "undoing back past the node of the edit"
    history = alice_api.get(f"/api/adventures/{mill}/canon/plot_essentials/").json()
    assert [(v["text"], v["depth"], v["told"]) for v in history] == [(AFTER, None, False), (BEFORE, 0, True)]
    _edit(alice_api, mill, plot_essentials=history[0]["text"])  # brought back, at the node played now
    assert _plot(alice_api, mill) == AFTER
    assert alice_api.get(f"/api/adventures/{mill}/canon/elsewhere/").status_code == 404


def test_a_retry_shows_the_text_of_its_own_take_and_the_first_take_brings_the_edit_back(mill, alice_api):
    first = alice_api.get(f"/api/adventures/{mill}/story/").json()["actions"][-1]
    _edit(alice_api, mill, plot_essentials=AFTER)  # written after the first take of the last reply
    assert alice_api.post(f"/api/adventures/{mill}/retry/").status_code == 201
    assert _plot(alice_api, mill) == BEFORE, "another take: the edit made after the first one is not its story"
    newest = alice_api.get(f"/api/adventures/{mill}/story/").json()["actions"][-1]
    chosen = alice_api.post(
        f"/api/adventures/{mill}/actions/{newest['id']}/takes/", {"take_id": first["id"]}, format="json"
    )
    assert chosen.status_code == 200, chosen.json()
    assert _plot(alice_api, mill) == AFTER


def test_a_story_never_edited_reads_as_before_and_an_unchanged_text_makes_no_version(mill, alice_api):
    assert _plot(alice_api, mill) == BEFORE
    _edit(alice_api, mill, plot_essentials=BEFORE, title="Mill at dusk")
    assert alice_api.get(f"/api/adventures/{mill}/canon/plot_essentials/").json() == []
    assert [k for k, _ in story(alice_api, mill)][0] == "start"


def test_a_lorebooks_always_on_entry_joins_the_texts_of_the_node_played(mill, alice_api):
    _edit(alice_api, mill, plot_essentials=AFTER)
    book = {"entries": {"0": {"key": [], "comment": "Weather", "content": "It always rains.", "constant": True}}}
    made = alice_api.post(f"/api/adventures/{mill}/cards/import/book/", book, format="json")
    assert made.status_code == 201, made.json()
    assert _plot(alice_api, mill) == AFTER + "\n\nIt always rains."
    assert alice_api.post(f"/api/adventures/{mill}/undo/").status_code == 200
    assert _plot(alice_api, mill) == BEFORE


# -- story cards --------------------------------------------------------------------------------------


def _cards(api, aid):
    return {c["name"]: c for c in api.get(f"/api/adventures/{aid}/cards/").json()}


def test_a_card_edited_after_the_fire_is_as_it_was_on_a_fork_from_before_and_after_an_undo(mill, alice_api, memory_llm):
    actions = alice_api.get(f"/api/adventures/{mill}/story/").json()["actions"]
    bram = alice_api.post(
        f"/api/adventures/{mill}/cards/",
        {"type": "character", "name": "Bram", "keys": ["Bram"], "entry": BEFORE},
        format="json",
    ).json()
    turn(alice_api, mill, "look for Bram")
    edited = alice_api.patch(f"/api/adventures/{mill}/cards/{bram['id']}/", {"entry": AFTER}, format="json")
    assert edited.status_code == 200 and edited.json()["entry"] == AFTER
    main = alice_api.get(f"/api/adventures/{mill}/").json()["head_branch"]

    forge = next(a for a in actions if a["text"] == "walk to the forge")
    alice_api.post(f"/api/adventures/{mill}/actions/{forge['id']}/fork/", {}, format="json")
    assert "Bram" not in _cards(alice_api, mill), "made after the fork's point: no card on the fork"
    alice_api.post(f"/api/adventures/{mill}/branches/{main}/checkout/")
    assert _cards(alice_api, mill)["Bram"]["entry"] == AFTER

    assert alice_api.post(f"/api/adventures/{mill}/undo/").status_code == 200
    assert _cards(alice_api, mill)["Bram"]["entry"] == BEFORE, "undone back past the edit"
    calls = len(memory_llm.chat_requests())
    turn(alice_api, mill, "call for Bram")
    told = "\n".join(m["content"] for m in memory_llm.chat_requests()[calls].body["messages"])
    assert "Bram: " + BEFORE in told and AFTER not in told, "the model is told the card of this point"
    insights = alice_api.get(f"/api/adventures/{mill}/insights/").json()
    bram_told = next(i for p in insights["parts"] if p["name"] == "cards" for i in p["items"] if i["name"] == "Bram")
    assert bram_told["since"] == 7, "Insights names the version told: the card as made at passage 7"


def test_a_card_deleted_on_one_branch_stays_on_the_others(mill, alice_api, memory_llm):
    actions = alice_api.get(f"/api/adventures/{mill}/story/").json()["actions"]
    ferry = alice_api.post(
        f"/api/adventures/{mill}/cards/",
        {"name": "Ferry", "keys": ["ferry"], "entry": "It sails at dusk."},
        format="json",
    ).json()
    main = alice_api.get(f"/api/adventures/{mill}/").json()["head_branch"]
    forge = next(a for a in actions if a["text"] == "walk to the forge")
    fork = alice_api.post(f"/api/adventures/{mill}/actions/{forge['id']}/fork/", {}, format="json").json()
    assert "Ferry" not in _cards(alice_api, mill)
    alice_api.post(f"/api/adventures/{mill}/branches/{main}/checkout/")
    turn(alice_api, mill, "cross the river")
    assert alice_api.delete(f"/api/adventures/{mill}/cards/{ferry['id']}/").status_code == 204
    assert "Ferry" not in _cards(alice_api, mill)
    assert alice_api.get(f"/api/adventures/{mill}/cards/{ferry['id']}/").status_code == 404
    every = alice_api.get(f"/api/adventures/{mill}/cards/?every=true").json()
    assert [(c["name"], c["present"]) for c in every] == [("Ferry", False)], "listed with every branch's cards"
    calls = len(memory_llm.chat_requests())
    turn(alice_api, mill, "wait for the ferry")
    told = "\n".join(m["content"] for m in memory_llm.chat_requests()[calls].body["messages"])
    assert "wait for the ferry" in told and "It sails at dusk." not in told, "a card deleted here is not told here"
    assert alice_api.post(f"/api/adventures/{mill}/undo/").status_code == 200
    assert alice_api.post(f"/api/adventures/{mill}/undo/").status_code == 200
    assert _cards(alice_api, mill)["Ferry"]["entry"] == "It sails at dusk.", "the delete was made after that turn"
    assert alice_api.post(f"/api/adventures/{mill}/undo/").status_code == 200
    assert "Ferry" not in _cards(alice_api, mill), "undone past the node it was made at"
    assert fork["id"]


def test_cards_never_changed_after_the_start_are_on_every_path_and_deleting_one_there_deletes_it(owner, alice_api):
    aid = alice_api.post(
        "/api/adventures/",
        {"title": "Quay", "opening": "Fog.", "cards": [{"name": "Quay", "keys": ["quay"], "entry": "Old stones."}]},
        format="json",
    ).json()["id"]
    quay = _cards(alice_api, aid)["Quay"]
    turn(alice_api, aid, "walk the quay")
    actions = alice_api.get(f"/api/adventures/{aid}/story/").json()["actions"]
    alice_api.post(f"/api/adventures/{aid}/actions/{actions[0]['id']}/fork/", {}, format="json")
    assert _cards(alice_api, aid)["Quay"]["entry"] == "Old stones."
    assert alice_api.delete(f"/api/adventures/{aid}/cards/{quay['id']}/").status_code == 204
    assert "Quay" not in _cards(alice_api, aid)


def test_a_cards_history_keeps_every_branchs_versions_and_one_brings_a_deleted_card_back(mill, alice_api, bob_api):
    wren = alice_api.post(
        f"/api/adventures/{mill}/cards/", {"name": "Wren", "keys": ["Wren"], "entry": "A ferrywoman."}, format="json"
    ).json()
    turn(alice_api, mill, "hail the ferry")
    alice_api.patch(f"/api/adventures/{mill}/cards/{wren['id']}/", {"entry": "A ferrywoman, drowned."}, format="json")
    turn(alice_api, mill, "mourn")
    assert alice_api.delete(f"/api/adventures/{mill}/cards/{wren['id']}/").status_code == 204
    history = alice_api.get(f"/api/adventures/{mill}/cards/{wren['id']}/history/")
    assert history.status_code == 200 and history["X-Total-Count"] == "3"
    rows = history.json()
    assert [(r["deleted"], r["fields"]["entry"], r["on_path"]) for r in rows] == [
        (True, "A ferrywoman, drowned.", True),
        (False, "A ferrywoman, drowned.", True),
        (False, "A ferrywoman.", True),
    ]
    assert not any(r["told"] for r in rows), "deleted here: no version stands"
    back = alice_api.post(
        f"/api/adventures/{mill}/cards/{wren['id']}/restore/", {"version": rows[2]["id"]}, format="json"
    )
    assert back.status_code == 200 and back.json()["entry"] == "A ferrywoman."
    assert _cards(alice_api, mill)["Wren"]["entry"] == "A ferrywoman."
    assert bob_api.get(f"/api/adventures/{mill}/cards/{wren['id']}/history/").status_code == 404
    assert (
        bob_api.post(
            f"/api/adventures/{mill}/cards/{wren['id']}/restore/", {"version": rows[2]["id"]}, format="json"
        ).status_code
        == 404
    )
    assert (
        alice_api.post(
            f"/api/adventures/{mill}/cards/{wren['id']}/restore/", {"version": 10**9}, format="json"
        ).status_code
        == 404
    )


def test_an_export_carries_the_canon_of_every_branch_and_its_import_follows_the_tree(mill, alice_api):
    actions = alice_api.get(f"/api/adventures/{mill}/story/").json()["actions"]
    ferry = alice_api.post(
        f"/api/adventures/{mill}/cards/", {"name": "Ferry", "keys": ["ferry"], "entry": "It sails."}, format="json"
    ).json()
    _edit(alice_api, mill, plot_essentials=AFTER)
    main = alice_api.get(f"/api/adventures/{mill}/").json()["head_branch"]
    forge = next(a for a in actions if a["text"] == "walk to the forge")
    alice_api.post(f"/api/adventures/{mill}/actions/{forge['id']}/fork/", {}, format="json")
    exported = alice_api.get(f"/api/adventures/{mill}/export/").json()
    assert {c["name"]: c.get("present", True) for c in exported["cards"]} == {"Ferry": False}
    assert len(exported["canon"]["texts"]) == 2 and len(exported["canon"]["cards"]) == 1

    job = alice_api.post("/api/adventures/import/", exported, format="json").json()
    copy = job["adventure_id"]
    assert _plot(alice_api, copy) == BEFORE and "Ferry" not in _cards(alice_api, copy), "the fork's point"
    branches = alice_api.get(f"/api/adventures/{copy}/branches/").json()
    main_copy = next(b for b in branches if b["id"] != alice_api.get(f"/api/adventures/{copy}/").json()["head_branch"])
    assert alice_api.post(f"/api/adventures/{copy}/branches/{main_copy['id']}/checkout/").status_code == 200
    assert _plot(alice_api, copy) == AFTER and _cards(alice_api, copy)["Ferry"]["entry"] == "It sails."
    assert main and ferry["id"]

    broken = {
        **exported,
        "canon": {"texts": [{"field": "plot_essentials", "text": "x", "node": {"branch": 1, "depth": 99, "take": 0}}]},
    }
    refused = alice_api.post("/api/adventures/import/", broken, format="json")
    assert (
        refused.status_code == 400
        and "canon.texts[0].node names a node the file does not hold" in refused.json()["detail"]
    )
