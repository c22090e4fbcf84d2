"""The formats of the field come in: SillyTavern character cards (V2 as a PNG, V3 as JSON) start an
adventure, SillyTavern and NovelAI lorebooks become story cards, and the cards leave as a lorebook;
what has no equivalent here is reported, a file to fix is a 400 naming the place and stores nothing."""

import base64
import json
import struct
import zlib

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from stories.models import Adventure, StoryCard

pytestmark = pytest.mark.django_db


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def png(**texts) -> bytes:
    """A 1x1 PNG with the given tEXt chunks (keyword -> JSON object, base64 as the cards carry it)."""
    header = chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
    pixels = chunk(b"IDAT", zlib.compress(b"\x00\xff\xff\xff"))
    carried = b"".join(
        chunk(b"tEXt", key.encode() + b"\0" + base64.b64encode(json.dumps(value).encode()))
        for key, value in texts.items()
    )
    return b"\x89PNG\r\n\x1a\n" + header + carried + pixels + chunk(b"IEND", b"")


BOOK = {
    "name": "Vell lore",
    "entries": [
        {
            "keys": ["lighthouse", "the light"],
            "content": "The lighthouse has been dark for a year.",
            "enabled": True,
            "name": "Lighthouse",
            "secondary_keys": ["night"],
            "extensions": {"position": 4, "depth": 2, "probability": 60, "selectiveLogic": 1},
        },
        {
            "keys": [],
            "content": "Vell is a fishing town where nobody speaks of the sea.",
            "constant": True,
            "enabled": True,
        },
        {"keys": ["smugglers"], "content": "A ring of smugglers.", "enabled": False},
    ],
}
MAREN_V2 = {
    "spec": "chara_card_v2",
    "spec_version": "2.0",
    "data": {
        "name": "Maren",
        "description": "{{char}} keeps the lamps of Vell.",
        "personality": "Quiet, watchful, kind to strangers.",
        "scenario": "{{user}} arrives in Vell on the last ferry.",
        "first_mes": "*{{char}} lifts her lantern.* You must be the one they sent for, {{user}}.",
        "mes_example": "<START>\n{{char}}: The sea gives nothing back.",
        "alternate_greetings": ["*Maren is asleep at her desk.*"],
        "system_prompt": "Write as {{char}}, in a hushed, eerie voice.",
        "post_history_instructions": "Keep {{char}} in character.",
        "tags": ["horror"],
        "creator": "someone",
        "character_book": BOOK,
        "extensions": {"talkativeness": "0.5"},
    },
}


def upload(name, content, kind):
    return {"file": SimpleUploadedFile(name, content, content_type=kind)}


def test_a_v2_png_character_card_starts_an_adventure_and_says_what_it_did_not_carry(owner, alice_api):
    made = alice_api.post(
        "/api/adventures/import/character/?persona_name=Wren",
        upload("maren.png", png(chara=MAREN_V2), "image/png"),
        format="multipart",
    )
    assert made.status_code == 201, made.json()
    adventure = made.json()["adventure"]
    assert adventure["title"] == "Maren" and adventure["persona_name"] == "Wren"
    assert "Maren keeps the lamps of Vell." in adventure["plot_essentials"]
    assert "Wren arrives in Vell" in adventure["plot_essentials"]
    assert "nobody speaks of the sea" in adventure["plot_essentials"], "the always-on entry"
    assert adventure["ai_instructions"] == "Write as Maren, in a hushed, eerie voice."
    assert adventure["authors_note"] == "Keep Maren in character."
    story = alice_api.get(f"/api/adventures/{adventure['id']}/story/").json()["actions"]
    assert story[0]["text"] == "*Maren lifts her lantern.* You must be the one they sent for, Wren."
    cards = {c["name"]: c for c in alice_api.get(f"/api/adventures/{adventure['id']}/cards/").json()}
    assert cards["Maren"]["type"] == "character" and cards["Maren"]["in_cast"] is True
    assert "watchful" in cards["Maren"]["entry"]
    assert cards["Lighthouse"]["keys"] == ["lighthouse", "the light"]
    assert "smugglers" not in str(cards), "a disabled entry is not carried"
    assert cards["Lighthouse"]["secondary_keys"] == ["night"] and cards["Lighthouse"]["selective_logic"] == "not_all"
    assert (cards["Lighthouse"]["position"], cards["Lighthouse"]["depth"], cards["Lighthouse"]["probability"]) == (
        "at_depth",
        2,
        60,
    )
    assert cards["Maren"]["examples"] == "<START>\nMaren: The sea gives nothing back."
    said = " | ".join(f"{line['place']}: {line['what']}" for line in made.json()["report"])
    for expected in (
        "data.mes_example: carried: Maren's example dialogue",
        "data.alternate_greetings: 2 greetings: the story opens with its first message",
        "disabled",
        "always on",
        "extensions",
    ):
        assert expected in said, (expected, said)


def test_a_v3_json_card_in_a_ccv3_chunk_wins_over_its_v2_chunk(owner, alice_api):
    v3 = {"spec": "chara_card_v3", "spec_version": "3.0", "data": {**MAREN_V2["data"], "name": "Maren the Third"}}
    made = alice_api.post(
        "/api/adventures/import/character/?persona_name=Wren",
        upload("maren.png", png(chara=MAREN_V2, ccv3=v3), "image/png"),
        format="multipart",
    )
    assert made.status_code == 201 and made.json()["adventure"]["title"] == "Maren the Third"
    as_json = alice_api.post("/api/adventures/import/character/?persona_name=Wren", v3, format="json")
    assert as_json.status_code == 201, as_json.json()


def test_sillytavern_and_novelai_lorebooks_become_story_cards_and_leave_as_a_lorebook(owner, alice_api):
    aid = alice_api.post("/api/adventures/", {"title": "Vell", "plot_essentials": "A town."}, format="json").json()[
        "id"
    ]
    st_book = {
        "entries": {
            "0": {
                "uid": 0,
                "key": ["ferry"],
                "keysecondary": [],
                "comment": "The ferry",
                "content": "It sails at dusk.",
                "constant": False,
                "disable": False,
            },
            "1": {
                "uid": 1,
                "key": [],
                "comment": "Weather",
                "content": "It always rains.",
                "constant": True,
                "disable": False,
            },
        }
    }
    st = alice_api.post(
        f"/api/adventures/{aid}/cards/import/book/",
        upload("vell.json", json.dumps(st_book).encode(), "application/json"),
        format="multipart",
    )
    assert st.status_code == 201, st.json()
    assert [(c["name"], c["keys"]) for c in st.json()["cards"]] == [("The ferry", ["ferry"])]
    assert "It always rains." in alice_api.get(f"/api/adventures/{aid}/").json()["plot_essentials"]
    nai = {
        "lorebookVersion": 5,
        "entries": [{"displayName": "Harbor", "keys": ["harbor"], "text": "Grey water.", "enabled": True}],
    }
    assert alice_api.post(f"/api/adventures/{aid}/cards/import/book/", nai, format="json").status_code == 201

    out = alice_api.get(f"/api/adventures/{aid}/cards/export/?type=sillytavern").json()
    assert {e["comment"]: e["key"] for e in out["entries"].values()} == {"The ferry": ["ferry"], "Harbor": ["harbor"]}
    other = alice_api.post("/api/adventures/", {"title": "Copy"}, format="json").json()["id"]
    again = alice_api.post(f"/api/adventures/{other}/cards/import/book/", out, format="json")
    assert [c["name"] for c in again.json()["cards"]] == ["The ferry", "Harbor"], "a round trip keeps every card"


@pytest.mark.parametrize(
    "document, says",
    [
        ({"entries": {"0": {"key": ["a"], "content": "x" * 4001}}}, "entries.0.content"),
        ({"entries": {"0": {"key": "a" * 81, "content": "x"}}}, "entries.0.key"),
        ({"entries": {"0": "not an entry"}}, "entries.0"),
        ({"entries": [{"keys": [1, 2], "content": "x"}]}, "entries[0].keys"),
        ({"lorebookVersion": 5, "entries": [{"text": 5}]}, "entries[0].text"),
        ({"entries": {"0": {"key": ["a"], "content": "x", "constant": "yes"}}}, "entries.0.constant"),
        ({"entries": [{"keys": ["a"], "content": "x\u0000y"}]}, "entries[0].content"),
        ({"nothing": "here"}, "expected a lorebook"),
        ("just text", "expected a lorebook"),
    ],
)
def test_a_lorebook_to_fix_is_a_400_naming_the_place_and_stores_nothing(owner, alice_api, document, says):
    aid = alice_api.post("/api/adventures/", {"title": "Vell"}, format="json").json()["id"]
    refused = alice_api.post(f"/api/adventures/{aid}/cards/import/book/", document, format="json")
    assert refused.status_code == 400 and says in refused.json()["detail"], refused.json()
    assert not StoryCard.objects.filter(adventure_id=aid).exists()


@pytest.mark.parametrize(
    "name, content, says",
    [
        ("plain.png", png(), "no character card"),
        ("broken.png", b"\x89PNG\r\n\x1a\n" + chunk(b"tEXt", b"chara\0!!!not base64 json"), "not readable JSON"),
        ("noise.bin", b"\x00\x01\x02", "neither a PNG character card nor a JSON file"),
        ("nameless.json", json.dumps({"spec": "chara_card_v2", "data": {"name": " "}}).encode(), "data.name"),
        ("no-data.json", json.dumps({"spec": "chara_card_v2", "data": "Maren"}).encode(), "data"),
        (
            "bad-book.json",
            json.dumps(
                {"spec": "chara_card_v3", "data": {"name": "A", "character_book": {"entries": [{"content": 7}]}}}
            ).encode(),
            "data.character_book.entries[0].content",
        ),
        (
            "long.json",
            json.dumps({"spec": "chara_card_v2", "data": {"name": "A", "first_mes": "x" * 4001}}).encode(),
            "data.first_mes",
        ),
    ],
)
def test_a_character_card_to_fix_is_a_400_and_no_adventure_is_made(owner, alice_api, name, content, says):
    refused = alice_api.post(
        "/api/adventures/import/character/?persona_name=Wren",
        upload(name, content, "application/octet-stream"),
        format="multipart",
    )
    assert refused.status_code == 400 and says in refused.json()["detail"], refused.json()
    assert not Adventure.objects.exists()


def test_another_players_adventure_takes_no_lorebook(owner, alice_api, bob_api):
    aid = alice_api.post("/api/adventures/", {"title": "Vell"}, format="json").json()["id"]
    assert bob_api.post(f"/api/adventures/{aid}/cards/import/book/", {"entries": {}}, format="json").status_code == 404
