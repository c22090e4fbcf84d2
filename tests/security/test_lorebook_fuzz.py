"""A SillyTavern character card, a SillyTavern lorebook and a NovelAI lorebook changed in any one
place are a 201 or a 400 that says where, never a 5xx, and a refused file stores nothing."""

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stories.models import Adventure, StoryCard
from tests.security.test_import_fuzz import _DROP, HOSTILE, _paths, _set
from tests.stories.test_field_formats import MAREN_V2

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
    url = "/api/adventures/import/character/" if route == "card" else f"/api/adventures/{aid}/cards/import/book/"
    assert alice_api.post(url, document, format="json").status_code == 201, "the document is valid"
    places = [path for path, _ in _paths(document) if path]

    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(place=st.sampled_from(places), value=st.sampled_from(HOSTILE + [_DROP]))
    def one_change(place, value):
        changed = copy.deepcopy(document)
        _set(changed, place, value)
        before = _counts()
        response = alice_api.post(url, json.dumps(changed), content_type="application/json")
        where = f"{'.'.join(map(str, place))} = {str(value)[:30]!r}"
        assert response.status_code in (201, 400), f"{where} -> {response.status_code}"
        if response.status_code == 400:
            assert "Traceback" not in response.json()["detail"], where
            assert _counts() == before, f"{where}: a refused file stored rows"

    one_change()
