"""A world's export read back into a new world (POST /api/worlds/import/): agents, memories with
their links, pins, retrieval history and fact keys come back; a document changed in any one place is
a 201 or a 400 naming it, never a 5xx, and a refused one stores nothing; only an account imports,
never a world token."""

import copy
import json
from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory.agents import agent_upkeep
from memory.models import Agent, AgentMemory, AgentMemoryKey, World
from tests.conftest import api_client_for
from tests.security.test_import_fuzz import _DROP, HOSTILE, _paths, _set
from tests.support.agents import say
from tests.support.examples import examples

pytestmark = pytest.mark.django_db


def pass_all(world):
    for agent in Agent.objects.filter(world=world):
        while agent_upkeep.agent_upkeep_run(agent_id=agent.pk)["more"]:
            pass


@pytest.fixture
def exported(world, agent_api, alice):
    """alice's world, worked by its agents' passes (embedded, keyed, a run folded), as its export."""
    start = timezone.now() - timedelta(days=2)
    for n in range(6):  # a run the consolidation folds
        say(
            agent_api,
            world,
            "bo",
            "ann",
            f"I sold {n + 2} sacks of wool at the market today.",
            start + timedelta(minutes=n),
        )
    say(agent_api, world, "cy", "ann", "I hid the silver key under the old oak tree.", start + timedelta(hours=5))
    owner = api_client_for(alice)
    key_memory = AgentMemory.objects.get(agent__external_id="ann", content__contains="silver")
    owner.patch(f"/api/worlds/{world.pk}/agents/ann/memories/{key_memory.pk}/", {"pinned": True}, format="json")
    pass_all(world)
    assert AgentMemory.objects.filter(kind="summary").exists() and AgentMemoryKey.objects.exists()
    doc = json.loads(b"".join(owner.get(f"/api/worlds/{world.pk}/export/").streaming_content))
    return owner, doc


def _bank(world):
    """What a world's agents hold, as the owner would compare two worlds."""
    out = set()
    for m in AgentMemory.objects.filter(world=world).select_related("agent", "consolidated_into"):
        out.add(
            (
                m.agent.external_id,
                m.kind,
                m.actor,
                m.partner,
                m.content,
                m.pinned,
                m.occurred_at,
                m.keys_made,
                m.consolidated_into.content if m.consolidated_into else None,
                tuple(m.keys.order_by("id").values_list("text", flat=True)),
            )
        )
    return out


def test_an_export_imports_into_a_new_world_with_everything_it_held(exported, world, agent_api):
    owner, doc = exported
    response = owner.post("/api/worlds/import/", doc, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    copy_ = World.objects.get(pk=body["world"]["id"])
    assert (
        copy_.owner_id == world.owner_id and copy_.name == world.name and copy_.agent_capacity == world.agent_capacity
    )
    assert body["memories"] == AgentMemory.objects.filter(world=world).count()
    assert body["keys"] == AgentMemoryKey.objects.filter(memory__world=world).count() > 0
    assert _bank(copy_) == _bank(world), "agents, memories, links, pins and keys as they were"
    pass_all(copy_)  # the new world's passes embed what an export does not carry
    assert not AgentMemory.objects.filter(world=copy_, embedding=None).exists()
    assert not AgentMemoryKey.objects.filter(memory__world=copy_, embedding=None).exists()
    again = json.loads(b"".join(owner.get(f"/api/worlds/{copy_.pk}/export/").streaming_content))
    strip = lambda d: [  # noqa: E731 (ids and creation times are the new world's own)
        [{k: v for k, v in m.items() if k not in ("id", "created_at", "consolidated_into")} for m in a["memories"]]
        for a in d["agents"]
    ]
    assert strip(again) == strip(doc), "exported again, the same document"


def test_a_world_token_cannot_import_and_a_too_large_bank_is_refused_whole(exported, agent_api):
    owner, doc = exported
    assert agent_api.post("/api/worlds/import/", doc, format="json").status_code == 404
    small = copy.deepcopy(doc)
    small["world"]["agent_capacity"] = 10
    small["agents"][0]["memories"] = [
        {**small["agents"][0]["memories"][0], "id": 10_000 + n, "consolidated_into": None} for n in range(11)
    ]
    worlds_before = World.objects.count()
    refused = owner.post("/api/worlds/import/", small, format="json")
    assert refused.status_code == 400 and "agent_capacity of 10" in refused.json()["detail"]
    assert World.objects.count() == worlds_before, "nothing stored"


def test_a_memory_dated_in_the_far_future_is_refused_naming_it_and_nothing_is_stored(exported):
    """The one rule of a memory's time the schema cannot state (the fuzz skips its acceptance check)."""
    owner, doc = exported
    later = copy.deepcopy(doc)
    later["agents"][0]["memories"][1]["occurred_at"] = "2755-10-06T12:48:53Z"
    before = _counts()
    refused = owner.post("/api/worlds/import/", later, format="json")
    assert refused.status_code == 400
    assert refused.json()["detail"] == "world import: agents[0].memories[1].occurred_at: this time is in the far future"
    assert _counts() == before, "nothing stored"


def test_imports_count_toward_the_accounts_imports_an_hour(exported, settings):
    owner, doc = exported
    settings.IMPORTS_PER_HOUR = 1
    assert owner.post("/api/worlds/import/", doc, format="json").status_code == 201
    refused = owner.post("/api/worlds/import/", doc, format="json")
    assert refused.status_code == 429 and "at most 1 an hour" in refused.json()["detail"]


def _counts():
    return [m.objects.count() for m in (World, Agent, AgentMemory, AgentMemoryKey)]


def test_every_one_place_change_to_a_world_import_is_a_201_or_a_400_naming_it(exported):
    owner, doc = exported
    places = [path for path, _ in _paths(doc) if path]
    assert len(places) > 60

    @settings(max_examples=examples(200), deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(place=st.sampled_from(places), value=st.sampled_from(HOSTILE + [_DROP]))
    def one_change(place, value):
        changed = copy.deepcopy(doc)
        _set(changed, place, value)
        before = _counts()
        response = owner.post("/api/worlds/import/", json.dumps(changed), content_type="application/json")
        where = f"{'.'.join(map(str, place))} = {str(value)[:30]!r}"
        assert response.status_code in (201, 400), f"{where}: {response.status_code} {response.content[:300]}"
        if response.status_code == 400:
            assert response.json()["detail"], where
            assert _counts() == before, f"{where}: a refused document stored something"

    one_change()
