"""Memories follow the branch they describe through undo, delete, edit, fork and retry."""

import pytest

from memory.models import Cursor, Memory
from memory.story import blocks, memories, memory_pass, retrieval
from stories.models import Branch
from stories.tree import history, lineage, writes
from tests.memory.conftest import grow

pytestmark = pytest.mark.django_db


def last_passage(fake):
    """The passage of the newest memory request the model received."""
    requests = [r for r in fake.chat_requests() if r.body["messages"][0]["content"].startswith("You write memories")]
    return requests[-1].body["messages"][-1]["content"].split("Passage:\n", 1)[1]


def visible(branch_id):
    return sorted(
        blocks.path_memories(Branch.objects.get(pk=branch_id))
        .filter(source_start__isnull=False)
        .values_list("source_start", "source_end")
    )


def head_of(adventure):
    adventure.refresh_from_db()
    return Branch.objects.get(pk=adventure.head_branch_id)


def test_undo_withdraws_the_memory_of_the_removed_node_and_rewinds_the_cursor(adventure, memory_llm):
    grow(adventure, 12)
    memory_pass.run(adventure.pk)
    head = head_of(adventure)
    opening_note = memories.memory_write(adventure=adventure, text="Mira fears deep water.")
    Memory.objects.filter(pk=opening_note.pk).update(depth=1)
    history.node_undo(adventure_id=adventure.pk)
    assert visible(head.pk) == [(1, 6)]
    assert Cursor.objects.get(adventure=adventure).memory_depth == 6
    assert Memory.objects.filter(pk=opening_note.pk).exists(), "hand-written memories at the opening survive"
    writes.place(adventure_id=adventure.pk, branch_id=head.pk, kind="story", text="Mira meets Oren at the gate.")
    memory_pass.run(adventure.pk)
    assert visible(head.pk) == [(1, 6), (7, 12)]
    assert last_passage(memory_llm).endswith("Mira meets Oren at the gate."), "the block is summarized again"


def test_deleting_an_early_action_withdraws_every_later_block(adventure, memory_llm):
    grow(adventure, 13)
    memory_pass.run(adventure.pk)
    head = head_of(adventure)
    third = lineage.node_at(head, 3)
    writes.delete(adventure_id=adventure.pk, action_id=third.pk)
    assert visible(head.pk) == []
    assert Cursor.objects.get(adventure=adventure).memory_depth == 0
    memory_pass.run(adventure.pk)
    assert visible(head.pk) == [(1, 6), (7, 12)]
    requests = [r for r in memory_llm.chat_requests() if r.body["messages"][0]["content"].startswith("You write")]
    first_block = requests[-2].body["messages"][-1]["content"]
    assert "Action 3:" not in first_block and "Action 7:" in first_block, "later actions moved up one depth"


def test_editing_an_action_marks_its_memory_stale_until_regenerated(adventure, memory_llm, alice_api):
    grow(adventure, 12)
    memory_pass.run(adventure.pk)
    head = head_of(adventure)
    writes.edit(adventure_id=adventure.pk, action_id=lineage.node_at(head, 8).pk, text="Mira finds a map.")
    stale = Memory.objects.get(adventure=adventure, source_start=7)
    assert stale.stale is True and Memory.objects.get(source_start=1, adventure=adventure).stale is False
    response = alice_api.post(f"/api/adventures/{adventure.pk}/memories/{stale.pk}/regenerate/")
    assert response.status_code == 200 and response.json()["stale"] is False
    source = alice_api.get(f"/api/adventures/{adventure.pk}/memories/{stale.pk}/source/").json()
    assert [a["depth"] for a in source] == list(range(7, 13)) and source[1]["text"] == "Mira finds a map."


def test_a_fork_inherits_the_memories_of_its_path_and_no_others_with_nothing_copied(adventure, memory_llm):
    grow(adventure, 18)
    memory_pass.run(adventure.pk)
    main = head_of(adventure)
    count = Memory.objects.count()
    at_12 = writes.fork(adventure_id=adventure.pk, action_id=lineage.node_at(main, 12).pk)
    assert visible(at_12.pk) == [(1, 6), (7, 12)] and Memory.objects.count() == count
    at_8 = writes.fork(adventure_id=adventure.pk, action_id=lineage.node_at(main, 8).pk)
    assert visible(at_8.pk) == [(1, 6)]
    grow(adventure, 12)  # on the fork at 8
    memory_pass.run(adventure.pk)
    assert visible(at_8.pk) == [(1, 6), (7, 12)]
    assert visible(main.pk) == [(1, 6), (7, 12), (13, 18)], "the original branch keeps its own memories"
    own = Memory.objects.get(branch_id=at_8.pk, source_start=7)
    mains = Memory.objects.get(branch_id=main.pk, source_start=7)
    assert own.pk != mains.pk
    head = head_of(adventure)
    items = retrieval.recall_for_turn(
        adventure=adventure, branch=head, user_id=adventure.owner_id, top_k=10, record_use=False
    ).items
    assert mains.pk not in {m.id for m in items}, "a memory on another branch is never recalled"


def test_retrying_a_reply_withdraws_its_block_and_leaves_the_take_out_of_the_query(adventure, memory_llm):
    grow(adventure, 11)
    head = head_of(adventure)
    reply = writes.place(adventure_id=adventure.pk, branch_id=head.pk, kind="ai", text="A kraken rises from the well.")
    memory_pass.run(adventure.pk)
    assert visible(head.pk) == [(1, 6), (7, 12)]
    head.refresh_from_db()
    assert "kraken" not in retrieval.query_text(head, below_depth=reply.depth)
    assert "kraken" in retrieval.query_text(head)
    writes.take_add(
        adventure_id=adventure.pk,
        branch_id=head.pk,
        expected_tip_id=reply.pk,
        kind="ai",
        text="A heron lands on the well.",
    )
    assert visible(head.pk) == [(1, 6)]
    memory_pass.run(adventure.pk)
    assert visible(head.pk) == [(1, 6), (7, 12)]
    assert last_passage(memory_llm).endswith("A heron lands on the well.")


def test_switching_branches_reconciles_the_cursor_to_the_new_path(adventure, memory_llm):
    grow(adventure, 24)
    memory_pass.run(adventure.pk)
    main = head_of(adventure)
    fork = writes.fork(adventure_id=adventure.pk, action_id=lineage.node_at(main, 9).pk)
    grow(adventure, 20)
    memory_pass.run(adventure.pk)
    assert visible(fork.pk) == [(1, 6), (7, 12), (13, 18)]
    writes.checkout(adventure_id=adventure.pk, branch_id=main.pk)
    assert memory_pass.run(adventure.pk).memories_created == 0
    cursor = Cursor.objects.get(adventure=adventure)
    assert (cursor.memory_branch_id, cursor.memory_depth) == (main.pk, 24)


def summary_requests(fake):
    return [r for r in fake.chat_requests() if r.body["messages"][0]["content"].startswith("You keep the running")]


def test_switching_branches_rebuilds_a_summary_that_tells_of_the_other_branch(adventure, memory_llm):
    grow(adventure, 30)
    memory_pass.run(adventure.pk)
    main = head_of(adventure)
    adventure.refresh_from_db()
    assert adventure.story_summary, "main's story has a summary"
    fork = writes.fork(adventure_id=adventure.pk, action_id=lineage.node_at(main, 9).pk)
    for depth in range(10, 21):
        writes.place(
            adventure_id=adventure.pk,
            branch_id=fork.pk,
            kind="story",
            text=f"Action {depth}: Mira rows a boat across lake {depth}.",
        )
    before = len(summary_requests(memory_llm))
    memory_pass.run(adventure.pk)
    rebuilt = summary_requests(memory_llm)[before:]
    assert len(rebuilt) == 1, "one rewrite over the path now played"
    prompt = rebuilt[0].body["messages"][-1]["content"]
    assert "Current summary:\n(none yet)\n" in prompt, "it starts from the player's own words, not main's story"
    # The fake model's memory of a block is its first and last word: main's blocks end in "well.",
    # the fork's in the lake's number. Only the shared block 1-6 and the fork's own path are told.
    assert prompt.split("What happened since:\n", 1)[1].splitlines() == [
        "- Mira remembered this: Action well.",
        "- Mira remembered this: Action 12.",
        "- Mira remembered this: Action 18.",
        "- Action 19: Mira rows a boat across lake 19.",
        "- Action 20: Mira rows a boat across lake 20.",
    ]
    cursor = Cursor.objects.get(adventure=adventure)
    assert (cursor.summary_branch_id, cursor.summary_depth) == (fork.pk, 20)
    memory_pass.run(adventure.pk)
    assert len(summary_requests(memory_llm)) == before + 1, "on the path again: the usual every-15 rule"


def test_an_edit_takes_the_old_memory_out_of_prompts_and_the_pass_writes_it_again(adventure, memory_llm, alice_api):
    from stories.accounts import ai_settings

    ai_settings.ai_settings_update(user_id=adventure.owner_id, context_tokens=256, memory_top_k=10)
    grow(adventure, 24)
    memory_pass.run(adventure.pk)
    head = head_of(adventure)
    old = Memory.objects.get(adventure=adventure, source_start=7)
    mine = Memory.objects.get(adventure=adventure, source_start=13)
    alice_api.patch(
        f"/api/adventures/{adventure.pk}/memories/{mine.pk}/", {"text": "MY-OWN words about 13-18"}, format="json"
    )
    memory_pass.run(adventure.pk)  # embeds the edited text

    def sent():
        """The ids of the memories the next turn's prompt holds (its answer lists exactly those)."""
        answer = alice_api.post(
            f"/api/adventures/{adventure.pk}/turns/", {"mode": "do", "text": "rest"}, format="json"
        ).json()
        return {m["id"] for m in answer["memories"]}

    assert {old.pk, mine.pk} <= sent()
    for depth, text in ((8, "Mira burns the MAP-OF-ASH."), (14, "Mira sings.")):
        response = alice_api.patch(
            f"/api/adventures/{adventure.pk}/actions/{lineage.node_at(head, depth).pk}/", {"text": text}, format="json"
        )
        assert response.status_code == 200
    drawer = {m["id"]: m for m in alice_api.get(f"/api/adventures/{adventure.pk}/memories/").json()}
    assert drawer[old.pk]["stale"] and drawer[mine.pk]["stale"] and drawer[mine.pk]["edited"]
    now = sent()
    assert old.pk not in now, "a stale memory is not recalled"
    assert mine.pk in now, "the player's own words stay"
    memory_pass.run(adventure.pk)
    old.refresh_from_db()
    assert not old.stale and "MAP-OF-ASH" in last_passage(memory_llm), "written again from the edited block"
    mine.refresh_from_db()
    assert mine.text == "MY-OWN words about 13-18" and mine.stale, "never rewritten"
    memory_pass.run(adventure.pk)  # embeds the rewritten memory
    assert old.pk in sent()
