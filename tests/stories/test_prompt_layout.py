"""The prompt's layout for a model server's prefix cache (issue 32): the rarely changing parts
first, then the story, then what changes every turn; the older order on the adventure's setting."""

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from stories.prompt import parts

pytestmark = pytest.mark.django_db


def narrator_prompts(fake) -> list[dict]:
    return [
        r.body["messages"]
        for r in fake.chat_requests()
        if r.body["messages"][0]["content"].startswith(parts.DEFAULT_INSTRUCTIONS[:20])
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


def play(alice_api, aid: int, *acts: str) -> list[dict]:
    """Each turn's usage."""
    usages = []
    for text in acts:
        turn = alice_api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": text}, format="json")
        assert turn.status_code == 201, turn.json()
        usages.append(turn.json()["usage"])
    return usages


def test_a_turns_prompt_starts_with_all_of_the_last_ones_but_what_changes_every_turn(harbor, alice_api, memory_llm):
    aid = harbor(False)
    usages = play(alice_api, aid, "walk to the pier", "ask Maren about the Gull")
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

    # what the cache gave: the site's figure (its share of the last prompt) and the endpoint's own
    # count of cached prompt tokens, on the turn, in Insights and in the debug log
    assert usages[0]["prefix_reused"] is None, "nothing was sent before the first turn"
    shared = len(story_then_turn[0]) + len(first[0]["content"])
    whole = shared + len(first[1]["content"]) - len(story_then_turn[0])
    assert usages[1]["prefix_reused"] >= round(shared / whole, 3) - 0.05, (usages[1], shared / whole)
    assert usages[1]["cached_tokens"] > 0.5 * usages[1]["prompt_tokens"], usages[1]
    assert insights["prefix_reused"] > 0.5 and insights["last_cached_tokens"] == usages[1]["cached_tokens"]
    logged = alice_api.get("/api/debug/requests/").json()
    assert next(c for c in logged if c["purpose"] == "turn")["cached_tokens"] == usages[1]["cached_tokens"]


def test_the_older_order_keeps_memories_and_cards_before_the_story(harbor, alice_api, memory_llm):
    aid = harbor(True)
    usages = play(alice_api, aid, "walk to the pier", "ask Maren about the Gull")
    system, user = narrator_prompts(memory_llm)[-1][0]["content"], narrator_prompts(memory_llm)[-1][1]["content"]
    assert "[Memories]" in system and "[World info]" in system
    assert "[Memories]" not in user and "[Author's note" in user
    assert usages[1]["prefix_reused"] is not None, "the site's figure is shown in either order"


def test_a_new_adventure_gets_the_prefix_cache_layout_and_the_older_order_is_a_setting(alice_api):
    made = alice_api.post("/api/adventures/", {"title": "T"}, format="json").json()
    assert made["memories_before_story"] is False
    refused = alice_api.patch(f"/api/adventures/{made['id']}/", {"memories_before_story": "sometimes"}, format="json")
    assert refused.status_code == 400 and "memories_before_story" in str(refused.json())


@pytest.mark.parametrize(
    "usage, cached",
    [
        ({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 8}}, 8),
        ({"prompt_tokens": 10}, 0),
        ({"prompt_tokens": 10, "prompt_tokens_details": None}, 0),
        ({"prompt_tokens_details": {"cached_tokens": "8"}}, 0),
        ({"prompt_tokens_details": {"cached_tokens": -3}}, 0),
        ({"prompt_tokens_details": {"cached_tokens": True}}, 0),
        ({"prompt_tokens_details": []}, 0),
        (None, 0),
    ],
)
def test_an_endpoints_cached_token_count_is_read_when_it_is_a_count(usage, cached):
    """Servers that send no details, or odd ones, count as nothing cached; never an error."""
    from stories.providers import cached_tokens

    assert cached_tokens(usage) == cached


def test_insights_shows_the_last_turns_prompt_as_sent_and_the_next_ones(harbor, alice_api, memory_llm):
    aid = harbor(False)
    none_yet = alice_api.get(f"/api/adventures/{aid}/insights/?turn=last")
    assert none_yet.status_code == 404 and "no turn was sent" in none_yet.json()["detail"]
    play(alice_api, aid, "walk to the pier")
    sent = narrator_prompts(memory_llm)[-1]
    last = alice_api.get(f"/api/adventures/{aid}/insights/?turn=last").json()
    prompt = "\n\n".join(m["content"] for m in sent)
    assert all(part["text"] in prompt for part in last["parts"]), "every part as it was sent"
    assert [p["name"] for p in last["parts"]][:2] == ["instructions", "plot_essentials"]
    memories = next(p for p in last["parts"] if p["name"] == "memories")
    assert memories["items"][0]["pinned"] is True and memories["items"][0]["source_start"] is None
    following = alice_api.get(f"/api/adventures/{aid}/insights/").json()
    assert "walk to the pier" in next(p for p in following["parts"] if p["name"] == "story")["text"]
    refused = alice_api.get(f"/api/adventures/{aid}/insights/?turn=first")
    assert refused.status_code == 400 and "turn" in str(refused.json())


def test_token_counts_kept_between_turns_count_what_a_fresh_count_does():
    """Each turn counts the tokens of its story's window again, the same nodes as the last turn but
    two: the counts are kept in the process, and a kept count is the count of that very text (its
    length checked against the hash's rare collision), whatever texts came between."""
    counter = parts.Counter("")
    texts = ["> You draw the sword.\n\n", "The ferryman squints at Mara. " * 40, "é" * 300, "a", "", "x" * 5000]
    fresh = [len(counter.encoding.encode(t, disallowed_special=())) if t else 0 for t in texts]
    parts._counted.clear()
    assert [counter.count(t) for t in texts] == fresh
    assert [counter.count(t) for t in reversed(texts)] == fresh[::-1], "counted again from what was kept"
    key = (counter.encoding.name, hash("a longer text"))
    parts._counted[key] = (1, 999)  # another text with the same hash: its length differs
    assert counter.count("a longer text") == len(counter.encoding.encode("a longer text"))


_PIECES = st.lists(
    st.sampled_from(["I", "the", "The", " ", "\n", "\n\n", "\r\n", ".", "!", "/", ">", "> You", '"', "”", "'s", "’"])
    | st.sampled_from(["123", "4567", "é", "e\u0301", "日本", "🙂", "\t", "—", "...", "a/b", "\u00a0", "Mira", ":"]),
    max_size=8,
).map("".join) | st.text(max_size=12)


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4"])
@settings(max_examples=400, deadline=None)
@given(pieces=st.lists(_PIECES, min_size=1, max_size=6))
def test_a_prompt_counted_from_its_pieces_counts_what_a_fresh_count_of_it_does(model, pieces):
    """A turn's prompt is counted from its nodes' and parts' kept counts (encoding it whole twice a
    turn cost more than the rest): the figure is the prompt's own token count, whatever the pieces
    start or end with (newlines, slashes, spaces, quotes, marks)."""
    counter = parts.Counter(model)
    joined = parts.SEP.join(pieces)
    assert counter.joined(pieces) == len(counter.encoding.encode(joined, disallowed_special=()))


@pytest.mark.parametrize("before", [False, True])
def test_the_prompts_total_is_the_count_of_the_messages_sent(harbor, alice_api, memory_llm, before):
    """What a turn reports as its prompt's tokens is a count of the messages it sent (Insights shows
    it), in either layout."""
    aid = harbor(before)
    played = alice_api.post(
        f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "I ask Maren about the pier"}, format="json"
    )
    assert played.status_code == 201, played.json()
    context = played.json()["context"]
    encoding = tiktoken.get_encoding(context["encoding"])
    sent = narrator_prompts(memory_llm)[-1]
    assert "Maren keeps the lamps." in sent[-1]["content"] or "Maren keeps the lamps." in sent[0]["content"]
    fresh = sum(len(encoding.encode(m["content"], disallowed_special=())) for m in sent) + parts.OVERHEAD
    assert context["total_tokens"] == fresh


def test_a_capped_part_is_cut_to_its_limit_from_the_end_it_keeps_and_left_whole_under_it():
    """The instructions, plot essentials, summary and author's note are capped every turn (from a
    kept count when they fit): under the cap a part is sent whole, over it cut to the cap, the
    summary keeping its end."""
    counter = parts.Counter("gpt-4o")
    text = "[Story so far]\n" + " ".join(f"Mira crossed river {n}." for n in range(200))
    whole = len(counter.encoding.encode(text))
    for _ in range(2):
        assert counter.cap(text, whole) == text
        head, tail = counter.cap(text, 50), counter.cap(text, 50, keep_end=True)
        assert len(counter.encoding.encode(head)) <= 50 and text.startswith(head)
        assert len(counter.encoding.encode(tail)) <= 50 and text.endswith(tail)
        assert "river 199." in tail and "river 199." not in head


def _window_as_specified(story, costs, left, step):
    """The story window's rule, stated plainly: the earliest action on the grid (depths 1, 1 + step,
    ...) from which the story to the newest fits; else (or with no grid) the newest actions that fit."""
    if step:
        for i, action in enumerate(story):
            if sum(costs[i:]) <= left and (action.depth - 1) % step == 0:
                return story[i:]
    kept, used = [], 0
    for action, cost in zip(reversed(story), reversed(costs)):
        if used + cost > left:
            break
        kept.append(action)
        used += cost
    return kept[::-1]


@settings(max_examples=300, deadline=None)
@given(
    costs=st.lists(st.integers(min_value=0, max_value=60), max_size=40),
    first=st.integers(min_value=1, max_value=30),
    left=st.integers(min_value=0, max_value=800),
    step=st.sampled_from([0, 4, 11]),
)
def test_the_story_window_is_the_one_its_rule_gives_though_it_tells_only_what_it_keeps(costs, first, left, step):
    """The window is chosen from the newest action back (an action too old to fit is never told nor
    counted), and it is the window the rule gives: which actions the model reads does not change."""
    from stories.models import Action
    from stories.prompt.layouts import _window

    story = [Action(depth=first + n, text=f"a{n}") for n in range(len(costs))]
    asked = []

    def cost(action):
        asked.append(action.depth)
        return costs[action.depth - first]

    kept = _window(story, cost, left, step=step)
    assert [a.depth for a in kept] == [a.depth for a in _window_as_specified(story, costs, left, step)]
    told = len(story) - min(asked, default=first + len(story)) + first
    fits = len(_window_as_specified(story, costs, left, 0))
    assert told <= fits + 1, "told and counted: only the newest actions that fit and the one that did not"
