"""Insights tells what the model knows and why: each part not told (the summary, a card, the
memories) says why and when it will be, and a long imported story's summary is told from its first
turn (the pass writes its first summary at the tip, inside the window)."""

import pytest

from memory.story import summaries
from stories.adventures import story_create
from stories.models import Branch
from stories.tree import writes

pytestmark = pytest.mark.django_db


def _untold(api, aid) -> dict:
    insights = api.get(f"/api/adventures/{aid}/insights/")
    assert insights.status_code == 200, insights.json()
    return insights.json()


def test_a_new_story_says_why_there_is_no_summary_no_memories_and_which_cards_wait(alice_plays):
    aid = alice_plays.post("/api/adventures/", {"title": "Vell", "opening": "Fog over the harbor."}, format="json")
    aid = aid.json()["id"]
    for card in (
        {"type": "place", "name": "The pier", "keys": ["pier"], "entry": "Rotten at its end."},
        {"type": "place", "name": "The lighthouse", "keys": ["lighthouse", "the light"], "entry": "Dark for years."},
        {"type": "other", "name": "Unkeyed", "keys": [], "entry": "Never triggered."},
    ):
        assert alice_plays.post(f"/api/adventures/{aid}/cards/", card, format="json").status_code == 201
    shown = _untold(alice_plays, aid)
    untold = {(u["part"], u["name"]): u for u in shown["untold"]}
    assert "opening" in untold[("summary", "")]["why"], "nothing before the window to summarize"
    assert "12 actions" in untold[("memories", "")]["why"]
    assert '"lighthouse"' in untold[("card", "The lighthouse")]["why"]
    assert "names one of them" in untold[("card", "The lighthouse")]["when"]
    assert "no keys" in untold[("card", "Unkeyed")]["why"]

    alice_plays.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "walk to the pier"}, format="json")
    after = {(u["part"], u["name"]) for u in _untold(alice_plays, aid)["untold"]}
    assert ("card", "The pier") not in after, "a card the story names is told, so it is not listed"
    assert ("card", "The lighthouse") in after
    names = [p["name"] for p in _untold(alice_plays, aid)["parts"]]
    assert "cards" in names


def test_a_long_imported_storys_summary_is_told_from_its_first_turn(alice, alice_plays):
    adventure = story_create(owner_id=alice.pk, title="Long road", opening="The road begins.")
    head = Branch.objects.get(pk=adventure.head_branch_id)
    for n in range(400):
        writes.place(
            adventure_id=adventure.pk,
            branch_id=head.pk,
            kind="story" if n % 2 else "do",
            text=f"Step {n}: the caravan passes milestone {n}.",
        )
    head.refresh_from_db()
    # the pass on an import writes its first summary at the tip: inside the recent story's window
    summaries.snapshot_write(
        adventure_id=adventure.pk,
        branch=head,
        depth=head.tip_depth,
        text="The caravan left Orr and crossed the salt flats.",
        player=False,
    )
    summaries.summary_refresh(adventure.pk)
    shown = _untold(alice_plays, adventure.pk)
    summary = next((p for p in shown["parts"] if p["name"] == "summary"), None)
    assert summary is not None, shown["untold"]
    assert "crossed the salt flats" in summary["text"]
    assert not [u for u in shown["untold"] if u["part"] == "summary"]


def test_a_story_past_its_window_with_no_summary_yet_says_when_it_comes(alice, alice_plays):
    adventure = story_create(owner_id=alice.pk, title="Quiet road", opening="The road begins.")
    for n in range(300):
        writes.place(
            adventure_id=adventure.pk, branch_id=adventure.head_branch_id, kind="story", text=f"Mile {n} goes by."
        )
    untold = {u["part"]: u for u in _untold(alice_plays, adventure.pk)["untold"]}
    assert "no summary of the story before action" in untold["summary"]["why"]
    assert "memory pass" in untold["summary"]["when"]
    assert "the memory pass has not written them" in untold["memories"]["why"]
