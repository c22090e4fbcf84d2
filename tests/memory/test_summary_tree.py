"""The story summary follows the tree: undo, delete, edit, hide and branch
switches show, at once and with no model call, the summary as it stood at that
point of that path; the player's own summary is kept and is where rewrites start."""

import pytest

from memory.models import SummarySnapshot
from memory.story import memory_pass
from stories import moderation
from stories.models import Branch
from stories.tree import lineage, writes
from tests.support.story import grow

pytestmark = pytest.mark.django_db


def echo_summary(body, n):
    """The fake model as a summarizer that keeps the current summary and adds what happened."""
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    if system.startswith("You keep the running summary"):
        current = user.split("Current summary:\n", 1)[1].split("\n\nWhat happened since:", 1)[0]
        happened = user.split("What happened since:\n", 1)[1]
        return (
            (current if current != "(none yet)" else "")
            + " "
            + " ".join(line.lstrip("- ") for line in happened.splitlines())
        )
    return f"Reply {n}."


@pytest.fixture
def story(adventure, memory_llm, alice_api):
    """30 actions with the memory bank off (the summary reads the raw story): action 14 holds a crown."""
    memory_llm.reply = echo_summary
    adventure.memory_bank_enabled = False
    adventure.save(update_fields=["memory_bank_enabled"])
    head = grow(adventure, 13)
    writes.place(adventure_id=adventure.pk, branch_id=head.pk, kind="story", text="Cora steals the XYZZY cursed crown.")
    grow(adventure, 16)
    memory_pass.run(adventure.pk)
    adventure.refresh_from_db()
    assert "XYZZY" in adventure.story_summary
    return adventure


def summary_of(api, adventure):
    return api.get(f"/api/adventures/{adventure.pk}/summary/").json()["story_summary"]


def calls(fake):
    return len(fake.chat_requests())


def test_undo_takes_undone_events_out_of_the_summary_at_once(story, memory_llm, alice_api):
    before = calls(memory_llm)
    for _ in range(3):  # 16 -> 13
        assert alice_api.post(f"/api/adventures/{story.pk}/undo/").status_code == 200
    assert "XYZZY" not in summary_of(alice_api, story)
    assert calls(memory_llm) == before, "no model call"
    alice_api.post(f"/api/adventures/{story.pk}/turns/", {"mode": "do", "text": "look"}, format="json")
    prompt = str(memory_llm.chat_requests()[-1].body["messages"])
    assert "XYZZY" not in prompt


def test_an_edit_or_a_hide_below_the_summary_shows_the_summary_from_before_it(story, memory_llm, alice_api):
    head = Branch.objects.get(pk=story.head_branch_id)
    crown = lineage.node_at(head, 14)
    before = calls(memory_llm)
    alice_api.patch(f"/api/adventures/{story.pk}/actions/{crown.pk}/", {"text": "Cora admires a crown."}, format="json")
    assert "XYZZY" not in summary_of(alice_api, story) and calls(memory_llm) == before
    memory_pass.run(story.pk)  # the pass writes it again over the edited story
    story.refresh_from_db()
    assert "admires a crown" in story.story_summary


def test_a_hidden_action_leaves_the_summary_at_once(story, memory_llm, alice_api):
    head = Branch.objects.get(pk=story.head_branch_id)
    moderation.action_set_hidden(action_id=lineage.node_at(head, 14).pk, hidden=True)
    assert "XYZZY" not in summary_of(alice_api, story)


def test_a_branch_switch_shows_that_paths_summary_at_once(story, memory_llm, alice_api):
    head = Branch.objects.get(pk=story.head_branch_id)
    main_summary = summary_of(alice_api, story)
    fork = alice_api.post(
        f"/api/adventures/{story.pk}/actions/{lineage.node_at(head, 10).pk}/fork/",
        {"name": "earlier", "checkout": True},
        format="json",
    ).json()
    before = calls(memory_llm)
    assert "XYZZY" not in summary_of(alice_api, story), "the fork's path never had the crown"
    assert alice_api.post(f"/api/adventures/{story.pk}/branches/{head.pk}/checkout/").status_code == 200
    assert summary_of(alice_api, story) == main_summary, "back on main: its summary, as it was"
    assert alice_api.post(f"/api/adventures/{story.pk}/branches/{fork['id']}/checkout/").status_code == 200
    assert "XYZZY" not in summary_of(alice_api, story)
    assert calls(memory_llm) == before, "switching costs no model call"


def test_the_players_summary_is_kept_and_is_where_rewrites_start(story, memory_llm, alice_api):
    alice_api.put(
        f"/api/adventures/{story.pk}/summary/", {"story_summary": "MY-OWN summary of the road."}, format="json"
    )
    assert summary_of(alice_api, story) == "MY-OWN summary of the road."
    grow(story, 40)
    memory_pass.run(story.pk)
    request = [r for r in memory_llm.chat_requests() if "running summary" in r.body["messages"][0]["content"]][-1]
    assert "Current summary:\nMY-OWN summary of the road." in request.body["messages"][-1]["content"]
    for _ in range(30):  # undo far below where the player wrote it
        alice_api.post(f"/api/adventures/{story.pk}/undo/")
    own = SummarySnapshot.objects.filter(adventure=story, player=True)
    assert [s.text for s in own] == ["MY-OWN summary of the road."], "no undo loses the player's text"
    assert summary_of(alice_api, story) == "MY-OWN summary of the road."
    patched = alice_api.patch(f"/api/adventures/{story.pk}/", {"story_summary": "MY-SECOND words."}, format="json")
    assert patched.json()["story_summary"] == "MY-SECOND words."
    assert SummarySnapshot.objects.filter(adventure=story, player=True, text="MY-SECOND words.").exists()


def test_a_forced_rewrite_and_export_import_keep_the_summary(story, memory_llm, alice_api):
    exported = alice_api.get(f"/api/adventures/{story.pk}/export/").json()
    imported = alice_api.post("/api/adventures/import/", exported, format="json").json()
    assert "XYZZY" in alice_api.get(f"/api/adventures/{imported['adventure_id']}/summary/").json()["story_summary"]


def test_a_turns_prompt_gets_the_summaries_of_its_window_and_the_newest_one_below_it(adventure):
    """A turn's prompt lays out the path's summaries around the story it hands the model: those at or
    after the window's first action, and of the older ones only the newest (the one that tells what
    came before the window); a fork's summaries are not its sibling's."""
    from memory.story import summaries

    head = grow(adventure, 20)
    for depth in (4, 8, 12, 16):
        summaries.snapshot_write(adventure_id=adventure.pk, branch=head, depth=depth, text=f"by {depth}", player=False)
    frame = summaries.summary_frame(head, 11, current="now")
    assert [(depth, text) for depth, _, text in frame.snapshots] == [(8, "by 8"), (12, "by 12"), (16, "by 16")]
    fork = writes.fork(adventure_id=adventure.pk, action_id=lineage.node_at(head, 10).pk, checkout=False)
    assert [(depth, text) for depth, _, text in summaries.summary_frame(fork, 9, current="").snapshots] == [(8, "by 8")]


def test_a_window_past_the_opening_with_no_summary_below_it_is_told_the_players_opening_text(adventure, alice):
    """A long import's pass writes its first summary at the tip: a window that starts past the
    opening and finds no summary below it is told what the player gave the story before any node
    (its base), on that path, and else the current summary; a summary below the window is told
    once there is one."""
    from memory.story import summaries

    summaries.player_summary_set(adventure=adventure, text="BASE: the realm of Vael, where the crown was lost.")
    head = grow(adventure, 20)
    summaries.snapshot_write(adventure_id=adventure.pk, branch=head, depth=20, text="TIP: Mira won.", player=False)
    summaries.summary_refresh(adventure.pk)
    adventure.refresh_from_db()
    frame = summaries.summary_frame(head, 10, current=adventure.story_summary)
    assert frame.before(12) == "BASE: the realm of Vael, where the crown was lost."

    from stories.adventures import story_create

    other = story_create(owner_id=alice.pk, title="No base", opening="Start.")
    other_head = grow(other, 20)
    summaries.snapshot_write(adventure_id=other.pk, branch=other_head, depth=20, text="TIP: Ivo won.", player=False)
    summaries.summary_refresh(other.pk)
    other.refresh_from_db()
    assert summaries.summary_frame(other_head, 10, current=other.story_summary).before(12) == "TIP: Ivo won."

    summaries.snapshot_write(adventure_id=adventure.pk, branch=head, depth=8, text="BELOW: the ford.", player=False)
    frame = summaries.summary_frame(head, 10, current=adventure.story_summary)
    assert frame.before(12) == "BELOW: the ford."
