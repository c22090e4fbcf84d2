"""A world cannot be used to exhaust the site: a request writes a bounded
number of memories, a world holds a bounded number, a world takes a bounded
number of events a minute (all its tokens together) and holds a bounded number of live tokens, and an export streams in bounded memory."""

import json

import pytest
from rest_framework.test import APIClient

from memory.agents import agent_events, worlds
from memory.models import Agent, AgentMemory, World
from tests.conftest import api_client_for
from tests.support.processes import minute_with_room

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(alice):
    return World.objects.create(owner=alice, name="Smallville", agent_capacity=500)


def token_client(world):
    _, raw = worlds.token_create(world=world)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def test_a_batch_that_would_fan_out_past_the_limit_is_refused_whole(world):
    client = token_client(world)
    crowd = [f"villager{n}" for n in range(agent_events.NEARBY_MAX)]
    events = [{"type": "say", "actor": "ann", "text": f"news {n}", "nearby": crowd} for n in range(60)]
    response = client.post(f"/api/worlds/{world.pk}/events/", {"events": events}, format="json")
    assert response.status_code == 400
    assert f"at most {agent_events.BATCH_MEMORIES_MAX:,} a request" in response.json()["detail"]
    assert not AgentMemory.objects.exists() and not Agent.objects.exists()
    fits = client.post(f"/api/worlds/{world.pk}/events/", {"events": events[:40]}, format="json")
    assert fits.status_code == 201 and fits.json()["memories"] == 40 * 51


def test_a_full_world_refuses_more_memories_and_keeps_what_it_has(world, settings):
    settings.WORLD_MEMORIES_MAX = 100
    client = token_client(world)
    for n in range(3):
        events = [{"type": "observe", "actor": f"agent{n}", "text": f"thing {k}"} for k in range(30)]
        assert client.post(f"/api/worlds/{world.pk}/events/", {"events": events}, format="json").status_code == 201
    held = AgentMemory.objects.filter(world=world).count()
    over = client.post(
        f"/api/worlds/{world.pk}/events/",
        {"events": [{"type": "observe", "actor": "agent9", "text": f"x {k}"} for k in range(30)]},
        format="json",
    )
    assert over.status_code == 409 and "limit of 100" in over.json()["detail"]
    note = client.post(f"/api/worlds/{world.pk}/agents/agent0/memories/", {"content": "one more"}, format="json")
    assert note.status_code == 201, "one more still fits"
    assert AgentMemory.objects.filter(world=world).count() == held + 1
    assert not Agent.objects.filter(external_id="agent9").exists()


def test_events_per_minute_are_limited_per_world_whichever_token_or_the_owner_sends_them(world, alice, settings):
    settings.WORLD_EVENTS_PER_MINUTE = 5
    minute_with_room(10)
    first, second, owner = token_client(world), token_client(world), api_client_for(alice)
    url = f"/api/worlds/{world.pk}/events/"
    batch = {"events": [{"type": "observe", "actor": "ann", "text": f"a {k}"} for k in range(3)]}
    assert first.post(url, batch, format="json").status_code == 201
    assert owner.post(url, {"type": "observe", "actor": "ann", "text": "b"}, format="json").status_code == 201
    over = second.post(url, batch, format="json")
    assert over.status_code == 429, "a fresh token shares the world's allowance"
    assert int(over["Retry-After"]) > 0 and "at most 5 a minute for this world" in over.json()["detail"]
    note = second.post(f"/api/worlds/{world.pk}/agents/ann/memories/", {"content": "n"}, format="json")
    assert note.status_code == 201, "the fifth event of the minute"
    for client in (first, second, owner, token_client(world)):
        assert (
            client.post(f"/api/worlds/{world.pk}/agents/ann/memories/", {"content": "n"}, format="json").status_code
            == 429
        )
    assert AgentMemory.objects.filter(world=world).count() == 3 + 1 + 1
    other = World.objects.create(owner=alice, name="Elsewhere")
    assert token_client(other).post(f"/api/worlds/{other.pk}/events/", batch, format="json").status_code == 201, (
        "another world has its own allowance"
    )


def test_a_world_holds_a_bounded_number_of_live_tokens_and_a_revoked_one_frees_its_place(world, alice, settings):
    settings.WORLD_TOKENS_MAX = 3
    owner = api_client_for(alice)
    url = f"/api/worlds/{world.pk}/tokens/"
    made = [owner.post(url, {"name": f"t{n}"}, format="json") for n in range(3)]
    assert [r.status_code for r in made] == [201, 201, 201]
    refused = owner.post(url, {"name": "one more"}, format="json")
    assert refused.status_code == 409 and refused.json()["error"] == "world_tokens_full"
    assert "its limit is 3" in refused.json()["detail"] and "revoke one" in refused.json()["detail"]
    assert world.tokens.count() == 3, "nothing stored"
    assert owner.delete(f"{url}{made[0].json()['id']}/").status_code == 204
    again = owner.post(url, {"name": "replacement"}, format="json")
    assert again.status_code == 201
    worker = APIClient()
    worker.credentials(HTTP_AUTHORIZATION=f"Bearer {again.json()['token']}")
    assert (
        worker.post(
            f"/api/worlds/{world.pk}/events/", {"type": "observe", "actor": "ann", "text": "ok"}, format="json"
        ).status_code
        == 201
    )


def test_an_export_streams_with_a_fixed_number_of_queries(world, alice, django_assert_max_num_queries):
    owner = api_client_for(alice)
    events = [
        {"type": "say", "actor": f"a{n % 30}", "target": f"a{(n + 1) % 30}", "text": f"line {n}"} for n in range(300)
    ]
    assert owner.post(f"/api/worlds/{world.pk}/events/", {"events": events}, format="json").status_code == 201
    with django_assert_max_num_queries(8):  # auth, the world, agents, one cursor over the memories
        response = owner.get(f"/api/worlds/{world.pk}/export/")
        assert response.streaming and response["Content-Type"] == "application/json"
        body = json.loads(b"".join(response.streaming_content))
    assert body["world"] == {"id": world.pk, "name": "Smallville", "agent_capacity": world.agent_capacity}
    assert [a["external_id"] for a in body["agents"]] == sorted(f"a{n}" for n in range(30))
    assert sum(len(a["memories"]) for a in body["agents"]) == AgentMemory.objects.filter(world=world).count() == 600
    first = body["agents"][0]["memories"][0]
    assert set(first) >= {"id", "kind", "content", "occurred_at", "pinned", "retrieval_count", "consolidated_into"}
