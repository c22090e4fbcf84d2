"""bob gets 404 on every route with alice's ids, for every method, and nothing changes."""

import re

import pytest
from django.urls import URLPattern, get_resolver

from memory.models import AgentMemory, Cursor, Memory, World, WorldToken
from stories.models import Action, Adventure, AISettings, Branch, StoryCard

pytestmark = pytest.mark.django_db

METHODS = ["get", "post", "put", "patch", "delete"]


def story_routes():
    """Every URL pattern under /api/ that takes an id, with its parameter names."""
    out = []

    def walk(patterns, prefix):
        for p in patterns:
            if isinstance(p, URLPattern):
                route = prefix + str(p.pattern)
                params = re.findall(r"<(?:int|str):(\w+)>", route)
                if route.startswith("api/") and params:
                    out.append((route, params))
            else:
                walk(p.url_patterns, prefix + str(p.pattern))

    walk(get_resolver().url_patterns, "")
    return out


def snapshot():
    return (
        list(Adventure.objects.order_by("id").values()),
        list(Branch.objects.order_by("id").values()),
        list(Action.objects.order_by("id").values()),
        list(StoryCard.objects.order_by("id").values()),
        list(AISettings.objects.order_by("id").values()),
        list(Memory.objects.order_by("id").values("id", "text", "pinned", "forgotten", "depth", "branch_id")),
        list(Cursor.objects.order_by("id").values()),
        list(World.objects.order_by("id").values()),
        list(WorldToken.objects.order_by("id").values("id", "revoked_at")),
        list(AgentMemory.objects.order_by("id").values("id", "content", "pinned")),
    )


@pytest.fixture
def alices_world(alice_plays):
    api = alice_plays
    adventure = api.post("/api/adventures/", {
        "title": "Alice's secret", "opening": "You hold the key.",
        "cards": [{"name": "Key", "keys": ["key"], "entry": "A silver key."}],
    }, format="json").json()
    aid = adventure["id"]
    api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "turn the key"}, format="json")
    action = api.get(f"/api/adventures/{aid}/story/").json()["actions"][-1]
    branch = api.post(f"/api/adventures/{aid}/actions/{action['id']}/fork/", {"name": "b", "checkout": False},
                      format="json").json()
    card = api.get(f"/api/adventures/{aid}/cards/").json()[0]
    memory = api.post(f"/api/adventures/{aid}/memories/", {"text": "Alice hid the key."}, format="json").json()
    world = api.post("/api/worlds/", {"name": "Alice's town"}, format="json").json()
    token = api.post(f"/api/worlds/{world['id']}/tokens/", {"name": "t"}, format="json").json()
    api.post(f"/api/worlds/{world['id']}/events/", {"type": "say", "actor": "ann", "text": "hi"}, format="json")
    return {"adventure_id": aid, "action_id": action["id"], "branch_id": branch["id"], "card_id": card["id"],
            "memory_id": memory["id"], "world_id": world["id"], "token_id": token["id"], "agent_id": "ann"}


def test_bob_gets_404_on_every_route_with_alices_ids_and_no_write_lands(alices_world, bob_api):
    routes = story_routes()
    assert len(routes) >= 22, "the sweep must see the story and memory APIs"
    assert any("memories/<int:memory_id>" in r for r, _ in routes)
    assert any("worlds/<int:world_id>/agents/<str:agent_id>/recall/" in r for r, _ in routes)
    before = snapshot()
    tried = 0
    for route, params in routes:
        url = "/" + re.sub(r"<(?:int|str):(\w+)>", lambda m: str(alices_world[m.group(1)]), route)
        for method in METHODS:
            body = {"text": "pwned", "mode": "do", "name": "pwned", "take_id": alices_world["action_id"],
                    "title": "pwned"}
            response = getattr(bob_api, method)(url, body, format="json")
            tried += 1
            assert response.status_code in (404, 405), f"{method.upper()} {url} -> {response.status_code}"
            if response.status_code == 404:
                assert response.json() == {"detail": "Not found."}, "a 404 must not hint the object exists"
    assert tried == len(routes) * len(METHODS)
    assert snapshot() == before


def test_bob_sees_none_of_alices_adventures_or_settings(alices_world, bob_api):
    assert bob_api.get("/api/adventures/").json() == []
    assert bob_api.get("/api/settings/").json()["endpoint_url"] == ""
    assert bob_api.get("/api/debug/requests/").json() == []


def test_a_take_or_branch_of_another_adventure_is_refused(alices_world, alice_plays):
    other = alice_plays.post("/api/adventures/", {"title": "Other", "opening": "Elsewhere."}, format="json").json()
    opening = alice_plays.get(f"/api/adventures/{other['id']}/story/").json()["actions"][0]
    select = alice_plays.post(f"/api/adventures/{other['id']}/actions/{opening['id']}/takes/",
                              {"take_id": alices_world["action_id"]}, format="json")
    assert select.status_code == 400 and "take_id" in select.json()["detail"]
    checkout = alice_plays.post(f"/api/adventures/{other['id']}/branches/{alices_world['branch_id']}/checkout/")
    assert checkout.status_code == 404


def test_anonymous_requests_are_refused(client):
    assert client.get("/api/adventures/").status_code in (401, 403)
    assert client.get("/api/settings/").status_code in (401, 403)
