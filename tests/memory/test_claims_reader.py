"""The offline claims reader, sentence by sentence: what a narrator states outright about a card is
read as a change of the right slot; what only suggests one (a plan, a threat, a rumour, a dream, a
lie, a pretence, sleep, a wound, anything in quotes) changes nothing."""

import pytest

from memory.story.claims_reader import read_block
from stories.models import Action, StoryCard

CARDS = [
    StoryCard(pk=1, type="character", name="Bram", keys=["Bram", "the blacksmith"]),
    StoryCard(pk=2, type="character", name="Ostrava", keys=["Captain Ostrava"]),
    StoryCard(pk=3, type="place", name="the mill", keys=["mill"]),
    StoryCard(pk=4, type="character", name="Maud", keys=["Maud"]),
    StoryCard(pk=5, type="item", name="the silver key", keys=["silver key"]),
    StoryCard(pk=6, type="place", name="Greywater", keys=[]),
]
NAMES = {c.pk: c.name for c in CARDS}


def read(*texts, standing=None):
    actions = [Action(pk=n, kind="ai", text=t, depth=n) for n, t in enumerate(texts, start=1)]
    return [
        (NAMES[r.card_id], r.slot, r.value)
        for r in read_block(actions=actions, cards=CARDS, name="Mira", standing=standing)
    ]


@pytest.mark.parametrize(
    "text, card, slot, word",
    [
        ("Bram dies before dawn.", "Bram", "status", "dead"),
        ("By morning Bram had died of his burns.", "Bram", "status", "dead"),
        ("Ostrava lies dead in the mud of the yard.", "Ostrava", "status", "dead"),
        ("The healer pulls the blanket over Bram's face.", "Bram", "status", "dead"),
        ("They bury Bram under the old oak at dusk.", "Bram", "status", "dead"),
        ("Bram's funeral is held in the rain.", "Bram", "status", "dead"),
        ("Captain Ostrava, the last of her line, is slain on the bridge.", "Ostrava", "status", "dead"),
        ("A crossbow bolt takes Maud in the throat, and she falls dead.", "Maud", "status", "dead"),
        ("The guards find the body of Bram in the canal.", "Bram", "status", "dead"),
        ("Maud breathes her last in the arms of her daughter.", "Maud", "status", "dead"),
        ("The surgeon pronounces Bram dead.", "Bram", "status", "dead"),
        ("Bram is pronounced dead at noon.", "Bram", "status", "dead"),
        ("Ostrava goes missing in the marshes.", "Ostrava", "status", "missing"),
        ("Maud is arrested by the river watch.", "Maud", "status", "arrested"),
        ("Bram leaves for Greywater at first light.", "Bram", "whereabouts", "Greywater"),
        ("Ostrava arrives in Greywater with twenty riders.", "Ostrava", "whereabouts", "Greywater"),
        ("Maud sets out for Greywater alone.", "Maud", "whereabouts", "Greywater"),
        ("Bram hands the silver key to Maud.", "Maud", "holdings", "has the silver key"),
        ("Maud steals the silver key from Bram.", "Bram", "holdings", "lost"),
        ("Mira gives Ostrava the silver key.", "Ostrava", "holdings", "has the silver key"),
        ("Bram loses the silver key in the river.", "Bram", "holdings", "lost"),
        ("The silver key shatters on the stones.", "the silver key", "status", "destroyed"),
        ("Maud is crowned Queen of the Marsh.", "Maud", "role", "Queen of the Marsh"),
        ("The council names Ostrava Warden of the River.", "Ostrava", "role", "Warden of the River"),
        ("Bram becomes the new captain of the watch.", "Bram", "role", "captain of the watch"),
        ("Ostrava is stripped of her rank.", "Ostrava", "role", "stripped"),
        ("Maud swears fealty to the Iron Company.", "Maud", "allegiance", "Iron Company"),
        ("Bram has joined the Red Banner.", "Bram", "allegiance", "Red Banner"),
        ("Ostrava betrays the Iron Company and flees.", "Ostrava", "allegiance", "broke with"),
        ("Maud marries Bram in the chapel.", "Maud", "relations", "married to Bram"),
        ("By dawn the mill has burned to the ground.", "the mill", "status", "destroyed"),
        ("Raiders burn the mill to ashes.", "the mill", "status", "destroyed"),
        ("The mill lies in ruins.", "the mill", "status", "destroyed"),
        ("Maud, the innkeeper, pours the ale.", "Maud", "alias", "the innkeeper"),
    ],
)
def test_a_change_stated_outright_is_read(text, card, slot, word):
    found = read(text)
    assert any(c == card and s == slot and word.lower() in v.lower() for c, s, v in found), found


@pytest.mark.parametrize(
    "text",
    [
        "Bram will leave for Greywater at dawn.",
        "Ostrava plans to burn the mill.",
        '"I\'ll kill you, Maud," Bram growls.',
        "Folk say Bram drowned in the river.",
        "Maud says that Bram is dead.",
        "In her dream, Bram dies in the fire. She wakes screaming.",
        "Bram sleeps like the dead.",
        "Bram is badly wounded, bleeding into the straw.",
        "Ostrava pretends to die, sprawled in the road.",
        "If the mill burns, we are ruined.",
        "Bram would have died without the healer.",
        "Bram must have died in the fire.",
        "Maud lies to the guard: Ostrava is dead, she says.",
        "Is Bram dead?",
        "Bram did not die in the fire.",
        "Ostrava, disguised as a priest, is arrested.",
        "Rumours spread that the mill has burned down.",
        "Ostrava threatens to hand the silver key to the Iron Company.",
        "Maud nearly drowns in the ford.",
        "Bram tries to take the silver key from Maud.",
        "A letter says Bram has joined the Red Banner.",
        "Ostrava hopes to be named Warden of the River.",
        "In the play, Bram dies in the third act.",
        "Bram remembers how the mill burned to the ground.",
    ],
)
def test_what_only_suggests_a_change_changes_nothing(text):
    assert read(text) == []


def test_a_dream_lasts_until_the_dreamer_wakes_and_the_next_passage_is_awake():
    assert read("You dream of the mill. Bram dies in the flames. Maud weeps.", "Bram dies at noon.") == [
        ("Bram", "status", "dead")
    ]


def test_alive_is_read_only_after_a_death_and_a_standing_value_is_not_read_again():
    assert read("Bram is alive.") == []
    assert read("Bram is alive after all.", standing={(1, "status", ""): "dead"}) == [("Bram", "status", "alive")]
    assert read("Bram dies.", standing={(1, "status", ""): "dead"}) == []


def test_a_pronoun_at_the_start_is_the_last_character_named_and_his_or_her_after_from_the_owner():
    assert read("Bram limps out of the smoke.", "He dies before dawn.") == [("Bram", "status", "dead")]
    assert read("While Maud sleeps, Bram's men take the silver key from her belt.") == [
        ("Maud", "holdings", "lost the silver key")
    ]


@pytest.mark.parametrize(
    "text, card, slot, word",
    [
        ("By nightfall Bram had succumbed to the fever.", "Bram", "status", "dead"),
        ("Maud was cut down by the raiders at the gate.", "Maud", "status", "dead"),
        ("The raiders gunned down Bram in the street.", "Bram", "status", "dead"),
        ("Ostrava took ship for Greywater that night.", "Ostrava", "whereabouts", "Greywater"),
        ("Maud has fled north to Greywater.", "Maud", "whereabouts", "Greywater"),
        ("Bram limped into Greywater at dawn.", "Bram", "whereabouts", "Greywater"),
    ],
)
def test_every_finished_form_of_a_known_verb_is_read(text, card, slot, word):
    found = read(text)
    assert any(c == card and s == slot and word.lower() in v.lower() for c, s, v in found), found


def test_walking_to_a_character_is_no_move_and_dying_is_not_dead_yet():
    assert read("Bram walks to Maud.") == []
    assert read("Bram is dying.") == []
