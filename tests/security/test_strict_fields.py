"""A request takes what the API's schema says and nothing DRF would turn into it: a flag is true or
false (not 0, 1 or "yes"), a number is a JSON number (not "1.1"), a text is within its bound as sent,
an import's fields are what its format says; anything else is a 400 naming the field, and nothing
stored changes. The schema says the same (the fuzz checks both ways on every operation)."""

import pytest
from drf_spectacular.generators import SchemaGenerator

from stories.models import StoryCard
from tests.security import test_fuzz as fuzz

pytestmark = pytest.mark.django_db


def _cases(w):
    a, agent = f"/api/adventures/{w['adventure_id']}", f"/api/worlds/{w['world_id']}/agents/{w['agent_id']}"
    return [
        ("patch", f"{a}/memories/{w['memory_id']}/", {"forgotten": 0}, "forgotten"),
        ("patch", f"{a}/memories/{w['memory_id']}/", {"pinned": "true"}, "pinned"),
        ("post", f"{a}/cards/", {"name": "Mara", "in_cast": 1}, "in_cast"),
        ("post", f"{a}/actions/{w['action_id']}/fork/", {"checkout": "false"}, "checkout"),
        ("post", f"{agent}/memories/", {"content": "The mill burned.", "pinned": 0}, "pinned"),
        ("patch", f"{agent}/memories/{w['agent_memory_id']}/", {"importance": "0.9"}, "importance"),
        ("patch", f"{agent}/memories/{w['agent_memory_id']}/", {"pinned": 1}, "pinned"),
        ("patch", "/api/settings/", {"repetition_penalty": "1.1"}, "repetition_penalty"),
        ("patch", "/api/settings/", {"top_k": "40"}, "top_k"),
        ("post", f"{agent}/recall/", {"query": "mill", "kinds": []}, "kinds"),
        ("post", f"{agent}/recall/", {"query": "mill", "limit": "3"}, "limit"),
        ("post", "/api/adventures/", {"title": " " + "T" * 200}, "title"),
    ]


def _state(api, w):
    a, agent = f"/api/adventures/{w['adventure_id']}", f"/api/worlds/{w['world_id']}/agents/{w['agent_id']}"
    return [
        api.get(f"{a}/memories/").json(),
        api.get(f"{a}/cards/").json(),
        api.get(f"{a}/branches/").json(),
        api.get(f"{agent}/memories/").json(),
        api.get("/api/settings/").json(),
        api.get("/api/adventures/").json(),
    ]


def test_a_flag_or_a_number_sent_as_anything_else_is_a_400_naming_it_and_nothing_changes(alices_world, alice_plays):
    before = _state(alice_plays, alices_world)
    for method, path, body, field in _cases(alices_world):
        answer = getattr(alice_plays, method)(path, body, format="json")
        assert answer.status_code == 400, (path, body, answer.status_code, answer.content[:300])
        assert field in answer.content.decode(), (path, body, answer.json())
    assert _state(alice_plays, alices_world) == before


def test_the_same_flags_and_numbers_sent_as_the_schema_says_are_taken(alices_world, alice_plays):
    w = alices_world
    a, agent = f"/api/adventures/{w['adventure_id']}", f"/api/worlds/{w['world_id']}/agents/{w['agent_id']}"
    assert alice_plays.patch(f"{a}/memories/{w['memory_id']}/", {"pinned": True}, format="json").json()["pinned"]
    card = alice_plays.post(f"{a}/cards/", {"name": "Mara", "in_cast": False}, format="json").json()
    assert card["in_cast"] is False
    changed = alice_plays.patch(f"{agent}/memories/{w['agent_memory_id']}/", {"importance": 1}, format="json")
    assert changed.json()["importance"] == 1.0
    assert alice_plays.patch("/api/settings/", {"repetition_penalty": 1.1}, format="json").json()[
        "repetition_penalty"
    ] == pytest.approx(1.1)
    assert alice_plays.post("/api/adventures/", {"title": " " + "T" * 199}, format="json").json()["title"] == "T" * 199


def test_an_ai_dungeon_card_over_its_bounds_or_of_the_wrong_type_is_a_400_and_no_card_is_made(
    alices_world, alice_plays
):
    path = f"/api/adventures/{alices_world['adventure_id']}/cards/import/"
    good = {"title": "Mill", "keys": ["mill"], "value": "The mill by the ford.", "type": "location"}
    cards = StoryCard.objects.filter(adventure_id=alices_world["adventure_id"]).count()
    for bad, says in (
        ({"description": "d" * 20_001}, "description is over"),
        ({"title": "t" * 101}, "title is over"),
        ({"description": {}}, "must be text"),
        ({"title": {}}, "must be text"),
        ({"type": 3}, "type must be text"),
    ):
        answer = alice_plays.post(path, {"storyCards": [good, {**good, **bad}]}, format="json")
        assert answer.status_code == 400 and says in answer.json()["detail"], (bad, answer.json())
        assert "card #2" in answer.json()["detail"]
    assert StoryCard.objects.filter(adventure_id=alices_world["adventure_id"]).count() == cards
    # what AI Dungeon itself writes: a card with no description carries null, any other type is "other"
    made = alice_plays.post(path, {"storyCards": [{**good, "description": None, "type": "vehicle"}]}, format="json")
    assert made.status_code == 201, made.json()
    assert made.json()[0]["notes"] == "" and made.json()[0]["type"] == "other"


def test_the_fuzz_asks_every_operation_to_take_what_its_schema_allows_but_the_few_it_names():
    schema = fuzz.schema_now()
    config = schema.config
    checked, exempt = set(), set()
    for result in schema.get_all_operations():
        operation = result.ok()
        checks = config.checks_config_for(operation=operation)
        (checked if checks.positive_data_acceptance.enabled else exempt).add((operation.method.upper(), operation.path))
    assert exempt == set(fuzz.SCHEMA_CANNOT_SAY)
    assert ("POST", "/api/adventures/") in checked and len(checked) > 80


def _lenient(field, where: str, found: list[str]) -> None:
    """DRF's own fields that turn what was sent into what the schema says (0 into false, "1.1" into a
    number, 12 into "12"), at any depth of an input serializer."""
    from rest_framework import serializers

    lenient = (
        serializers.BooleanField,
        serializers.FloatField,
        serializers.IntegerField,
        serializers.CharField,
        serializers.ChoiceField,
        serializers.DateTimeField,
    )
    if getattr(field, "read_only", False):
        return
    if type(field) in lenient:
        found.append(f"{where}: {type(field).__name__}")
    if isinstance(field, serializers.ListSerializer):
        _lenient(field.child, f"{where}[]", found)
    elif isinstance(field, serializers.Serializer):
        for name, child in field.fields.items():
            _lenient(child, f"{where}.{name}", found)
    elif isinstance(field, (serializers.ListField, serializers.DictField)):
        _lenient(field.child, f"{where}[]", found)


def test_every_request_body_field_takes_only_what_its_schema_says():
    from rest_framework import serializers

    generator = SchemaGenerator()
    generator.get_schema(request=None, public=True)
    found: list[str] = []
    bodies = 0
    for component in generator.registry._components.values():
        if component.name.endswith("Request") and isinstance(component.object, serializers.BaseSerializer):
            bodies += 1
            _lenient(component.object, component.name, found)
    assert bodies > 40
    assert not found, "use config.serializer_fields' strict fields here:\n" + "\n".join(sorted(set(found)))
