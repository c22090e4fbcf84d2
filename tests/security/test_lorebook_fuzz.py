"""A SillyTavern character card, a SillyTavern lorebook and a NovelAI lorebook changed in any one
place are a 201 or a 400 that says where, never a 5xx, and a refused file stores nothing: sent as
a request body, as an uploaded JSON file and inside a PNG card's `chara` chunk alike."""

import base64
import copy
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stories.models import Adventure, StoryCard
from tests.security.test_import_fuzz import _DROP, HOSTILE, _paths, _set
from tests.stories.test_field_formats import MAREN_V2, chunk, png
from tests.support.examples import examples

# what only a file could carry past the body's reader before: NUL, a lone surrogate, NaN
FILE_HOSTILE = ["a\x00b", "\ud800", float("nan"), float("inf")]


def sent(client, url, document, way):
    """``document`` posted as a body, an uploaded JSON file, or inside a PNG card's chunk."""
    raw = json.dumps(document).encode()
    if way == "body":
        return client.post(url, raw, content_type="application/json")
    if way == "png":
        plain = png(chara={})
        raw = plain.replace(
            chunk(b"tEXt", b"chara\0" + base64.b64encode(b"{}")), chunk(b"tEXt", b"chara\0" + base64.b64encode(raw))
        )
    return client.post(url, {"file": SimpleUploadedFile(f"f.{way}", raw)}, format="multipart")


pytestmark = pytest.mark.django_db

ST_BOOK = {
    "entries": {
        "0": {
            "uid": 0,
            "key": ["ferry"],
            "keysecondary": ["dusk"],
            "comment": "The ferry",
            "content": "It sails.",
            "constant": False,
            "disable": False,
            "selective": True,
            "selectiveLogic": 3,
            "position": 4,
            "depth": 2,
            "probability": 60,
            "useProbability": True,
            "excludeRecursion": False,
            "preventRecursion": True,
        },
        "1": {"uid": 1, "key": [], "comment": "Weather", "content": "Rain.", "constant": True, "disable": False},
    }
}
NAI_BOOK = {
    "lorebookVersion": 5,
    "entries": [{"displayName": "Harbor", "keys": ["harbor"], "text": "Grey.", "enabled": True}],
}


def _counts():
    return [m.objects.count() for m in (Adventure, StoryCard)]


@pytest.mark.parametrize("document, route", [(MAREN_V2, "card"), (ST_BOOK, "book"), (NAI_BOOK, "book")])
def test_every_one_place_change_to_a_card_or_lorebook_is_a_201_or_a_400(alice_api, document, route):
    aid = alice_api.post("/api/adventures/", {"title": "Vell"}, format="json").json()["id"]
    url = (
        "/api/adventures/import/character/?persona_name=Wren"
        if route == "card"
        else f"/api/adventures/{aid}/cards/import/book/"
    )
    assert alice_api.post(url, document, format="json").status_code == 201, "the document is valid"
    places = [path for path, _ in _paths(document) if path]

    @settings(max_examples=examples(120), deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(
        place=st.sampled_from(places),
        value=st.sampled_from(HOSTILE + FILE_HOSTILE + [_DROP]),
        way=st.sampled_from(["body", "json", "png"]),
    )
    def one_change(place, value, way):
        changed = copy.deepcopy(document)
        _set(changed, place, value)
        before = _counts()
        response = sent(alice_api, url, changed, way)
        where = f"{way}: {'.'.join(map(str, place))} = {str(value)[:30]!r}"
        assert response.status_code in (201, 400), f"{where} -> {response.status_code}"
        if response.status_code == 400:
            assert "Traceback" not in response.json()["detail"], where
            assert _counts() == before, f"{where}: a refused file stored rows"

    one_change()
