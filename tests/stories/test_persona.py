"""The player's persona: a name, pronouns and a description per account, taken by every new adventure
unless it is given its own; a card's {{user}} is that name (asked for when there is none), a
scenario's "Your name?" answer is the adventure's protagonist, and SillyTavern's macros are filled."""

from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stories.library.macros import Macros
from stories.models import Adventure, StoryCard
from tests.support.examples import examples

pytestmark = pytest.mark.django_db

WHEN = datetime(2026, 3, 5, 14, 7, tzinfo=timezone.utc)  # a Thursday


@pytest.mark.parametrize(
    "written,filled",
    [
        ("Well, well. {{user}}, is it?", "Well, well. Wren, is it?"),
        ("{{User}} and <USER> and {{ user }}", "Wren and Wren and Wren"),
        ("{{char}} / {{Char}} / <BOT> / <char>", "Maren / Maren / Maren / Maren"),
        ("one{{newline}}two", "one\ntwo"),
        ("keep \n{{trim}}\n this", "keepthis"),
        ("a{{noop}}b{{// the author's note to self}}c", "abc"),
        ("{{isodate}} {{isotime}} {{weekday}}", "2026-03-05 14:07 Thursday"),
        ("{{unknown_macro}} stays", "{{unknown_macro}} stays"),
        ("no macros, <b>markup</b>", "no macros, <b>markup</b>"),
    ],
)
def test_the_common_macros_are_filled(written, filled, settings):
    settings.TIME_ZONE = "UTC"
    assert Macros(user="Wren", char="Maren", now=WHEN).fill(written) == filled


def test_random_pick_and_roll_draw_once_the_same_way_for_the_same_text():
    filler = Macros(user="Wren", char="Maren", now=WHEN)
    text = "The door is {{random:red,blue,green}}; the bell {{pick::rings::is silent}}; you roll {{roll:2d6+1}}."
    first = filler.fill(text)
    assert first == filler.fill(text), "the same file imported twice reads the same"
    colour = first.split("The door is ")[1].split(";")[0]
    assert colour in ("red", "blue", "green") and ("rings" in first or "is silent" in first)
    rolled = int(first.rsplit("roll ", 1)[1].rstrip("."))
    assert 3 <= rolled <= 13
    huge = filler.fill("{{roll:100000d100000}}")
    assert huge == "{{roll:100000d100000}}", "a roll past the bound is kept as written, never computed"


def test_unknown_macros_are_kept_and_named_in_the_report():
    filler = Macros(user="Wren", char=None, now=WHEN)
    assert filler.fill("{{char}} sees {{mood}}") == "{{char}} sees {{mood}}"
    (line,) = filler.report("file")
    assert "{{char}}" in line["what"] and "{{mood}}" in line["what"]


def _card(**fields):
    data = {
        "name": "Captain Vey",
        "description": "{{char}} commands the Gull's Lament.",
        "scenario": "{{user}} has stowed away aboard the Gull's Lament.",
        "first_mes": "*{{char}} lowers the lamp.* Well, well. {{user}}, is it?",
        "personality": "Gruff.",
        **fields,
    }
    return {"spec": "chara_card_v2", "spec_version": "2.0", "data": data}


def test_a_card_that_names_the_player_asks_for_a_name_and_stores_nothing_until_given(alice_api):
    asked = alice_api.post("/api/adventures/import/character/", _card(), format="json")
    assert asked.status_code == 400 and asked.json()["error"] == "persona_needed", asked.json()
    assert "persona_name" in asked.json()["detail"]
    assert not Adventure.objects.exists()

    made = alice_api.post("/api/adventures/import/character/?persona_name=Wren", _card(), format="json")
    assert made.status_code == 201, made.json()
    adventure = made.json()["adventure"]
    assert adventure["persona_name"] == "Wren"
    assert "Wren has stowed away" in adventure["plot_essentials"] and "you has" not in adventure["plot_essentials"]
    opening = alice_api.get(f"/api/adventures/{adventure['id']}/story/").json()["actions"][0]["text"]
    assert opening == "*Captain Vey lowers the lamp.* Well, well. Wren, is it?"


def test_the_accounts_persona_fills_a_card_and_every_new_adventure(alice_api):
    saved = alice_api.patch(
        "/api/settings/",
        {"persona_name": "Wren", "persona_pronouns": "they/them", "persona_description": "A runaway cartographer."},
        format="json",
    )
    assert saved.status_code == 200, saved.json()
    assert saved.json()["persona_name"] == "Wren"

    made = alice_api.post("/api/adventures/import/character/", _card(), format="json")
    assert made.status_code == 201, made.json()
    adventure = made.json()["adventure"]
    assert (adventure["persona_name"], adventure["persona_pronouns"]) == ("Wren", "they/them")
    assert adventure["persona_description"] == "A runaway cartographer."

    plain = alice_api.post("/api/adventures/", {"title": "Road", "opening": "Dawn."}, format="json").json()
    assert plain["persona_name"] == "Wren", "a new adventure takes the player's persona"
    own = alice_api.post(
        "/api/adventures/", {"title": "Other", "opening": "Dusk.", "persona_name": "Ash"}, format="json"
    ).json()
    assert own["persona_name"] == "Ash" and own["persona_pronouns"] == "", "one given is the adventure's own"
    named = alice_api.post("/api/adventures/import/character/?persona_name=Kit", _card(), format="json").json()
    assert named["adventure"]["persona_name"] == "Kit", "the name sent with the card wins"


def test_a_lorebook_added_to_an_adventure_fills_its_macros_from_the_adventures_persona(alice_api):
    adventure = alice_api.post(
        "/api/adventures/", {"title": "Vell", "opening": "Fog.", "persona_name": "Wren"}, format="json"
    ).json()
    alice_api.post(
        f"/api/adventures/{adventure['id']}/cards/",
        {"type": "character", "name": "Maren", "keys": ["Maren"], "entry": "The lamp keeper."},
        format="json",
    )
    book = {"entries": {"0": {"uid": 0, "key": ["ferry"], "content": "{{char}} waits for {{user}} at the ferry."}}}
    done = alice_api.post(f"/api/adventures/{adventure['id']}/cards/import/book/", book, format="json")
    assert done.status_code == 201, done.json()
    entry = StoryCard.objects.get(adventure_id=adventure["id"], keys=["ferry"]).entry
    assert entry == "Maren waits for Wren at the ferry."


@settings(max_examples=examples(200), deadline=None, derandomize=True)
@given(st.text(alphabet=st.sampled_from(list("{}<>:/*,d0123456789 abcuserchar\n")), max_size=80))
def test_any_text_of_braces_fills_without_an_error_and_text_without_macros_stays(text):
    filled = Macros(user="Wren", char="Maren", now=WHEN).fill(text)
    assert isinstance(filled, str) and len(filled) <= len(text) * 5 + 20
    if "{{" not in text and "<" not in text:
        assert filled == text
