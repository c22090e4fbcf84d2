"""An import document changed in any one place is a 201 or a 400 that says where, never a 5xx,
and a refused document stores nothing. Sixteen one-field changes answered 500 before the
document had a declared schema (a depth past the column, a date that does not exist, an id
given as a list, a number past 1e308)."""

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory.models import CardClaim, CardProposal, Memory
from stories.models import Action, Adventure, Branch, StoryCard
from tests.support.examples import examples

pytestmark = pytest.mark.django_db

HOSTILE = [
    None,
    True,
    False,
    0,
    -1,
    -5,
    1,
    2**31,
    2**40,
    2**63,
    10**20,
    10**30,
    1.5,
    -0.0,
    1e300,
    "",
    "abc",
    "12",
    "2020-02-30T10:00:00",
    "2020-13-45T99:99:99",
    "2026-01-01T10:00:00Z",
    [],
    [1],
    [1, 2],
    [[1, 2]],
    {},
    {"a": 1},
    "x" * 5000,
]


def _paths(value, here=()):
    """Every place in a document: (path, value) for each key and item, containers included."""
    yield here, value
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, here + (key,))
    elif isinstance(value, list):
        for i, child in enumerate(value[:3]):  # the first few of each list stand for the rest
            yield from _paths(child, here + (i,))


def _set(doc, path, value):
    target = doc
    for part in path[:-1]:
        target = target[part]
    if value is _DROP:
        del target[path[-1]]
    else:
        target[path[-1]] = value


_DROP = object()


@pytest.fixture
def exported(alice_plays):
    api = alice_plays
    aid = api.post(
        "/api/adventures/", {"title": "Fuzz", "opening": "The gate.", "persona_name": "Mira"}, format="json"
    ).json()["id"]
    api.post(  # before the story: on every path, the fork's too (a card made later is only down its node's paths)
        f"/api/adventures/{aid}/cards/",
        {"type": "character", "name": "Tam", "keys": ["Tam"], "entry": "a guard"},
        format="json",
    )
    for text in ("go in", "look up"):
        assert api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": text}, format="json").status_code == 201
    # the canon's versions ride along: a text and a card changed while the story is played
    api.patch(f"/api/adventures/{aid}/", {"plot_essentials": "The gate is shut at night."}, format="json")
    tam = api.get(f"/api/adventures/{aid}/cards/").json()[0]
    api.patch(f"/api/adventures/{aid}/cards/{tam['id']}/", {"entry": "a guard, asleep"}, format="json")
    story = api.get(f"/api/adventures/{aid}/story/").json()
    rows = story["actions"]
    api.post(f"/api/adventures/{aid}/actions/{rows[1]['id']}/fork/", format="json")
    # and what the story changed on a card (a claim the pass would read) and a name it proposed
    CardClaim.objects.create(
        adventure_id=aid, card_id=tam["id"], action_id=rows[-1]["id"], slot="status", value="asleep", text="Tam sleeps."
    )
    CardProposal.objects.create(adventure_id=aid, name="Pell", keys=["Pell"], evidence=[rows[-1]["id"]])
    doc = api.get(f"/api/adventures/{aid}/export/").json()
    head = doc["head"]
    doc["memories"] = doc.get("memories") or []
    doc["memories"].append(
        {
            "branch": head,
            "depth": 1,
            "source_start": None,
            "source_end": None,
            "text": "a gate",
            "character": None,
            "kind": "",
            "importance": 0.5,
            "pinned": True,
            "forgotten": False,
            "stale": False,
            "edited": True,
            "offline": False,
        }
    )
    assert api.post("/api/adventures/import/", doc, format="json").status_code == 202, "the document is valid"
    return api, doc


def _counts():
    return [m.objects.count() for m in (Adventure, Branch, Action, StoryCard, Memory, CardClaim, CardProposal)]


def test_every_one_place_change_to_an_import_is_a_201_or_a_400_naming_it(exported):
    api, doc = exported
    places = [path for path, _ in _paths(doc) if path]
    assert len(places) > 80

    @settings(max_examples=examples(250), deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(place=st.sampled_from(places), value=st.sampled_from(HOSTILE + [_DROP]))
    def one_change(place, value):
        changed = copy.deepcopy(doc)
        _set(changed, place, value)
        before = _counts()
        response = api.post("/api/adventures/import/", json.dumps(changed), content_type="application/json")
        where = f"{'.'.join(map(str, place))} = {str(value)[:30]!r}"
        assert response.status_code in (202, 400, 429), f"{where} -> {response.status_code}"
        if response.status_code == 400:
            detail = response.json()["detail"]
            assert detail.startswith("import: ") and "Traceback" not in detail, f"{where}: {detail}"
            assert _counts() == before, f"{where}: a refused import stored rows"

    one_change()


@pytest.mark.parametrize(
    "place, value, says",
    [
        (("branches", 0, "tip_depth"), "abc", "branches[0].tip_depth"),
        (("branches", 0, "tip_depth"), [1], "branches[0].tip_depth"),
        (("branches", 0, "tip_depth"), -5, "branches[0].tip_depth"),
        (("branches", 0, "tip_depth"), 10**30, "branches[0].tip_depth"),
        (("actions", 0, "depth"), 2**31, "actions[0].depth"),
        (("actions", 0, "depth"), 2**40, "actions[0].depth"),
        (("actions", 0, "edited_at"), "2020-02-30T10:00:00", "actions[0].edited_at"),
        (("actions", 0, "edited_at"), "2020-13-45T99:99:99", "actions[0].edited_at"),
        (("head",), [1], "head"),
        (("branches", 0, "parent"), {"id": 1}, "branches[0].parent"),
        (("actions", 0, "branch"), [1], "actions[0].branch"),
        (("actions", 0, "kind"), {"k": 1}, "actions[0].kind"),
        (("memories", 0, "branch"), [], "memories[0].branch"),
        (("branches", 1, "lineage"), [{"a": 1}], "branches[1].lineage"),
        (("branches", 1, "lineage"), [[1, 2, 3]], "branches[1].lineage"),
        (("branches", 1, "fork_depth"), 10**20, "branches[1].fork_depth"),
        (("actions", 0, "live"), "yes", "actions[0].live"),
        (("memories", 0, "importance"), "0.5", "memories[0].importance"),
        # a null item in a list that may itself be null (DRF let the item through as None)
        (("memories", 0), None, "memories[0]"),
        (("cards", 0), None, "cards[0]"),
        (("branches", 0), None, "branches[0]"),
        (("actions", 0), None, "actions[0]"),
    ],
)
def test_the_shapes_that_answered_500_are_400s_naming_the_field(exported, place, value, says):
    api, doc = exported
    changed = copy.deepcopy(doc)
    _set(changed, place, value)
    before = _counts()
    response = api.post("/api/adventures/import/", changed, format="json")
    assert response.status_code == 400, response.content
    assert says in response.json()["detail"], response.json()
    assert _counts() == before
