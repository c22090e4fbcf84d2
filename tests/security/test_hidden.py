"""A moderator's hide is final: every path that copies or moves story text (save the setup as a
scenario, undo then redo, a fork and the copies a later edit makes, the exports, an import of an
export, the summary, search, Insights) leaves a hidden node's text out, and it never reaches a
prompt again."""

import pytest

from memory.story import memory_pass
from stories import moderation
from stories.models import Action, Adventure, Branch, Scenario
from stories.tree import lineage

pytestmark = pytest.mark.django_db

SECRET = "FORBIDDEN-WORDS"
ON_THE_QUAY = "QUAYSIDE-SLUR"  # in the opening


def turn(api, aid, text, mode="do"):
    made = api.post(f"/api/adventures/{aid}/turns/", {"mode": mode, "text": text}, format="json")
    assert made.status_code == 201, made.json()
    return made.json()["actions"]


def hide(text: str) -> Action:
    action = Action.objects.get(text__contains=text, live=True)
    return moderation.action_set_hidden(action_id=action.pk, hidden=True)


def body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def nowhere(api, aid, fake_llm, *, texts=(SECRET,)):
    """None of ``texts`` in the story, its exports, its search or the next prompt."""
    read = [
        api.get(f"/api/adventures/{aid}/story/").content,
        body(api.get(f"/api/adventures/{aid}/story/export/", {"as": "text"})),
        body(api.get(f"/api/adventures/{aid}/story/export/", {"as": "markdown"})),
        body(api.get(f"/api/adventures/{aid}/export/")),
        api.get(f"/api/adventures/{aid}/story/search/", {"q": SECRET.split("-")[0].lower()}).content,
        api.get(f"/api/adventures/{aid}/insights/").content,
    ]
    turn(api, aid, "look around")
    read.append(str(fake_llm.chat_requests()[-1].body["messages"]).encode())
    for text in texts:
        for i, content in enumerate(read):
            assert text.encode() not in content, f"read {i} holds the hidden text"


@pytest.fixture
def harbor(alice_plays):
    aid = alice_plays.post(
        "/api/adventures/", {"title": "Harbor", "opening": f"You arrive. {ON_THE_QUAY} on the quay."}, format="json"
    ).json()["id"]
    turn(alice_plays, aid, "walk to the inn")
    return aid


def test_saving_the_setup_as_a_scenario_leaves_a_hidden_opening_out(harbor, alice_plays, bob_api):
    hide(ON_THE_QUAY)
    made = alice_plays.post(f"/api/adventures/{harbor}/scenario/", format="json")
    assert made.status_code == 201, made.json()
    key = made.json()["key"]
    assert ON_THE_QUAY not in str(made.json())
    alice_plays.patch(f"/api/scenarios/{key}/", {"opening": "A grey dawn."}, format="json")
    assert alice_plays.patch(f"/api/scenarios/{key}/", {"visibility": "published"}, format="json").status_code == 200
    assert all(ON_THE_QUAY not in v.opening for v in Scenario.objects.get(key=key).versions.all())
    assert ON_THE_QUAY not in bob_api.get(f"/api/scenarios/{key}/").content.decode()


def test_undo_then_redo_brings_a_hidden_action_back_hidden(harbor, alice_plays, fake_llm):
    turn(alice_plays, harbor, f"shout {SECRET}")
    hide(f"shout {SECRET}")
    assert alice_plays.post(f"/api/adventures/{harbor}/undo/").status_code == 200
    redone = alice_plays.post(f"/api/adventures/{harbor}/redo/")
    assert redone.status_code == 200, redone.json()
    assert SECRET not in redone.content.decode()
    assert Action.objects.get(text=f"shout {SECRET}").hidden is True, "back in its place, still hidden"
    nowhere(alice_plays, harbor, fake_llm)
    memory_pass.run(harbor)
    from memory.models import Memory

    assert not Memory.objects.filter(adventure_id=harbor, text__contains=SECRET).exists()


def test_a_fork_and_the_copies_later_edits_make_keep_a_hidden_node_hidden(harbor, alice_plays, fake_llm):
    turn(alice_plays, harbor, f"whisper {SECRET}")
    turn(alice_plays, harbor, "order soup")
    hide(f"whisper {SECRET}")
    main = Branch.objects.get(adventure_id=harbor, name="main")
    last = alice_plays.get(f"/api/adventures/{harbor}/story/").json()["actions"][-1]["id"]
    # a fork that borrows the hidden node, edited below it: it copies what it borrows (materialize)
    assert alice_plays.post(f"/api/adventures/{harbor}/actions/{last}/fork/", format="json").status_code == 201
    opening = alice_plays.get(f"/api/adventures/{harbor}/story/").json()["actions"][0]["id"]
    edited = alice_plays.patch(f"/api/adventures/{harbor}/actions/{opening}/", {"text": "Dusk."}, format="json")
    assert edited.status_code == 200, edited.json()
    nowhere(alice_plays, harbor, fake_llm)
    # another fork borrowing it, then the first branch edited below it: the fork gets a frozen copy
    alice_plays.post(f"/api/adventures/{harbor}/branches/{main.pk}/checkout/", format="json")
    assert alice_plays.post(f"/api/adventures/{harbor}/actions/{last}/fork/", format="json").status_code == 201
    alice_plays.post(f"/api/adventures/{harbor}/branches/{main.pk}/checkout/", format="json")
    opening = lineage.story(main).first().pk
    edited = alice_plays.patch(f"/api/adventures/{harbor}/actions/{opening}/", {"text": "Dawn."}, format="json")
    assert edited.status_code == 200, edited.json()
    copies = Action.objects.filter(adventure_id=harbor, text=f"whisper {SECRET}")
    assert copies.count() >= 3 and not copies.filter(hidden=False).exists(), "every copy of the hidden node is hidden"
    for branch in Branch.objects.filter(adventure_id=harbor):
        assert SECRET not in " ".join(lineage.story(branch).values_list("text", flat=True))


def test_an_export_imported_again_keeps_the_hidden_node_out(harbor, alice_plays, fake_llm):
    hide(ON_THE_QUAY)
    exported = alice_plays.get(f"/api/adventures/{harbor}/export/").json()
    assert ON_THE_QUAY not in str(exported)
    job = alice_plays.post("/api/adventures/import/", exported, format="json").json()
    copy = job["adventure_id"]
    assert Adventure.objects.filter(pk=copy).exists()
    nowhere(alice_plays, copy, fake_llm, texts=(ON_THE_QUAY,))
    nowhere(alice_plays, harbor, fake_llm, texts=(ON_THE_QUAY,))


def test_the_summary_and_memories_are_written_without_a_hidden_node(adventure, memory_llm, alice_api):
    from tests.support.story import grow

    grow(adventure, 14)
    node = lineage.node_at(lineage.head(adventure), 4)
    Action.objects.filter(pk=node.pk).update(text=f"Mira whispers {SECRET}.")
    moderation.action_set_hidden(action_id=node.pk, hidden=True)
    memory_pass.run(adventure.pk)
    regenerated = alice_api.post(f"/api/adventures/{adventure.pk}/summary/regenerate/")
    assert regenerated.status_code == 200, regenerated.json()
    for request in memory_llm.chat_requests():
        assert SECRET not in str(request.body["messages"])


def test_the_last_prompt_insights_shows_loses_a_node_hidden_after_it_was_sent(harbor, alice_plays):
    turn(alice_plays, harbor, f"whisper {SECRET}")
    before = alice_plays.get(f"/api/adventures/{harbor}/insights/", {"turn": "last"})
    assert before.status_code == 200 and SECRET in before.content.decode(), "the player's own last prompt"
    hide(f"whisper {SECRET}")
    after = alice_plays.get(f"/api/adventures/{harbor}/insights/", {"turn": "last"})
    assert SECRET not in after.content.decode()
