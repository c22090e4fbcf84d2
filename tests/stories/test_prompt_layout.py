"""The prompt's layout for a model server's prefix cache (issue 32): the rarely changing parts
first, then the story, then what changes every turn; the older order on the adventure's setting."""

import pytest

from stories import context

pytestmark = pytest.mark.django_db


def narrator_prompts(fake) -> list[dict]:
    return [
        r.body["messages"]
        for r in fake.chat_requests()
        if r.body["messages"][0]["content"].startswith(context.DEFAULT_INSTRUCTIONS[:20])
    ]


@pytest.fixture
def harbor(owner, alice_api):
    """An adventure with every part a prompt holds: plot essentials, a summary, an author's note, a
    card its story triggers, a character of the cast and a memory the player wrote."""

    def make(before: bool) -> int:
        made = alice_api.post(
            "/api/adventures/",
            {
                "title": "Vell",
                "persona_name": "Ilse",
                "plot_essentials": "Ilse looks for her brother.",
                "authors_note": "Keep it eerie.",
                "story_summary": "Ilse came to Vell by the night ferry.",
                "opening": "Fog lies over the harbor of Vell. Maren waits on the pier.",
            },
            format="json",
        ).json()
        aid = made["id"]
        patched = alice_api.patch(f"/api/adventures/{aid}/", {"memories_before_story": before}, format="json")
        assert patched.status_code == 200 and patched.json()["memories_before_story"] is before
        for card in (
            {"type": "place", "name": "The pier", "keys": ["pier"], "entry": "The pier is rotten at its end."},
            {"type": "character", "name": "Maren", "keys": ["Maren"], "entry": "Maren keeps the lamps."},
        ):
            assert alice_api.post(f"/api/adventures/{aid}/cards/", card, format="json").status_code == 201
        written = alice_api.post(
            f"/api/adventures/{aid}/memories/", {"text": "Ilse's brother sailed on the Gull."}, format="json"
        )
        assert written.status_code == 201, written.json()
        pin = {"pinned": True}
        assert (
            alice_api.patch(f"/api/adventures/{aid}/memories/{written.json()['id']}/", pin, format="json").status_code
            == 200
        )
        return aid

    return make


def play(alice_api, aid: int, *acts: str) -> None:
    for text in acts:
        turn = alice_api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": text}, format="json")
        assert turn.status_code == 201, turn.json()


def test_a_turns_prompt_starts_with_all_of_the_last_ones_but_what_changes_every_turn(harbor, alice_api, memory_llm):
    aid = harbor(False)
    play(alice_api, aid, "walk to the pier", "ask Maren about the Gull")
    first, second = narrator_prompts(memory_llm)[-2:]
    assert first[0] == second[0], "the system message (instructions, plot essentials, summary) is the same"
    story_then_turn = first[1]["content"].split("\n\n[Memories]", 1)
    assert len(story_then_turn) == 2, "the memories come after the story"
    assert second[1]["content"].startswith(story_then_turn[0] + "\n\n"), "the last prompt's story starts this one"
    system, user = second[0]["content"], second[1]["content"]
    assert "[Plot essentials]" in system and "Ilse came to Vell" in system
    for part in ("[Memories]", "sailed on the Gull", "[World info]", "rotten at its end", "[Author's note"):
        assert part in user, part
    assert user.index("ask Maren about the Gull") < user.index("[Memories]") < user.index("[Author's note")
    insights = alice_api.get(f"/api/adventures/{aid}/insights/").json()
    names = [p["name"] for p in insights["parts"]]
    assert names.index("story") < names.index("memories") < names.index("authors_note"), names


def test_the_older_order_keeps_memories_and_cards_before_the_story(harbor, alice_api, memory_llm):
    aid = harbor(True)
    play(alice_api, aid, "walk to the pier")
    system, user = narrator_prompts(memory_llm)[-1][0]["content"], narrator_prompts(memory_llm)[-1][1]["content"]
    assert "[Memories]" in system and "[World info]" in system
    assert "[Memories]" not in user and "[Author's note" in user


def test_a_new_adventure_keeps_the_older_order_until_the_cache_layout_meets_its_target(alice_api):
    made = alice_api.post("/api/adventures/", {"title": "T"}, format="json").json()
    assert made["memories_before_story"] is True
    refused = alice_api.patch(f"/api/adventures/{made['id']}/", {"memories_before_story": "sometimes"}, format="json")
    assert refused.status_code == 400 and "memories_before_story" in str(refused.json())
