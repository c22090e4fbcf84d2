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


# a second inventory, written after the first stories: what the reader learned from it
@pytest.mark.parametrize(
    "text, card, slot, word",
    [
        ("Bram did not survive the night.", "Bram", "status", "dead"),
        ("Bram was found dead in his cell.", "Bram", "status", "dead"),
        ("They laid Bram to rest beside his wife.", "Bram", "status", "dead"),
        ("Ostrava fell in the battle at the ford.", "Ostrava", "status", "dead"),
        ("Bram lost his life in the fire.", "Bram", "status", "dead"),
        ("Bram was killed instantly.", "Bram", "status", "dead"),
        ("The wolves tore Bram apart.", "Bram", "status", "dead"),
        ("Maud took her own life.", "Maud", "status", "dead"),
        ("Ostrava vanished that night and was never seen again.", "Ostrava", "status", "missing"),
        ("Bram was taken captive by the raiders.", "Bram", "status", "missing"),
        ("Maud was thrown into the dungeon.", "Maud", "status", "arrested"),
        ("Bram was set free at dawn.", "Bram", "status", "released"),
        ("Ostrava made her way to Greywater.", "Ostrava", "whereabouts", "Greywater"),
        ("Bram settled in Greywater with his sister.", "Bram", "whereabouts", "Greywater"),
        ("Maud now lives in Greywater.", "Maud", "whereabouts", "Greywater"),
        ("By nightfall Ostrava was in Greywater.", "Ostrava", "whereabouts", "Greywater"),
        ("Bram rode out of town toward Greywater.", "Bram", "whereabouts", "Greywater"),
        ("Maud passed the silver key to Bram.", "Bram", "holdings", "has the silver key"),
        ("Bram slipped the silver key into his pocket.", "Bram", "holdings", "has"),
        ("Ostrava now carries the silver key.", "Ostrava", "holdings", "has"),
        ("The silver key was stolen from Maud during the night.", "Maud", "holdings", "lost"),
        ("Bram sold the silver key to a fence.", "Bram", "holdings", "the silver key"),
        ("Ostrava was promoted to captain.", "Ostrava", "role", "captain"),
        ("Maud took the throne.", "Maud", "role", "monarch"),
        ("Bram was knighted by the queen.", "Bram", "role", "knight"),
        ("Ostrava was made head of the guild.", "Ostrava", "role", "head"),
        ("Maud resigned as mayor.", "Maud", "role", ""),
        ("Bram enlisted in the Iron Company.", "Bram", "allegiance", "Iron Company"),
        ("Ostrava threw in her lot with the Iron Company.", "Ostrava", "allegiance", "Iron Company"),
        ("Maud switched sides and joined the Red Banner.", "Maud", "allegiance", "Red Banner"),
        ("Bram and Maud were married in the spring.", "Bram", "relations", "Maud"),
        ("The mill was reduced to ashes.", "the mill", "status", "destroyed"),
        ("Fire gutted the mill.", "the mill", "status", "destroyed"),
        ("Nothing remained of the mill but charred beams.", "the mill", "status", "destroyed"),
        ("The flood swept the mill away.", "the mill", "status", "destroyed"),
    ],
)
def test_a_narrators_other_ways_of_saying_it_are_read(text, card, slot, word):
    found = read(text)
    assert any(c == card and s == slot and word.lower() in v.lower() for c, s, v in found), found


@pytest.mark.parametrize(
    "text",
    [
        "Bram swore he would kill Maud before the winter was out.",
        "If Ostrava leaves for Greywater, the watch will fall apart.",
        "Bram pretended to be dead until the soldiers passed.",
        "Maud thought Bram had died in the fire.",
        "Everyone believed Ostrava had fled to Greywater.",
        "Bram dreamed of Maud lying dead in the snow.",
        "Maud was nearly killed by the falling beam.",
        "Bram fell asleep in the mill.",
        "Ostrava was badly hurt but still breathing.",
        "Bram lay so still that Maud feared he was dead.",
        "The innkeeper told everyone that Ostrava had married a lord.",
        "Maud wondered whether Bram had reached Greywater.",
        "Ostrava refused the captaincy of the watch.",
        "Bram almost lost the silver key in the river.",
        "Maud threatened to burn the mill to the ground.",
        "Bram disguised himself as a priest and was arrested.",
        "Ostrava told the guard she had come from Greywater.",
        "Bram waited for news of Maud.",
        "The mill creaked in the wind as if it might collapse.",
        "Maud hoped to become the mayor one day.",
        "Bram could have died that night.",
        "Maud played dead on the floor of the barn.",
        "In the old tale, Bram slays the dragon.",
        "Ostrava tried to leave for Greywater but the gates were shut.",
        "Bram refused to give the silver key to Maud.",
        "Maud planned to marry Bram in the spring.",
        "They say the mill burned down years ago.",
        "Bram was knocked out cold.",
        "Maud fainted and lay as if dead.",
        "Ostrava expected to be crowned queen.",
    ],
)
def test_beliefs_refusals_near_misses_and_tales_change_nothing(text):
    assert read(text) == []


def test_a_negation_or_a_modal_hedges_its_own_clause_only():
    assert read("Bram leaves for Greywater and does not come back.") == [("Bram", "whereabouts", "gone to Greywater")]
    assert read("Bram does not die, and Maud weeps.") == []
    assert read("Maud would never forgive him, but Bram dies before dawn.") == [("Bram", "status", "dead")]
    assert read("If Bram dies, Maud dies too.") == [], "a condition hedges the whole sentence"
