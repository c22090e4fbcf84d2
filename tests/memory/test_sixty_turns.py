"""The issue's "done when": 60 turns through the API with memories on."""

import pytest

from memory.models import Cursor, Memory
from memory.story import marks, memory_pass
from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db


@pytest.mark.slow  # a sweep or a bank at scale: make test runs it
def test_sixty_turns_build_the_bank_the_rules_say_with_recall_on_every_turn(owner, memory_llm):
    api = api_client_for(owner)
    aid = api.post(
        "/api/adventures/",
        {"title": "Long Road", "persona_name": "Mira", "opening": "You leave the village at dawn."},
        format="json",
    ).json()["id"]
    api.put(f"/api/adventures/{aid}/summary/", {"story_summary": "Mira carries her mother's ring."}, format="json")
    recalled_on, verbatim_on = [], []
    for n in range(60):
        turn = api.post(
            f"/api/adventures/{aid}/turns/", {"mode": "do", "text": f"follow the road to milestone {n}"}, format="json"
        )
        assert turn.status_code == 201
        story_part = next(p for p in turn.json()["context"]["parts"] if p["name"] == "story")
        if turn.json()["memories"]:
            recalled_on.append(n)
            part = next(p for p in turn.json()["context"]["parts"] if p["name"] == "memories")
            assert [i["id"] for i in part["items"]] == [m["id"] for m in turn.json()["memories"]]
        if "word for word" in story_part["reason"]:
            verbatim_on.append(n)
        memory_pass.run(aid)  # what the worker does after each turn

    actions = 1 + 2 * 60
    blocks = list(
        Memory.objects.filter(adventure_id=aid).order_by("source_start").values_list("source_start", "source_end")
    )
    assert blocks == [(s, s + 5) for s in range(1, actions - 5, 6)] and len(blocks) == 20
    # From the first embedded memory on, every turn recalls: memories go into the prompt, or the
    # events they tell of are in it word for word (then they are not paid twice).
    assert sorted(set(recalled_on) | set(verbatim_on)) == list(range(6, 60))
    assert verbatim_on and recalled_on and recalled_on[-1] == 59, "once the story outgrows the prompt, memories"
    cursor = Cursor.objects.get(adventure_id=aid)
    assert cursor.memory_depth == 120 and actions - cursor.summary_depth < marks.SUMMARY_INTERVAL
    summary = api.get(f"/api/adventures/{aid}/summary/").json()
    assert summary["story_summary"].startswith("Mira carries her mother's ring.")
    assert summary["catching_up"] is False
    used = Memory.objects.filter(adventure_id=aid, use_count__gt=0).count()
    assert used >= 5
