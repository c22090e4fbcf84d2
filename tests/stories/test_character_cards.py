"""A SillyTavern character card whole: its alternate greetings offered as a choice, its example
dialogue kept with the character (and told with it), and the character leaving again as a card
(V2 or V3 JSON, or a PNG carrying both) that SillyTavern's reader takes and this site reads back."""

import base64
import io
import json

import pytest
from PIL import Image

from stories.models import Adventure, StoryCard
from tests.stories.test_field_formats import MAREN_V2, png, upload

pytestmark = pytest.mark.django_db

CARD = {
    "spec": "chara_card_v2",
    "spec_version": "2.0",
    "data": {
        **MAREN_V2["data"],
        "alternate_greetings": ["*{{char}} is asleep at her desk.*", "  ", "The lamp goes out, {{user}}."],
    },
}


def _post(api, card, **query):
    return api.post(
        "/api/adventures/import/character/?" + "&".join(f"{k}={v}" for k, v in query.items()), card, format="json"
    )


def test_a_cards_greetings_are_offered_and_the_one_chosen_opens_the_story(alice_api):
    before = Adventure.objects.count()
    look = _post(alice_api, CARD, preview="true")
    assert look.status_code == 200, look.json()
    assert look.json() == {
        "name": "Maren",
        "greetings": [
            "*Maren lifts her lantern.* You must be the one they sent for, {{user}}.",
            "*Maren is asleep at her desk.*",
            "The lamp goes out, {{user}}.",
        ],
        "persona_needed": True,
    }
    assert Adventure.objects.count() == before, "a preview starts nothing"
    assert (
        _post(alice_api, CARD, preview="true", persona_name="Wren").json()["greetings"][2] == "The lamp goes out, Wren."
    )

    made = _post(alice_api, CARD, greeting=2, persona_name="Wren")
    assert made.status_code == 201, made.json()
    story = alice_api.get(f"/api/adventures/{made.json()['adventure']['id']}/story/").json()["actions"]
    assert [a["text"] for a in story] == ["The lamp goes out, Wren."]
    assert "3 greetings: the story opens with alternate greeting 2" in str(made.json()["report"])
    far = _post(alice_api, CARD, greeting=3, persona_name="Wren")
    assert (
        far.status_code == 400
        and "this card has 3 greetings: choose 0 (its first message) to 2" in far.json()["detail"]
    )


def test_the_example_dialogue_stays_with_the_character_and_is_told_with_it(alice_api, fake_llm):
    alice_api.patch("/api/settings/", {"endpoint_url": fake_llm.url, "model": "m", "api_key": "sk-x"}, format="json")
    made = _post(alice_api, CARD, persona_name="Wren").json()["adventure"]
    maren = StoryCard.objects.get(adventure_id=made["id"], type="character")
    assert maren.examples == "<START>\nMaren: The sea gives nothing back."
    played = alice_api.post(
        f"/api/adventures/{made['id']}/turns/", {"mode": "say", "text": "Hello, Maren"}, format="json"
    )
    assert played.status_code == 201, played.json()
    sent = fake_llm.chat_requests()[-1].body["messages"]
    told = "\n".join(m["content"] for m in sent)
    assert "How Maren speaks (examples):\n<START>\nMaren: The sea gives nothing back." in told


def sillytavern_accepts(card: dict) -> bool:
    """SillyTavern's card check (its TavernCardValidator), as written there: V2 needs the spec, its
    version and every data field; a character book needs its extensions and a list of entries; V3
    needs its spec, a 3.x version and a data object."""
    if card.get("spec") == "chara_card_v3":
        return 3.0 <= float(card.get("spec_version", 0)) < 4.0 and isinstance(card.get("data"), dict)
    if card.get("spec") != "chara_card_v2" or card.get("spec_version") != "2.0":
        return False
    data = card.get("data")
    needed = (
        "name description personality scenario first_mes mes_example creator_notes system_prompt "
        "post_history_instructions alternate_greetings tags creator character_version extensions"
    ).split()
    if not isinstance(data, dict) or any(field not in data for field in needed):
        return False
    book = data.get("character_book")
    return book is None or ("extensions" in book and isinstance(book.get("entries"), list))


def test_a_character_leaves_as_a_card_sillytavern_reads_and_this_site_reads_back(alice_api):
    made = alice_api.post(
        "/api/adventures/import/character/?persona_name=Wren",
        upload("m.png", png(chara=MAREN_V2), "image/png"),
        format="multipart",
    ).json()["adventure"]
    maren = StoryCard.objects.get(adventure_id=made["id"], type="character")
    url = f"/api/adventures/{made['id']}/cards/{maren.pk}/character/"

    for spec in ("v2", "v3"):
        answer = alice_api.get(url + f"?file=json&spec={spec}")
        assert answer.status_code == 200 and answer["Content-Disposition"] == 'attachment; filename="Maren.json"'
        card = json.loads(answer.content)
        assert sillytavern_accepts(card), card
        data = card["data"]
        assert data["name"] == "Maren" and data["mes_example"] == "<START>\nMaren: The sea gives nothing back."
        assert data["first_mes"] == "*Maren lifts her lantern.* You must be the one they sent for, Wren."
        assert data["system_prompt"] == "Write as Maren, in a hushed, eerie voice."
        entry = data["character_book"]["entries"][0]
        assert entry["keys"] == ["lighthouse", "the light"] and entry["secondary_keys"] == ["night"]

    picture = alice_api.get(url)
    assert picture.status_code == 200 and picture["Content-Type"] == "image/png"
    chunks = Image.open(io.BytesIO(picture.content)).text  # the tEXt chunks, as SillyTavern reads them
    v2 = json.loads(base64.b64decode(chunks["chara"]))
    v3 = json.loads(base64.b64decode(chunks["ccv3"]))
    assert sillytavern_accepts(v2) and sillytavern_accepts(v3) and v2["spec"] == "chara_card_v2"

    again = alice_api.post(
        "/api/adventures/import/character/?persona_name=Wren",
        upload("Maren.png", picture.content, "image/png"),
        format="multipart",
    )
    assert again.status_code == 201, again.json()
    twin = StoryCard.objects.get(adventure_id=again.json()["adventure"]["id"], type="character")
    assert (twin.name, twin.examples) == ("Maren", maren.examples)
    lighthouse = StoryCard.objects.get(adventure_id=again.json()["adventure"]["id"], name="Lighthouse")
    assert lighthouse.secondary_keys == ["night"] and lighthouse.keys == ["lighthouse", "the light"]

    place = StoryCard.objects.get(adventure_id=made["id"], name="Lighthouse")
    wrong = alice_api.get(f"/api/adventures/{made['id']}/cards/{place.pk}/character/")
    assert wrong.status_code == 400 and "only a character card" in wrong.json()["detail"]
