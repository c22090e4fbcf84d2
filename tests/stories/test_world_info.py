"""World Info as SillyTavern's lorebooks carry it, honoured by the prompt: secondary keys with their
logic, a chance to fire, recursion, and where an entry is told (before the story, inside it at a
depth, or with the world info after it). A SillyTavern lorebook brings these rules in, the cards'
API edits them, and they leave again in the lorebook export and the adventure's export."""

import pytest

from stories.adventures import story_create
from stories.models import StoryCard
from stories.prompt import builder
from stories.prompt.triggers import scan
from tests.stories.test_cards_and_context import story_of

pytestmark = pytest.mark.django_db


def _card(**fields):
    return StoryCard(name=fields.pop("name", "Entry"), keys=fields.pop("keys", ["tower"]), entry="lore", **fields)


@pytest.mark.parametrize(
    "logic, text, fires",
    [
        ("and_any", "the tower at night", True),
        ("and_any", "the tower at dawn", False),
        ("not_all", "the tower at night in the storm", False),
        ("not_all", "the tower at night", True),
        ("not_any", "the tower at night", False),
        ("not_any", "the tower at dawn", True),
        ("and_all", "the tower at night in the storm", True),
        ("and_all", "the tower at night", False),
        ("and_all", "a quiet night in a storm", False),  # no primary key: never
    ],
)
def test_secondary_keys_follow_their_logic(logic, text, fires):
    card = _card(secondary_keys=["night", "storm"], selective_logic=logic)
    found = scan(cards=[card], text=text)
    assert bool(found.hits) is fires
    if not fires and "tower" in text:
        assert "secondary keys" in found.misses[id(card)]


def test_a_card_fires_on_its_share_of_turns_and_the_same_turn_rolls_the_same():
    card = StoryCard(pk=7, name="Omen", keys=["crow"], entry="An omen.", probability=30)
    fired = [bool(scan(cards=[card], text="a crow calls", turn=turn).hits) for turn in range(1, 2001)]
    assert 0.25 < sum(fired) / len(fired) < 0.35
    assert all(bool(scan(cards=[card], text="a crow calls", turn=t).hits) is fired[t - 1] for t in range(1, 50))
    never = StoryCard(pk=8, name="Never", keys=["crow"], entry="x", probability=0)
    assert not scan(cards=[never], text="a crow", turn=3).hits
    assert "fires on 0 % of turns" in scan(cards=[never], text="a crow", turn=3).misses[8]


def test_entries_trigger_entries_unless_they_prevent_or_exclude_recursion():
    king = StoryCard(pk=1, name="King", keys=["king"], entry="The king wears the Iron Crown.", prevent_recursion=False)
    crown = StoryCard(
        pk=2, name="Iron Crown", keys=["Iron Crown"], entry="Forged by the smith Hal.", prevent_recursion=False
    )
    hal = StoryCard(pk=3, name="Hal", keys=["Hal"], entry="A smith.")
    hidden = StoryCard(pk=4, name="Vault", keys=["smith"], entry="Under the forge.", exclude_recursion=True)
    hits = scan(cards=[king, crown, hal, hidden], text="The king rides out.").hits
    assert [(h.card.name, h.via) for h in hits] == [("King", ""), ("Iron Crown", "King"), ("Hal", "Iron Crown")]
    king.prevent_recursion = True
    assert [h.card.name for h in scan(cards=[king, crown, hal], text="The king rides out.").hits] == ["King"]


def test_the_prompt_tells_each_card_where_its_position_says(alice):
    adventure = story_create(owner_id=alice.pk, title="t", opening="Start.")
    StoryCard.objects.create(
        adventure=adventure, name="Old Law", keys=["law"], entry="LAW-BEFORE", position="before_story"
    )
    StoryCard.objects.create(
        adventure=adventure, name="Tide", keys=["tide"], entry="TIDE-DEPTH", position="at_depth", depth=2
    )
    StoryCard.objects.create(adventure=adventure, name="Gull", keys=["gull"], entry="GULL-AFTER")
    story = story_of(adventure, "The law is old.", "The tide turns.", "A gull cries.", "Night falls.")
    for older in (False, True):
        adventure.memories_before_story = older
        ctx = builder.build(
            adventure=adventure,
            story=story,
            cards=list(adventure.cards.all()),
            memories=[],
            context_tokens=4000,
            model="gpt-4o",
        )
        system, user = ctx.messages[0]["content"], ctx.messages[1]["content"]
        assert "Old Law: LAW-BEFORE" in system and "LAW-BEFORE" not in user
        blocks = user.split("\n\n")
        at = blocks.index("[World info]\nTide: TIDE-DEPTH")
        assert blocks[at + 1 : at + 3] == ["A gull cries.", "Night falls."], blocks
        # with the world info: after the story, or in the system message in the older order
        assert "Gull: GULL-AFTER" in (system if older else user.split("Night falls.")[1])
        names = {p.name: p for p in ctx.parts}
        assert names["cards_at_depth"].items[0]["depth"] == 2 and "before the story" in names["cards_before"].reason


SILLYTAVERN_BOOK = {
    "entries": {
        "0": {
            "uid": 0,
            "key": ["tower"],
            "keysecondary": ["night"],
            "selective": True,
            "selectiveLogic": 2,
            "comment": "Tower by day",
            "content": "The tower is empty by day.",
            "position": 4,
            "depth": 1,
            "probability": 50,
            "useProbability": True,
            "excludeRecursion": True,
            "preventRecursion": False,
        },
        "1": {
            "uid": 1,
            "key": ["moat"],
            "keysecondary": ["bridge"],
            "selective": False,
            "comment": "Moat",
            "content": "A moat.",
            "position": 0,
            "probability": 80,
            "useProbability": False,
        },
    }
}


def test_a_sillytavern_book_brings_its_rules_and_they_leave_again(alice_api):
    aid = alice_api.post("/api/adventures/", {"title": "Keep", "opening": "A keep."}, format="json").json()["id"]
    made = alice_api.post(f"/api/adventures/{aid}/cards/import/book/", SILLYTAVERN_BOOK, format="json")
    assert made.status_code == 201, made.json()
    cards = {c["name"]: c for c in made.json()["cards"]}
    tower, moat = cards["Tower by day"], cards["Moat"]
    assert (tower["secondary_keys"], tower["selective_logic"]) == (["night"], "not_any")
    assert (tower["position"], tower["depth"], tower["probability"]) == ("at_depth", 1, 50)
    assert (tower["exclude_recursion"], tower["prevent_recursion"]) == (True, False)
    assert (moat["secondary_keys"], moat["position"], moat["probability"]) == ([], "before_story", 100)
    said = {line["what"] for line in made.json()["report"]}
    assert "secondary keys: the file does not use them (selective is off)" in said

    edited = alice_api.patch(
        f"/api/adventures/{aid}/cards/{moat['id']}/", {"probability": 25, "selective_logic": "and_all"}, format="json"
    )
    assert edited.status_code == 200 and edited.json()["probability"] == 25
    bad = alice_api.patch(f"/api/adventures/{aid}/cards/{moat['id']}/", {"probability": 101}, format="json")
    assert bad.status_code == 400, bad.json()
    assert "less than or equal to 100" in " ".join(bad.json()["probability"])

    book = alice_api.get(f"/api/adventures/{aid}/cards/export/?type=sillytavern").json()
    entry = next(e for e in book["entries"].values() if e["comment"] == "Tower by day")
    assert (entry["keysecondary"], entry["selectiveLogic"], entry["position"], entry["depth"]) == (["night"], 2, 4, 1)
    assert (entry["probability"], entry["useProbability"], entry["excludeRecursion"]) == (50, True, True)
    again = alice_api.post(f"/api/adventures/{aid}/cards/import/book/", book, format="json").json()["cards"]
    twin = next(c for c in again if c["name"] == "Tower by day")
    assert {k: twin[k] for k in ("secondary_keys", "selective_logic", "position", "depth", "probability")} == {
        k: tower[k] for k in ("secondary_keys", "selective_logic", "position", "depth", "probability")
    }, "a round trip keeps the rules"

    exported = alice_api.get(f"/api/adventures/{aid}/export/").json()
    copy = alice_api.post("/api/adventures/import/", exported, format="json").json()
    kept = {c["name"]: c for c in alice_api.get(f"/api/adventures/{copy['adventure_id']}/cards/").json()}
    assert kept["Tower by day"]["position"] == "at_depth" and kept["Moat"]["probability"] == 25
