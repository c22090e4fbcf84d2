"""A player moving from NovelAI or KoboldAI brings their story: a .story file or a KoboldAI save
becomes an adventure (its text the story, the player's parts and the model's apart, its memory the
plot essentials, its author's note, its lorebook or world info the cards), with a report of what
came in and what did not; a broken file is a 400 naming the place and stores nothing."""

import base64
import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stories.models import Adventure, ImportJob
from tests.support.examples import examples

pytestmark = pytest.mark.django_db

NOVELAI = {
    "storyContainerVersion": 1,
    "metadata": {"storyMetadataVersion": 1, "title": "The Lighthouse Keeper", "tags": ["mystery"]},
    "content": {
        "storyContentVersion": 5,
        "settings": {"parameters": {"temperature": 0.72}, "model": "kayra-v1"},
        "story": {
            "version": 2,
            "step": 4,
            "datablocks": [{"nextBlock": [], "dataFragment": {"data": "x", "origin": "root"}}],
            "fragments": [
                {"data": "The lamp at Grey Point had not failed in forty years.", "origin": "root"},
                {"data": " Tonight it flickered.", "origin": "ai"},
                {"data": "\nEdda climbed the stairs with her lantern.", "origin": "user"},
                {"data": " At the top, the glass was cracked", "origin": "ai"},
                {"data": " from the inside.", "origin": "ai"},
            ],
        },
        "context": [
            {"text": "Edda is the keeper of the Grey Point lighthouse. Her brother drowned here.", "contextConfig": {}},
            {"text": "[ Style: slow, eerie, coastal gothic ]", "contextConfig": {}},
        ],
        "lorebook": {
            "lorebookVersion": 4,
            "entries": [
                {"displayName": "Grey Point", "keys": ["Grey Point", "lighthouse"], "text": "A rock at the bay's end."},
                {"displayName": "The Drowned", "keys": ["drowned"], "text": "Voices in the surf.", "enabled": False},
            ],
        },
        "phraseBiasGroups": [{"phrases": []}],
    },
}

KOBOLD_CLASSIC = {
    "gamestarted": True,
    "prompt": "You are a courier crossing the salt flats with a sealed letter.",
    "memory": "The letter must reach the Duke of Amberfall unopened.",
    "authorsnote": "Keep it tense.",
    "anotetemplate": "[Author's note: <|>]",
    "actions": [
        " The wind rises, and you see riders on the horizon.",
        "\n> You hide behind the dune.\n",
        " The riders pass, but one of them stops and looks back.",
    ],
    "actions_metadata": {},
    "worldinfo": [
        {
            "key": "Amberfall, the Duke",
            "keysecondary": "",
            "content": "A mountain city ruled by a cruel duke.",
            "comment": "Amberfall",
            "folder": None,
            "num": 0,
            "init": True,
            "selective": False,
            "constant": False,
        },
        {
            "key": "",
            "keysecondary": "",
            "content": "",
            "comment": "",
            "num": 1,
            "init": False,
            "selective": False,
            "constant": False,
        },
    ],
}

KOBOLD_UNITED = {
    "story_name": "Salt Road",
    "prompt": "The caravan left at dawn.",
    "memory": "",
    "authornote": "",
    "gamestarted": True,
    "actions": {
        "action_count": 2,
        "actions": {
            "0": {
                "Selected Text": " Dust rose behind the wagons.",
                "Options": [{"Text": " A hawk circled.", "Pinned": False}],
            },
            "1": {"Selected Text": "\n> You ride ahead to scout.\n", "Options": []},
        },
    },
    "worldinfo_v2": {
        "entries": {
            "0": {
                "key": ["caravan"],
                "keysecondary": [],
                "content": "Twelve wagons of salt.",
                "title": "The caravan",
                "constant": False,
                "selective": False,
            },
        },
        "folders": {},
    },
}


def _import(api, doc, *, as_file=False):
    if as_file:
        upload = io.BytesIO(json.dumps(doc).encode())
        upload.name = "story.story"
        return api.post("/api/adventures/import/story/", {"file": upload}, format="multipart")
    return api.post("/api/adventures/import/story/", doc, format="json")


def _story(api, adventure_id):
    return [(a["kind"], a["text"]) for a in api.get(f"/api/adventures/{adventure_id}/story/").json()["actions"]]


def test_a_novelai_story_file_arrives_as_an_adventure_with_its_memory_note_and_lorebook(alice_api):
    answer = _import(alice_api, NOVELAI, as_file=True)
    assert answer.status_code == 202, answer.json()
    job = answer.json()["job"]
    assert job["status"] == "done" and answer["Location"] == f"/api/imports/{job['id']}/"
    adventure = alice_api.get(f"/api/adventures/{job['adventure_id']}/").json()
    assert adventure["title"] == "The Lighthouse Keeper"
    assert adventure["plot_essentials"].startswith("Edda is the keeper")
    assert adventure["authors_note"] == "[ Style: slow, eerie, coastal gothic ]"
    assert _story(alice_api, adventure["id"]) == [
        ("start", "The lamp at Grey Point had not failed in forty years."),
        ("ai", " Tonight it flickered."),
        ("story", "\nEdda climbed the stairs with her lantern."),
        ("ai", " At the top, the glass was cracked from the inside."),
    ]
    cards = alice_api.get(f"/api/adventures/{adventure['id']}/cards/").json()
    assert [(c["name"], c["keys"]) for c in cards] == [("Grey Point", ["Grey Point", "lighthouse"])]
    said = {(line["place"], line["what"]) for line in answer.json()["report"]}
    assert ("content.lorebook.entries[1]", "a disabled entry: not carried") in said
    assert ("content.settings", "not carried: NovelAI's own generation settings") in said
    assert ("content.story.datablocks", "not carried: the story's edit history") in said


def test_a_kobold_save_classic_or_united_arrives_with_the_players_actions_apart(alice_api):
    answer = _import(alice_api, KOBOLD_CLASSIC)
    assert answer.status_code == 202, answer.json()
    aid = answer.json()["job"]["adventure_id"]
    adventure = alice_api.get(f"/api/adventures/{aid}/").json()
    assert adventure["title"] == "You are a courier crossing the salt flats with a sealed letter."
    assert adventure["plot_essentials"] == "The letter must reach the Duke of Amberfall unopened."
    assert adventure["authors_note"] == "Keep it tense."
    assert [kind for kind, _ in _story(alice_api, aid)] == ["start", "ai", "story", "ai"]
    cards = alice_api.get(f"/api/adventures/{aid}/cards/").json()
    assert [(c["name"], c["keys"]) for c in cards] == [("Amberfall", ["Amberfall", "the Duke"])]

    answer = _import(alice_api, KOBOLD_UNITED, as_file=True)
    assert answer.status_code == 202, answer.json()
    aid = answer.json()["job"]["adventure_id"]
    assert alice_api.get(f"/api/adventures/{aid}/").json()["title"] == "Salt Road"
    assert _story(alice_api, aid) == [
        ("start", "The caravan left at dawn."),
        ("ai", " Dust rose behind the wagons."),
        ("story", "\n> You ride ahead to scout.\n"),
    ]
    assert [c["name"] for c in alice_api.get(f"/api/adventures/{aid}/cards/").json()] == ["The caravan"]
    assert ("actions[0].Options", "not carried: the other takes offered there") in {
        (line["place"], line["what"]) for line in answer.json()["report"]
    }


def test_a_long_story_is_cut_at_paragraphs_into_this_sites_lengths(alice_api):
    paragraph = "The tide came in over the causeway, slow and grey. " * 20
    doc = {**KOBOLD_CLASSIC, "actions": ["\n\n".join([paragraph] * 8)]}
    answer = _import(alice_api, doc)
    assert answer.status_code == 202, answer.json()
    story = _story(alice_api, answer.json()["job"]["adventure_id"])
    assert len(story) > 2 and all(len(text) <= 4000 for _, text in story)
    assert "".join(text for _, text in story[1:]) == doc["actions"][0], "nothing lost at the cuts"


@pytest.mark.parametrize(
    "doc, says",
    [
        ({**NOVELAI, "storyContainerVersion": 2}, "storyContainerVersion: this site reads version 1"),
        (
            {**NOVELAI, "content": {**NOVELAI["content"], "story": None, "document": "1BQAgqhzZWN0aW9ucw=="}},
            "content.document: NovelAI's document could not be read (the document is cut short)",
        ),
        (
            {**NOVELAI, "content": {**NOVELAI["content"], "story": {"fragments": [{"data": 3}]}}},
            "content.story.fragments[0].data: Not a valid string.",
        ),
        ({**KOBOLD_CLASSIC, "actions": "once upon a time"}, "actions: must be a list of texts"),
        ({**KOBOLD_CLASSIC, "actions": [" ok", 7]}, "actions[1]: must be text"),
        (
            {**KOBOLD_CLASSIC, "authorsnote": "x" * 1001},
            "authorsnote: Ensure this field has no more than 1000 characters.",
        ),
        (
            {**KOBOLD_CLASSIC, "worldinfo": [{"key": ["k" * 81], "content": "x"}]},
            "worldinfo[0].key: a key of at most 80",
        ),
        ({"entries": {}}, "expected a story from another site"),
    ],
)
def test_a_broken_file_is_a_400_naming_the_place_and_stores_nothing(alice_api, doc, says):
    before = (Adventure.objects.count(), ImportJob.objects.count())
    answer = _import(alice_api, doc)
    assert answer.status_code == 400, answer.json()
    assert says in answer.json()["detail"], answer.json()
    assert (Adventure.objects.count(), ImportJob.objects.count()) == before


def test_another_players_story_is_theirs_alone(alice_api, bob_api):
    aid = _import(alice_api, KOBOLD_CLASSIC).json()["job"]["adventure_id"]
    assert bob_api.get(f"/api/adventures/{aid}/").status_code == 404


_text = st.text(max_size=60)
_fragment = st.fixed_dictionaries(
    {"data": st.one_of(_text, st.integers(), st.none()), "origin": st.sampled_from(["root", "ai", "user", "edit", 5])}
)
_any = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), _text), lambda c: st.lists(c, max_size=3))


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(["novelai", "kobold"]),
    parts=st.lists(_fragment, max_size=6),
    memory=st.one_of(_text, st.integers(), st.none()),
    note=st.one_of(_text, st.lists(_text, max_size=2)),
    book=st.one_of(
        _any, st.lists(st.dictionaries(st.sampled_from(["key", "content", "comment", "init"]), _any), max_size=3)
    ),
)
def test_any_shape_of_either_file_is_imported_or_refused_with_a_400_never_a_500(
    alice_api, kind, parts, memory, note, book
):
    if kind == "novelai":
        doc = {
            "storyContainerVersion": 1,
            "metadata": {"title": memory},
            "content": {"story": {"fragments": parts}, "context": [{"text": memory}, {"text": note}], "lorebook": book},
        }
    else:
        doc = {
            "prompt": memory,
            "actions": [p["data"] for p in parts],
            "memory": memory,
            "authorsnote": note,
            "worldinfo": book,
        }
    answer = _import(alice_api, doc)
    assert answer.status_code in (202, 400), answer.content[:300]
    if answer.status_code == 400:
        assert answer.json()["detail"]


# -- NovelAI's newer editor document: MessagePack as msgpackr writes it with NovelAI's options --------


class MsgpackrLike:
    """Writes values as NovelAI's files hold them: structured extensions (20 the document, 30 its
    history, 40 and 41 diffs), records (0x72) and bundled strings (0x62, then 0xc1 n), the texts
    that are not ASCII in the first bundle (n < 0) and the others in the second (n > 0)."""

    def __init__(self):
        self.shapes, self.latin, self.other = {}, [], []

    def document(self, value) -> str:
        """``value`` as NovelAI's document (base64): ext 20, the value with the bundle's mark just
        before its first bundled string (its distance counts from after the mark's 4 bytes to the two
        strings after the value), then the two strings."""
        body = self.encode(value)
        at = body.index(b"\xc1")
        mark = b"\xd6\x62" + (len(body) - at + 4).to_bytes(4, "big")
        bundle = self._str("".join(self.other)) + self._str("".join(self.latin))
        return base64.b64encode(b"\xd4\x14\x00" + body[:at] + mark + body[at:] + bundle).decode()

    @staticmethod
    def _str(text):
        raw = text.encode()
        return (bytes([0xA0 | len(raw)]) if len(raw) < 32 else b"\xdb" + len(raw).to_bytes(4, "big")) + raw

    def encode(self, value) -> bytes:
        if isinstance(value, tuple) and value and value[0] == "ext":
            return bytes([0xD4, value[1], 0]) + self.encode(value[2])
        if isinstance(value, bool):
            return b"\xc3" if value else b"\xc2"
        if isinstance(value, int):
            return bytes([value]) if 0 <= value < 0x40 else b"\xcd" + value.to_bytes(2, "big")
        if isinstance(value, str):
            units = len(value.encode("utf-16-le")) // 2
            if value.isascii():
                self.latin.append(value)
                return b"\xc1" + self.encode(units)
            self.other.append(value)
            return b"\xc1\xd0" + (-units).to_bytes(1, "big", signed=True)
        if isinstance(value, list):
            return bytes([0x90 | len(value)]) + b"".join(self.encode(v) for v in value)
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):  # a record
            shape = tuple(value)
            if shape in self.shapes:
                head = bytes([0x40 + self.shapes[shape]])
            else:
                self.shapes[shape] = len(self.shapes)
                head = bytes([0xD4, 0x72, 0x40 + self.shapes[shape]]) + self.encode(list(shape))
            return head + b"".join(self.encode(v) for v in value.values())
        if isinstance(value, dict):  # a map (keys not all texts: section ids)
            return bytes([0x80 | len(value)]) + b"".join(self.encode(k) + self.encode(v) for k, v in value.items())
        raise TypeError(value)


def _editor_story(sections, order, dirty=None):
    doc = {
        "sections": sections,
        "order": order,
        "history": ("ext", 30, {"root": 0, "current": 0, "nodes": []}),
        "dirtySections": dirty or {},
        "step": 3,
    }
    return {
        "storyContainerVersion": 1,
        "metadata": {"title": "The Glass Orchard"},
        "content": {
            "storyContentVersion": 6,
            "document": MsgpackrLike().document(doc),
            "context": [{"text": "Ilse tends an orchard of glass trees."}, {"text": ""}],
        },
    }


def test_a_story_from_novelais_newer_editor_arrives_with_its_pending_edits(alice_api):
    sections = {
        101: {"type": 1, "text": "The orchard rang in the wind."},
        102: {"type": 1, "text": "Ilse counted the cracked apples: 🍎 three, élan gone."},
        103: {"type": 1, "text": "A stranger waited at the gate."},
        104: {"type": 2},
    }
    dirty = {
        105: {"type": 0, "section": {"type": 1, "text": "She set down her basket."}, "after": 101},
        103: {"type": 1, "diff": ("ext", 40, {"parts": [{"from": 2, "delete": "stranger", "insert": "tall man"}]})},
        101: {"type": 1, "diff": ("ext", 40, {"to": {"type": 1, "text": "The orchard sang in the wind."}})},
        104: {"type": 2},
    }
    answer = _import(alice_api, _editor_story(sections, [101, 102, 103, 104], dirty), as_file=True)
    assert answer.status_code == 202, answer.json()
    aid = answer.json()["job"]["adventure_id"]
    story = _story(alice_api, aid)
    assert story == [
        (
            "start",
            "The orchard sang in the wind.\nShe set down her basket.\n"
            "Ilse counted the cracked apples: 🍎 three, élan gone.\nA tall man waited at the gate.",
        )
    ]
    assert alice_api.get(f"/api/adventures/{aid}/").json()["plot_essentials"] == "Ilse tends an orchard of glass trees."


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(min_value=0, max_value=400), noise=st.binary(max_size=40))
def test_a_damaged_editor_document_is_a_400_never_a_500(alice_api, cut, noise):
    good = _editor_story({7: {"type": 1, "text": "Once."}}, [7])
    raw = base64.b64decode(good["content"]["document"])
    damaged = base64.b64encode(raw[: min(cut, len(raw))] + noise).decode()
    doc = {**good, "content": {**good["content"], "document": damaged}}
    answer = _import(alice_api, doc)
    assert answer.status_code in (202, 400), answer.content[:300]
