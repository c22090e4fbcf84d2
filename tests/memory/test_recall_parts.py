"""Each part of an agent recall's score, taken alone (every other part's weights at 0), ranks the
memory it is about first, over a whole bank and over candidates alike: a part added to the declared
list without its weights, or whose SQL adds the wrong thing, fails here. Asked through the recall API."""

from datetime import timedelta

import pytest
from django.utils import timezone

from memory.agents.agent_recall_conf import PART_WEIGHTS, WEIGHTS
from memory.agents.agent_recall_sql import SCORE_PARTS
from memory.models import Agent, AgentMemory
from tests.support.agents import embed_all

pytestmark = pytest.mark.django_db

# what each part is about: the memory it should rank first (by its content's start), for a query
# ("" asks with no query: kind, importance and recency count in full then), with other recall fields;
# ``with_`` keeps the parts a derived part is made from (their own share is not compared)
CASES = {
    "partner": {"ask": {"query": "", "partner": "cy"}, "first": "Cy mentioned"},
    "location": {"ask": {"query": "", "location": "mill"}, "first": "A heron"},
    "kind": {"ask": {"query": ""}, "first": "I told"},
    "importance": {"ask": {"query": ""}, "first": "The dam"},
    "recency": {"ask": {"query": ""}, "first": "Just now"},
    "vector": {"ask": {"query": "a young cat"}, "first": "The kitten"},
    "text": {"ask": {"query": "zeppelin"}, "first": "A zeppelin"},
    "named": {"ask": {"query": "what did dee do"}, "first": "Dee fixed"},
    "context": {"ask": {"query": "lantern"}, "first": "It is hanging", "with_": ("text",)},
    "time": {"ask": {"query": "When did the market open?"}, "first": "The market opened yesterday"},
    "hop": {"ask": {"query": "a young cat"}, "first": "The kitten", "then": "Our old tomcat", "with_": ("vector",)},
    "asks": {"ask": {"query": ""}, "last": ("Did you see", "Where did you leave")},
}


@pytest.fixture
def bank(world):
    """bo's memories, each standing out in one way only (old, ordinary importance, heard, no place)."""
    now = timezone.now()
    bo = Agent.objects.create(world=world, external_id="bo")
    Agent.objects.create(world=world, external_id="dee")
    plain = {"kind": "heard", "importance": 0.3, "partner": "ann", "occurred_at": now - timedelta(days=30)}
    rows = [
        ("Cy mentioned the apple harvest was poor.", {"partner": "cy"}),
        ("A heron stood in the shallows all morning.", {"location": "mill"}),
        ("I told Ann about the broken fence.", {"kind": "say"}),
        ("The dam above the village is cracking.", {"importance": 0.95}),
        ("Just now the church bell rang twice.", {"occurred_at": now - timedelta(minutes=5)}),
        ("The kitten sleeps on the warm windowsill.", {"partner": "eve", "occurred_at": now - timedelta(days=40)}),
        (
            "Our old tomcat dozed on the warm windowsill too.",
            {"partner": "eve", "occurred_at": now - timedelta(days=50)},
        ),
        ("The tax office closed its doors early.", {"partner": "eve", "occurred_at": now - timedelta(days=55)}),
        ("A zeppelin drifted over the harbour.", {"partner": "eve", "occurred_at": now - timedelta(days=45)}),
        ("Dee fixed the squeaky gate.", {"actor": "dee", "partner": "eve", "occurred_at": now - timedelta(days=35)}),
        ("Where did you leave the lantern?", {"partner": "fay", "occurred_at": now - timedelta(days=20, minutes=2)}),
        ("It is hanging by the back door.", {"partner": "fay", "occurred_at": now - timedelta(days=20)}),
        ("The market opened yesterday at dawn.", {"partner": "gil", "occurred_at": now - timedelta(days=25)}),
        ("Did you see the fox by the well?", {"partner": "hal", "occurred_at": now - timedelta(days=28)}),
    ]
    for content, fields in rows:
        AgentMemory.objects.create(agent=bo, world=world, content=content, **{**plain, **fields})
    embed_all(world)
    return bo


def _alone(part: str, keep: tuple = ()) -> dict:
    """The recall weights with every part but ``part`` (and ``keep``) at 0."""
    off = {}
    for other, names in PART_WEIGHTS.items():
        if other == part or other in keep:
            continue
        for name in names:
            off[name] = {kind: 0.0 for kind in WEIGHTS[name]} if isinstance(WEIGHTS[name], dict) else 0.0
    return off


def test_every_score_part_has_its_weights_and_a_case():
    assert list(PART_WEIGHTS) == list(SCORE_PARTS) == list(CASES)
    assert all(name in WEIGHTS for names in PART_WEIGHTS.values() for name in names)


@pytest.mark.parametrize("path", ["exact", "candidates"])
@pytest.mark.parametrize("part", SCORE_PARTS)
def test_a_score_part_alone_ranks_what_it_is_about_first(agent_api, world, settings, bank, part, path):
    case = CASES[part]
    weights = {"hop": 1.0} if part == "hop" else {}
    settings.AGENT_RECALL = {
        **settings.AGENT_RECALL,
        **_alone(part, case.get("with_", ())),
        **weights,
        "exact_up_to": 1000 if path == "exact" else 0,
    }
    response = agent_api.post(
        f"/api/worlds/{world.pk}/agents/bo/recall/",
        {**case["ask"], "limit": 50, "cooldown_seconds": 0, "token_budget": 4000, "since": "1900-01-01T00:00:00Z"},
        format="json",
    )
    assert response.status_code == 200, response.content
    found = response.json()["memories"]
    assert len(found) == 14
    by_part = sorted(found, key=lambda m: -m["parts"][part])
    if "last" in case:  # a part that takes away: what it is about comes last
        last = found[-len(case["last"]) :]
        assert all(m["content"].startswith(case["last"]) for m in last), [m["content"] for m in found]
        assert all(m["parts"][part] < 0 for m in last), [(m["content"], m["parts"]) for m in found]
        assert all(m["parts"][part] == 0 for m in found[: -len(last)]), [(m["content"], m["parts"]) for m in found]
        return
    assert by_part[0]["content"].startswith(case["first"]), [(m["content"], m["parts"][part]) for m in by_part]
    assert by_part[0]["parts"][part] > by_part[1]["parts"][part] >= 0, [
        (m["content"], m["parts"][part]) for m in by_part
    ]
    if "then" in case:
        assert by_part[1]["content"].startswith(case["then"]), [(m["content"], m["parts"][part]) for m in by_part]
    if not case.get("with_"):  # the part alone: the answer's order is the part's
        assert found[0]["content"].startswith(case["first"]), [(m["content"], m["parts"]) for m in found[:3]]
        others = {p for p in SCORE_PARTS if p != part}
        assert all(m["parts"][p] == 0 for m in found for p in others), [m["parts"] for m in found]
