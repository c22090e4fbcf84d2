"""A scenario document (its export, as import takes it) changed in any one place, and any body a
scenario route takes, answers a 2xx or a 4xx that says what to fix, never a 5xx; a refused
document stores nothing."""

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stories.models import Adventure, Scenario, ScenarioReport, ScenarioVersion, StoryCard
from tests.security.test_import_fuzz import _DROP, HOSTILE, _paths, _set
from tests.support.examples import examples

pytestmark = pytest.mark.django_db

SCENARIO = {
    "title": "Lighthouse ${Keeper name?}",
    "description": "A keeper and a storm.",
    "opening": "The lamp gutters, ${Keeper name?}.",
    "plot_essentials": "Storm season.",
    "ai_instructions": "Second person.",
    "authors_note": "Wind.",
    "tags": ["sea", "storm"],
    "rating": "teen",
    "cover_emoji": "🌊",
    "cover_color": "#102030",
    "cards": [{"type": "character", "name": "Gull", "keys": ["gull"], "entry": "Loud.", "notes": "", "in_cast": True}],
}


def _counts():
    return [m.objects.count() for m in (Scenario, ScenarioVersion, ScenarioReport, Adventure, StoryCard)]


def test_every_one_place_change_to_a_scenario_document_is_a_201_or_a_400(alice_api):
    key = alice_api.post("/api/scenarios/", SCENARIO, format="json").json()["key"]
    document = alice_api.get(f"/api/scenarios/{key}/export/").json()
    assert alice_api.post("/api/scenarios/import/", document, format="json").status_code == 201
    places = [path for path, _ in _paths(document) if path]

    @settings(max_examples=examples(150), deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(place=st.sampled_from(places), value=st.sampled_from(HOSTILE + [_DROP]))
    def one_change(place, value):
        changed = copy.deepcopy(document)
        _set(changed, place, value)
        before = _counts()
        response = alice_api.post("/api/scenarios/import/", json.dumps(changed), content_type="application/json")
        where = f"{'.'.join(map(str, place))} = {str(value)[:30]!r}"
        assert response.status_code in (201, 400), f"{where} -> {response.status_code}"
        if response.status_code == 400:
            assert "Traceback" not in json.dumps(response.json()), where
            assert _counts() == before, f"{where}: a refused document stored rows"

    one_change()


def test_any_json_sent_to_a_scenario_route_is_never_a_5xx(alice_api, bob_api):
    key = alice_api.post("/api/scenarios/", SCENARIO, format="json").json()["key"]
    alice_api.patch(f"/api/scenarios/{key}/", {"visibility": "published"}, format="json")
    routes = [
        (alice_api, "patch", f"/api/scenarios/{key}/"),
        (alice_api, "post", "/api/scenarios/"),
        (bob_api, "post", f"/api/scenarios/{key}/play/"),
        (bob_api, "post", f"/api/scenarios/{key}/report/"),
    ]
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
        max_leaves=12,
    )
    names = st.sampled_from([*SCENARIO, "visibility", "answers", "reason", "text", "Keeper name?"]) | st.text(
        max_size=12
    )

    @settings(max_examples=examples(200), deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(route=st.sampled_from(routes), body=st.dictionaries(names, json_values, max_size=5))
    def any_body(route, body):
        caller, method, url = route
        before = Scenario.objects.get(key=key).current_id
        response = getattr(caller, method)(url, json.dumps(body), content_type="application/json")
        assert response.status_code < 500, f"{method} {url} {body!r} -> {response.status_code}"
        if response.status_code >= 400:
            assert response.json(), "a refusal says why"
            if method == "patch":
                assert Scenario.objects.get(key=key).current_id == before, "a refused change saved a version"

    any_body()
