"""A world cannot be used to exhaust the site: a request writes a bounded
number of memories, a world holds a bounded number, a token sends a bounded
number of events a minute, and an export streams in bounded memory."""

import json

import pytest
from rest_framework.test import APIClient

from memory import agent_events, worlds
from memory.models import Agent, AgentMemory, World
from tests.conftest import api_client_for

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
    over = client.post(f"/api/worlds/{world.pk}/events/",
                       {"events": [{"type": "observe", "actor": "agent9", "text": f"x {k}"} for k in range(30)]},
                       format="json")
    assert over.status_code == 409 and "limit of 100" in over.json()["detail"]
    note = client.post(f"/api/worlds/{world.pk}/agents/agent0/memories/", {"content": "one more"}, format="json")
    assert note.status_code == 201, "one more still fits"
    assert AgentMemory.objects.filter(world=world).count() == held + 1
    assert not Agent.objects.filter(external_id="agent9").exists()


def test_events_per_minute_are_limited_per_token_and_a_batch_counts_each(world, settings):
    settings.WORLD_EVENTS_PER_MINUTE = 5
    first, second = token_client(world), token_client(world)
    url = f"/api/worlds/{world.pk}/events/"
    batch = {"events": [{"type": "observe", "actor": "ann", "text": f"a {k}"} for k in range(3)]}
    assert first.post(url, batch, format="json").status_code == 201
    assert first.post(url, {"type": "observe", "actor": "ann", "text": "b"}, format="json").status_code == 201
    over = first.post(url, batch, format="json")
    assert over.status_code == 429 and int(over["Retry-After"]) > 0 and "at most 5 a minute" in over.json()["detail"]
    note = first.post(f"/api/worlds/{world.pk}/agents/ann/memories/", {"content": "n"}, format="json")
    assert note.status_code == 201, "the fifth event of the minute"
    assert first.post(f"/api/worlds/{world.pk}/agents/ann/memories/", {"content": "n"},
                      format="json").status_code == 429
    assert second.post(url, batch, format="json").status_code == 201, "another token has its own allowance"
    assert AgentMemory.objects.filter(world=world).count() == 3 + 1 + 1 + 3


def test_an_export_streams_with_a_fixed_number_of_queries(world, alice, django_assert_max_num_queries):
    owner = api_client_for(alice)
    events = [{"type": "say", "actor": f"a{n % 30}", "target": f"a{(n + 1) % 30}", "text": f"line {n}"}
              for n in range(300)]
    assert owner.post(f"/api/worlds/{world.pk}/events/", {"events": events}, format="json").status_code == 201
    with django_assert_max_num_queries(8):  # auth, the world, agents, one cursor over the memories
        response = owner.get(f"/api/worlds/{world.pk}/export/")
        assert response.streaming and response["Content-Type"] == "application/json"
        body = json.loads(b"".join(response.streaming_content))
    assert body["world"] == {"id": world.pk, "name": "Smallville"}
    assert [a["external_id"] for a in body["agents"]] == sorted(f"a{n}" for n in range(30))
    assert sum(len(a["memories"]) for a in body["agents"]) == AgentMemory.objects.filter(world=world).count() == 600
    first = body["agents"][0]["memories"][0]
    assert set(first) >= {"id", "kind", "content", "occurred_at", "pinned", "retrieval_count", "consolidated_into"}
