"""The story keeps the canon current (issue 47, rules 2-7): after each block the pass reads what the
story changed on the cards (the offline reader here), and the claims are a layer under the player's
text that follows the branch: told to the model under the card, withdrawn by an undo, a retry, a
moderator's hide or an edit of their evidence, kept by a fork up to its point; decoys change
nothing; a reversal stands; the player accepts, rejects or words them; a recurring name with no card
is proposed, an alias is not."""

import pytest

from memory.models import CardClaim, Memory
from memory.story import memory_pass
from memory.story.claims import told_on_path
from stories.models import Branch
from stories.tree import history, lineage, writes

pytestmark = pytest.mark.django_db

ENTRY = "Bram, the blacksmith, keeps the forge."
# twelve passages: two blocks; the death is told indirectly at 9, decoys before it
STORY = [
    ("do", "walk to the forge"),
    ("ai", 'Bram hammers a horseshoe. "I\'ll kill that miller one day," he growls.'),
    ("do", "ask about the mill"),
    ("ai", "Maud says that the miller drowned, but folk say a lot of things."),
    ("do", "sleep"),
    ("ai", "You dream that Bram dies in a fire. You wake with a shout."),
    ("do", "watch the mill burn"),
    ("ai", "A beam falls on Bram as he fights the fire at the mill."),
    ("ai", "The healer pulls the blanket over Bram's face."),
    ("do", "mourn"),
    ("ai", "The village is silent."),
]


def _api_cards(api, aid):
    answer = api.get(f"/api/adventures/{aid}/cards/")
    assert answer.status_code == 200, answer.json()
    return {c["name"]: c for c in answer.json()}


@pytest.fixture
def mill(adventure, alice_api):
    """An adventure with Bram's and Maud's cards, played to 12 and read by the pass."""
    for name, entry in (("Bram", ENTRY), ("Maud", "Maud keeps the inn.")):
        made = alice_api.post(
            f"/api/adventures/{adventure.pk}/cards/",
            {
                "type": "character",
                "name": name,
                "entry": entry,
                "keys": ["Bram", "the blacksmith"] if name == "Bram" else [name],
            },
            format="json",
        )
        assert made.status_code == 201, made.json()
    for kind, text in STORY:
        writes.place(adventure_id=adventure.pk, branch_id=adventure.head_branch_id, kind=kind, text=text)
    memory_pass.run(adventure.pk)
    return adventure


def _head(adventure):
    adventure.refresh_from_db()
    return Branch.objects.get(pk=adventure.head_branch_id)


def _status(api, aid, name="Bram"):
    return [(c["slot"], c["value"], c["since"], c["state"]) for c in _api_cards(api, aid)[name]["claims"]]


def test_a_death_told_indirectly_becomes_a_claim_under_the_players_text_and_decoys_change_nothing(mill, alice_api):
    bram = _api_cards(alice_api, mill.pk)["Bram"]
    assert bram["entry"] == ENTRY, "the player's text stands as written"
    claims = bram["claims"]
    assert [(c["slot"], c["value"], c["since"], c["state"], c["standing"]) for c in claims] == [
        ("status", "dead", 10, "applied", True)
    ], "the threat, the rumour and the dream changed nothing"
    evidence = lineage.node_at(_head(mill), 10)
    assert claims[0]["evidence"] == evidence.pk and "blanket over Bram's face" in claims[0]["text"]
    assert _api_cards(alice_api, mill.pk)["Maud"]["claims"] == []


def test_the_model_is_told_the_claim_under_the_card_and_insights_names_its_evidence(mill, alice_api, memory_llm):
    alice_api.patch("/api/settings/", {"memory_top_k": 0}, format="json")
    turn = alice_api.post(
        f"/api/adventures/{mill.pk}/turns/", {"mode": "do", "text": "visit Bram's forge"}, format="json"
    )
    assert turn.status_code == 201, turn.json()
    narrator = [r for r in memory_llm.chat_requests() if "narrator" in r.body["messages"][0]["content"]][-1]
    prompt = "\n".join(m["content"] for m in narrator.body["messages"])
    assert f"Bram: {ENTRY}\nSince passage 10: dead." in prompt, prompt
    insights = alice_api.get(f"/api/adventures/{mill.pk}/insights/").json()
    told = [i for p in insights["parts"] if p["name"].startswith("cards") for i in p["items"] if i["name"] == "Bram"]
    assert told and told[0]["claims"][0]["value"] == "dead" and told[0]["claims"][0]["since"] == 10


def test_an_undo_past_the_evidence_withdraws_the_claim_and_a_fork_before_it_never_had_it(mill, alice_api):
    head = _head(mill)
    fork = writes.fork(adventure_id=mill.pk, action_id=lineage.node_at(head, 9).pk)
    assert _status(alice_api, mill.pk) == [], "forked before the death: Bram lives there"
    writes.checkout(adventure_id=mill.pk, branch_id=head.pk)
    assert _status(alice_api, mill.pk)[0][:2] == ("status", "dead")
    for _ in range(3):  # back past passage 10
        history.node_undo(adventure_id=mill.pk)
    assert _status(alice_api, mill.pk) == [], "undone past its evidence"
    assert Branch.objects.filter(pk=fork.pk).exists()


def test_a_retry_of_the_evidence_take_and_a_moderators_hide_withdraw_the_claim(mill, alice_api):
    head = _head(mill)
    evidence = lineage.node_at(head, 10)
    writes.hide(adventure_id=mill.pk, action_id=evidence.pk, hidden=True)
    assert _status(alice_api, mill.pk) == [], "a hidden passage is no evidence"
    writes.hide(adventure_id=mill.pk, action_id=evidence.pk, hidden=False)
    assert _status(alice_api, mill.pk)[0][1] == "dead"
    for _ in range(2):
        history.node_undo(adventure_id=mill.pk)
    tip = lineage.node_at(_head(mill), 10)
    writes.take_add(adventure_id=mill.pk, branch_id=head.pk, expected_tip_id=tip.pk, kind="ai", text="Bram coughs.")
    assert _status(alice_api, mill.pk) == [], "another take of the evidence: no death"


def test_an_edit_of_the_evidence_reads_it_again(mill, alice_api):
    evidence = lineage.node_at(_head(mill), 10)
    writes.edit(adventure_id=mill.pk, action_id=evidence.pk, text="The healer says Bram will live.")
    assert _status(alice_api, mill.pk) == [], "withdrawn at once"
    memory_pass.run(mill.pk)
    assert _status(alice_api, mill.pk) == []
    writes.edit(adventure_id=mill.pk, action_id=evidence.pk, text="Bram dies in the healer's arms.")
    assert _status(alice_api, mill.pk) == [("status", "dead", 10, "applied")], "read again with the edit"
    Memory.objects.filter(adventure=mill).update(edited=True)  # the player's own words for the block
    writes.edit(adventure_id=mill.pk, action_id=evidence.pk, text="Bram lives.")
    writes.edit(adventure_id=mill.pk, action_id=evidence.pk, text="Bram dies at dawn.")
    memory_pass.run(mill.pk)
    assert _status(alice_api, mill.pk) == [("status", "dead", 10, "applied")], "its memories the player's: still read"


def test_a_faked_death_revealed_later_stands_as_alive(mill, alice_api):
    for kind, text in [("do", "wait")] * 3 + [("ai", "Bram steps out of the smoke, alive.")] + [("do", "stare")] * 2:
        writes.place(adventure_id=mill.pk, branch_id=mill.head_branch_id, kind=kind, text=text)
    memory_pass.run(mill.pk)
    bram = _api_cards(alice_api, mill.pk)["Bram"]
    assert [(c["value"], c["standing"]) for c in bram["claims"]] == [("dead", False), ("alive", True)]
    told = told_on_path(Branch.objects.get(pk=mill.head_branch_id), [bram["id"]])
    assert [(c.value, c.action.depth) for c in told[bram["id"]]] == [("alive", 16)], "the model is told what stands"


def test_a_death_after_a_return_stands_again_against_what_stands_newest(mill, alice_api):
    """Each block is read against what stands on the path before it: the newest claim (dead, then alive),
    not the oldest; a second death after the return is a change again, and the card says so."""
    for kind, text in [("do", "wait")] * 3 + [("ai", "Bram steps out of the smoke, alive.")] + [("do", "stare")] * 2:
        writes.place(adventure_id=mill.pk, branch_id=mill.head_branch_id, kind=kind, text=text)
    memory_pass.run(mill.pk)
    for kind, text in [("do", "ride out")] * 2 + [("ai", "Bram dies on the bridge.")] + [("do", "grieve")] * 3:
        writes.place(adventure_id=mill.pk, branch_id=mill.head_branch_id, kind=kind, text=text)
    memory_pass.run(mill.pk)
    bram = _api_cards(alice_api, mill.pk)["Bram"]
    assert [(c["value"], c["since"], c["standing"]) for c in bram["claims"]] == [
        ("dead", 10, False),
        ("alive", 16, False),
        ("dead", 21, True),
    ]


def test_accept_merges_into_the_text_reject_is_never_proposed_again_and_an_edit_is_the_players(mill, alice_api):
    claim = _api_cards(alice_api, mill.pk)["Bram"]["claims"][0]
    rejected = alice_api.post(f"/api/adventures/{mill.pk}/claims/{claim['id']}/reject/")
    assert rejected.status_code == 200 and rejected.json()["state"] == "rejected"
    evidence = lineage.node_at(_head(mill), 10)
    writes.edit(adventure_id=mill.pk, action_id=evidence.pk, text=evidence.text + " ")
    memory_pass.run(mill.pk)
    assert [c["state"] for c in _api_cards(alice_api, mill.pk)["Bram"]["claims"]] == ["rejected"]

    edited = alice_api.patch(
        f"/api/adventures/{mill.pk}/claims/{claim['id']}/", {"value": "dead, buried by the mill"}, format="json"
    )
    assert edited.status_code == 200 and (edited.json()["edited"], edited.json()["state"]) == (True, "applied")
    assert alice_api.patch(f"/api/adventures/{mill.pk}/claims/{claim['id']}/", {}, format="json").status_code == 400

    accepted = alice_api.post(f"/api/adventures/{mill.pk}/claims/{claim['id']}/accept/")
    assert accepted.status_code == 200 and accepted.json()["state"] == "accepted"
    bram = _api_cards(alice_api, mill.pk)["Bram"]
    assert bram["entry"] == ENTRY + "\nSince passage 10: dead, buried by the mill."
    assert [v["told"] for v in bram["history"]][:1] == [True], "the merge is a card version, told here"


def test_with_review_on_claims_wait_for_the_player_and_turning_it_off_tells_them(adventure, alice_api):
    assert (
        alice_api.patch(f"/api/adventures/{adventure.pk}/", {"claims_review": True}, format="json").status_code == 200
    )
    alice_api.post(
        f"/api/adventures/{adventure.pk}/cards/", {"type": "character", "name": "Bram", "entry": ENTRY}, format="json"
    )
    for kind, text in STORY:
        writes.place(adventure_id=adventure.pk, branch_id=adventure.head_branch_id, kind=kind, text=text)
    memory_pass.run(adventure.pk)
    assert _status(alice_api, adventure.pk) == [("status", "dead", 10, "proposed")]
    changes = alice_api.get(f"/api/adventures/{adventure.pk}/changes/").json()
    assert [(c["card_name"], c["value"]) for c in changes["claims"]] == [("Bram", "dead")]
    assert (
        alice_api.patch(f"/api/adventures/{adventure.pk}/", {"claims_review": False}, format="json").status_code == 200
    )
    assert _status(alice_api, adventure.pk) == [("status", "dead", 10, "applied")]


def test_a_recurring_name_is_proposed_as_a_card_an_alias_is_not_and_accepting_it_reads_its_past(adventure, alice_api):
    alice_api.post(
        f"/api/adventures/{adventure.pk}/cards/",
        {"type": "character", "name": "Maud", "entry": "Maud keeps the inn."},
        format="json",
    )
    passages = [
        ("ai", "Maud, the innkeeper, pours ale. A ferryman named Tomas waits by the door."),
        ("do", "wait"),
        ("ai", "The innkeeper laughs."),
        ("do", "wait"),
        ("ai", "Rain falls."),
        ("do", "wait"),
    ] + [("ai", "Tomas poles the ferry across the river."), ("do", "wait")] * 3
    passages += [("ai", "Tomas is appointed warden of the river."), ("do", "cheer")]
    for kind, text in passages + [("do", "wait")] * 4:
        writes.place(adventure_id=adventure.pk, branch_id=adventure.head_branch_id, kind=kind, text=text)
    while memory_pass.run(adventure.pk).more_due:
        pass
    proposed = alice_api.get(f"/api/adventures/{adventure.pk}/cards/proposed/").json()
    assert [(p["name"], p["type"]) for p in proposed] == [("Tomas", "character")], "never the innkeeper, who is Maud"
    maud = _api_cards(alice_api, adventure.pk)["Maud"]
    assert [(c["slot"], c["value"]) for c in maud["claims"]] == [("alias", "the innkeeper")]
    made = alice_api.post(
        f"/api/adventures/{adventure.pk}/cards/proposed/{proposed[0]['id']}/accept/", {}, format="json"
    )
    assert made.status_code == 201 and made.json()["in_cast"] is True, "an accepted character joins the cast"
    tomas = _api_cards(alice_api, adventure.pk)["Tomas"]
    assert [(c["slot"], c["value"]) for c in tomas["claims"]] == [("role", "warden of the river")]
    assert alice_api.get(f"/api/adventures/{adventure.pk}/cards/proposed/").json() == []
    again = alice_api.post(
        f"/api/adventures/{adventure.pk}/cards/proposed/{proposed[0]['id']}/accept/", {}, format="json"
    )
    assert again.status_code == 400 and "already accepted" in str(again.json())


def test_another_players_claims_and_proposals_are_not_found(mill, alice_api, bob_api):
    claim = CardClaim.objects.filter(adventure=mill).first()
    for answer in (
        bob_api.post(f"/api/adventures/{mill.pk}/claims/{claim.pk}/accept/"),
        bob_api.patch(f"/api/adventures/{mill.pk}/claims/{claim.pk}/", {"value": "alive"}, format="json"),
        bob_api.get(f"/api/adventures/{mill.pk}/changes/"),
    ):
        assert answer.status_code == 404
    assert CardClaim.objects.get(pk=claim.pk).value == "dead"


def test_an_export_carries_the_claims_and_proposals_and_its_import_puts_them_on_their_nodes(mill, alice_api):
    claim = _api_cards(alice_api, mill.pk)["Bram"]["claims"][0]
    alice_api.patch(f"/api/adventures/{mill.pk}/claims/{claim['id']}/", {"value": "dead, mourned"}, format="json")
    exported = alice_api.get(f"/api/adventures/{mill.pk}/export/").json()
    assert [(c["slot"], c["value"], c["edited"]) for c in exported["canon"]["claims"]] == [
        ("status", "dead, mourned", True)
    ]
    job = alice_api.post("/api/adventures/import/", exported, format="json")
    assert job.status_code == 202, job.json()
    copy = job.json()["adventure_id"]
    assert _status(alice_api, copy) == [("status", "dead, mourned", 10, "applied")]
    broken = {
        **exported,
        "canon": {**exported["canon"], "claims": [{**exported["canon"]["claims"][0], "slot": "mood"}]},
    }
    refused = alice_api.post("/api/adventures/import/", broken, format="json")
    assert refused.status_code == 400 and "slot" in str(refused.json())


def _model_reads(memory_llm, changes):
    """The owner's model answers the cast's call as cast_reply does, with ``changes(numbered)`` added."""
    import json
    import re

    from tests.support.story import cast_reply, memory_reply

    def reply(body, n):
        if not body["messages"][0]["content"].startswith("You keep the memories of each character"):
            return memory_reply(body, n)
        user = body["messages"][-1]["content"]
        answer = json.loads(cast_reply(user).strip("`").removeprefix("json"))
        numbered = re.findall(r"^(\d+)\. (.*)$", user.split("The passage:\n", 1)[1], re.M)
        return json.dumps({**answer, **changes([(int(k), t) for k, t in numbered], user)})

    memory_llm.reply = reply


def _claims_of(adventure):
    return [
        (c.card.name, c.slot, c.value, c.offline)
        for c in CardClaim.objects.filter(adventure=adventure).select_related("card")
    ]


def test_with_the_owners_model_the_blocks_call_reads_the_changes_and_a_garbled_answer_falls_back(
    adventure, alice_api, memory_llm
):
    alice_api.post(
        f"/api/adventures/{adventure.pk}/cards/",
        {"type": "character", "name": "Bram", "keys": ["Bram"], "entry": ENTRY},
        format="json",
    )

    def good(numbered, user):
        assert "The cards: Bram (character)" in user
        fire = [k for k, text in numbered if "blanket over Bram" in text]
        return {
            "changes": [{"card": "Bram", "slot": "status", "value": "dead", "sentence": k} for k in fire]
            + [{"card": "Nobody"}]
        }

    _model_reads(memory_llm, good)
    for kind, text in STORY:
        writes.place(adventure_id=adventure.pk, branch_id=adventure.head_branch_id, kind=kind, text=text)
    memory_pass.run(adventure.pk)
    assert _claims_of(adventure) == [("Bram", "status", "dead", False)], "read by the model, in the block's one call"
    system = [r for r in memory_llm.chat_requests() if "keep the memories" in r.body["messages"][0]["content"]]
    assert system and '"changes"' in system[-1].body["messages"][0]["content"]

    CardClaim.objects.filter(adventure=adventure).delete()
    _model_reads(memory_llm, lambda numbered, user: {"changes": "Bram died"})  # garbled: not a list
    evidence = lineage.node_at(_head(adventure), 10)
    writes.edit(adventure_id=adventure.pk, action_id=evidence.pk, text=evidence.text + " ")
    memory_pass.run(adventure.pk)
    assert _claims_of(adventure) == [("Bram", "status", "dead", True)], "the offline reader, flagged"


def test_playing_a_scenario_changes_its_cards_and_claims_in_the_adventure_only(alice_api):
    written = alice_api.post(
        "/api/scenarios/",
        {
            "title": "The mill",
            "opening": "Smoke over Harrowdale.",
            "cards": [{"type": "character", "name": "Bram", "keys": ["Bram"], "entry": ENTRY}],
        },
        format="json",
    )
    assert written.status_code == 201, written.json()
    key = written.json()["key"]
    started = alice_api.post(f"/api/scenarios/{key}/play/", {}, format="json")
    assert started.status_code == 201, started.json()
    aid = started.json()["id"]
    for kind, text in STORY:
        writes.place(adventure_id=aid, branch_id=started.json()["head_branch"], kind=kind, text=text)
    memory_pass.run(aid)
    bram = _api_cards(alice_api, aid)["Bram"]
    assert _status(alice_api, aid)[0][:2] == ("status", "dead")
    alice_api.patch(f"/api/adventures/{aid}/cards/{bram['id']}/", {"entry": "Bram is gone."}, format="json")
    alice_api.post(f"/api/adventures/{aid}/claims/{bram['claims'][0]['id']}/accept/")
    scenario = alice_api.get(f"/api/scenarios/{key}/").json()
    assert (scenario["version"], scenario["cards"][0]["entry"]) == (1, ENTRY), "the scenario stays as published"
    again = alice_api.post(f"/api/scenarios/{key}/play/", {}, format="json").json()
    assert [(c["entry"], c["claims"]) for c in alice_api.get(f"/api/adventures/{again['id']}/cards/").json()] == [
        (ENTRY, [])
    ], "a new play starts from the scenario, with none of the first one's changes"


def test_a_change_in_the_first_block_is_on_its_card_when_the_block_is_full_before_any_memory(adventure, alice_api):
    from memory.models import Memory

    alice_api.post(
        f"/api/adventures/{adventure.pk}/cards/",
        {"type": "character", "name": "Bram", "keys": ["Bram"], "entry": ENTRY},
        format="json",
    )
    passages = [("do", "wait"), ("ai", "Bram dies in the fire."), ("do", "weep"), ("ai", "Rain."), ("do", "wait")]
    for kind, text in passages[:4]:
        writes.place(adventure_id=adventure.pk, branch_id=adventure.head_branch_id, kind=kind, text=text)
    memory_pass.run(adventure.pk)
    assert _status(alice_api, adventure.pk) == [], "the block is not full yet"
    writes.place(adventure_id=adventure.pk, branch_id=adventure.head_branch_id, kind="do", text="wait")
    memory_pass.run(adventure.pk)
    assert _status(alice_api, adventure.pk) == [("status", "dead", 3, "applied")]
    assert not Memory.objects.filter(adventure=adventure).exists(), "memories still wait for twelve actions"
    memory_pass.run(adventure.pk)
    assert len(_status(alice_api, adventure.pk)) == 1, "a block read again stores nothing twice"


def test_a_claim_of_a_card_deleted_here_is_not_merged_into_it(mill, alice_api):
    bram = _api_cards(alice_api, mill.pk)["Bram"]
    assert alice_api.delete(f"/api/adventures/{mill.pk}/cards/{bram['id']}/").status_code == 204
    refused = alice_api.post(f"/api/adventures/{mill.pk}/claims/{bram['claims'][0]['id']}/accept/")
    assert refused.status_code == 400 and "not on the branch played" in refused.json()["detail"]
    every = alice_api.get(f"/api/adventures/{mill.pk}/cards/?every=true").json()
    assert [c["entry"] for c in every if c["name"] == "Bram"] == [ENTRY], "nothing merged"


def test_a_fork_keeps_its_claims_when_the_branch_it_borrows_from_is_rewritten(mill, alice_api):
    head = _head(mill)
    fork = writes.fork(adventure_id=mill.pk, action_id=lineage.node_at(head, 11).pk)
    assert _status(alice_api, mill.pk)[0][:3] == ("status", "dead", 10), "borrowed from the branch it forked"
    writes.checkout(adventure_id=mill.pk, branch_id=head.pk)
    writes.edit(adventure_id=mill.pk, action_id=lineage.node_at(_head(mill), 10).pk, text="Bram coughs and lives.")
    assert _status(alice_api, mill.pk) == [], "rewritten on the main branch"
    writes.checkout(adventure_id=mill.pk, branch_id=fork.pk)
    assert _status(alice_api, mill.pk)[0][:3] == ("status", "dead", 10), "the fork's frozen copy keeps its claim"
