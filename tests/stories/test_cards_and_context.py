import pytest

from stories.adventures import story_create
from stories.models import Action, Branch, StoryCard
from stories.prompt import builder, voice
from stories.prompt.context import MemoryItem
from stories.tree import writes

pytestmark = pytest.mark.django_db

AI_DUNGEON_CARDS = [
    {
        "keys": "Eldon,wizard",
        "value": "Eldon is an old wizard who lies about his age.",
        "type": "character",
        "title": "Eldon",
        "description": "Met in chapter one",
        "useForCharacterCreation": False,
    },
    {
        "keys": "Larion",
        "value": "Larion is a port city ringed by white walls.",
        "type": "location",
        "title": "Larion",
        "description": "",
    },
    {
        "keys": "amulet, blue stone",
        "value": "The amulet hums near magic.",
        "type": "item",
        "title": "Amulet",
        "description": "",
    },
    {
        "keys": "Red Hand",
        "value": "A guild of thieves.",
        "type": "custom",
        "title": "The Red Hand",
        "description": "secret",
    },
]


def test_ai_dungeon_card_file_round_trips(alice_api):
    adventure = alice_api.post("/api/adventures/", {"title": "Lore"}, format="json").json()
    imported = alice_api.post(f"/api/adventures/{adventure['id']}/cards/import/", AI_DUNGEON_CARDS, format="json")
    assert imported.status_code == 201
    assert [(c["type"], c["name"], c["keys"]) for c in imported.json()] == [
        ("character", "Eldon", ["Eldon", "wizard"]),
        ("place", "Larion", ["Larion"]),
        ("item", "Amulet", ["amulet", "blue stone"]),
        ("other", "The Red Hand", ["Red Hand"]),
    ]
    exported = alice_api.get(f"/api/adventures/{adventure['id']}/cards/export/").json()
    assert [(c["keys"].replace(", ", ","), c["value"], c["type"], c["title"], c["description"]) for c in exported] == [
        (c["keys"].replace(", ", ","), c["value"], c["type"], c["title"], c["description"]) for c in AI_DUNGEON_CARDS
    ]


def test_a_card_file_with_one_bad_card_imports_nothing(alice_api):
    adventure = alice_api.post("/api/adventures/", {"title": "Lore"}, format="json").json()
    bad = AI_DUNGEON_CARDS + [{"keys": 5, "value": "x"}]
    response = alice_api.post(f"/api/adventures/{adventure['id']}/cards/import/", bad, format="json")
    assert response.status_code == 400 and "card #5" in response.json()["detail"]
    assert StoryCard.objects.count() == 0


def story_of(adventure, *texts):
    root = Branch.objects.get(pk=adventure.head_branch_id)
    for text in texts:
        writes.place(adventure_id=adventure.pk, branch_id=root.pk, kind="story", text=text)
    return list(Action.objects.filter(adventure=adventure).order_by("depth"))


def test_cards_enter_on_whole_word_keys_any_case_and_say_which_key(alice):
    adventure = story_create(owner_id=alice.pk, title="t", opening="Start.")
    card = StoryCard.objects.create(adventure=adventure, name="Eldon", keys=["wizard", "Eldon"], entry="Old wizard.")
    StoryCard.objects.create(adventure=adventure, name="Cat", keys=["cat"], entry="A cat.")
    story = story_of(adventure, "The WIZARD waves. A catapult fires.")
    ctx = builder.build(
        adventure=adventure,
        story=story,
        cards=list(adventure.cards.all()),
        memories=[],
        context_tokens=2000,
        model="gpt-4o",
    )
    cards_part = next(p for p in ctx.parts if p.name == "cards")
    assert [(i["id"], i["key"]) for i in cards_part.items] == [(card.pk, "wizard")]
    assert "catapult" not in cards_part.text and "A cat." not in cards_part.text


def test_cards_take_at_most_40_percent_of_the_flexible_budget(alice):
    adventure = story_create(owner_id=alice.pk, title="t", opening="Start.")
    for n in range(30):
        StoryCard.objects.create(adventure=adventure, name=f"Card{n}", keys=[f"k{n}"], entry="lore " * 60)
    story = story_of(adventure, " ".join(f"k{n}" for n in range(30)))
    ctx = builder.build(
        adventure=adventure,
        story=story,
        cards=list(adventure.cards.all()),
        memories=[],
        context_tokens=1000,
        model="gpt-4o",
    )
    cards_part = next(p for p in ctx.parts if p.name == "cards")
    fixed = sum(p.tokens for p in ctx.parts if p.name in {"instructions", "plot_essentials", "summary"})
    assert cards_part.tokens <= 0.4 * (1000 - fixed)
    assert any(not i["included"] for i in cards_part.items), "the cards that did not fit are listed as left out"


def test_the_context_fits_the_budget_keeps_the_newest_story_and_places_the_note(alice):
    """The older order (the adventure's memories_before_story); the prefix-cache layout is in
    tests/stories/test_prompt_layout.py."""
    adventure = story_create(
        memories_before_story=True,
        owner_id=alice.pk,
        title="t",
        opening="Start.",
        authors_note="Be terse.",
        plot_essentials="A heist.",
        persona_name="Kit",
        persona_pronouns="they/them",
    )
    story = story_of(adventure, *[f"Paragraph number {n}. " + "words " * 40 for n in range(60)])
    memories = [MemoryItem(id=1, text="Kit stole a map from the mayor.", similarity=0.91, pinned=False)]
    ctx = builder.build(
        adventure=adventure, story=story, cards=[], memories=memories, context_tokens=1500, model="gpt-4o"
    )
    assert ctx.total_tokens <= 1500
    assert [p.name for p in ctx.parts] == ["instructions", "plot_essentials", "memories", "story", "authors_note"]
    story_part = next(p for p in ctx.parts if p.name == "story")
    assert "Paragraph number 59." in story_part.text and "Paragraph number 0." not in story_part.text
    assert story_part.items[0]["dropped"] > 0 and "did not fit" in story_part.reason
    user = ctx.messages[-1]["content"].split("\n\n")
    assert user[-4] == "[Author's note: Be terse.]", "the note sits three actions from the end"
    assert "Kit (they/them)" in ctx.messages[0]["content"]
    assert "Kit stole a map" in ctx.messages[0]["content"]
    assert ctx.encoding == "o200k_base"


def test_unknown_models_count_with_cl100k(alice):
    adventure = story_create(owner_id=alice.pk, title="t", opening="Start.")
    ctx = builder.build(
        adventure=adventure,
        story=story_of(adventure),
        cards=[],
        memories=[],
        context_tokens=1000,
        model="my-local-llama",
    )
    assert ctx.encoding == "cl100k_base"


def test_player_actions_render_in_second_person(alice):
    adventure = story_create(owner_id=alice.pk, title="t", opening="Start.")
    root = adventure.head_branch_id
    do = writes.place(adventure_id=adventure.pk, branch_id=root, kind="do", text="draw your sword")
    say = writes.place(adventure_id=adventure.pk, branch_id=root, kind="say", text="Halt!")
    assert voice.told(do) == "> You draw your sword"
    assert voice.told(say) == '> You say "Halt!"'


def test_an_act_is_told_the_same_every_turn_whatever_its_length(alice):
    """Acts are told from a kept rendering (every turn tells hundreds of them): the second telling
    of an act is the first's, and a long act is still told in the second person."""
    adventure = story_create(owner_id=alice.pk, title="t", opening="Start.")
    root = adventure.head_branch_id
    short = writes.place(adventure_id=adventure.pk, branch_id=root, kind="do", text="I lift my lantern")
    long = writes.place(
        adventure_id=adventure.pk, branch_id=root, kind="do", text="I climb the wall. " + "It is high. " * 60
    )
    for _ in range(2):
        assert voice.told(short) == "> You lift your lantern"
        assert voice.told(long).startswith("> You climb the wall. It is high.")
        assert len(voice.told(long)) > voice.YOU_DO_KEPT_CHARS
    again = writes.place(adventure_id=adventure.pk, branch_id=root, kind="say", text="I lift my lantern")
    assert voice.told(again) == '> You say "I lift my lantern"', "a kept act is kept for acts of its kind only"
