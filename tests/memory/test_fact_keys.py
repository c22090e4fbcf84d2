"""Fact keys (memory.agents.fact_keys): each agent memory's statements, said plainly with who they are
about, made by the agent's pass (offline, or with the owner's model), matched by recall, and
following their memory through edit, delete and export; another agent's keys never match."""

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from memory.agents import agent_recall, agent_upkeep, fact_keys
from memory.models import Agent, AgentMemory, AgentMemoryKey
from tests.conftest import api_client_for
from tests.support.agents import say
from tests.support.fake_llm import Reply

pytestmark = pytest.mark.django_db


def upkeep(world):
    """The agent pass's work for every agent of the world, short of consolidating."""
    for agent in Agent.objects.filter(world=world):
        agent_upkeep.agent_catch_up(agent_id=agent.pk)


def memories_of(owner, world, agent):
    response = owner.get(f"/api/worlds/{world.pk}/agents/{agent}/memories/")
    assert response.status_code == 200, response.content
    return response.json()


# a long message whose last sentence states a fact
LONG_WEEK = (
    "This week was a whirlwind from start to finish. On Monday the quarterly report was due, and the numbers "
    "from the northern office arrived late, so the whole team stayed until nine reconciling spreadsheets. "
    "Tuesday brought the storm everyone had been warning about: the train line flooded near the bridge, the "
    "replacement buses crawled through the traffic, and half the meeting room sat empty while people dialled "
    "in from their kitchens. Wednesday I finally presented the new budget to the board, who asked a hundred "
    "questions about the travel costs and the software licences and the contractors we hired in spring. "
    "Thursday was calmer: a long lunch with the design group and a walk by the canal."
)
CHATTER = "Hey Ann! So good to see you again, it has been ages. How are the kids doing?"


def test_a_line_of_conversation_gets_its_statements_as_keys_with_everyone_named(agent_api, world, alice):
    say(
        agent_api,
        world,
        "bo",
        "ann",
        f"{CHATTER} I adopted a puppy from the shelter last week. Your garden looks great. Wow!",
        timezone.now() - timedelta(days=1),
    )
    upkeep(world)
    (memory,) = memories_of(api_client_for(alice), world, "ann")
    assert memory["keys_made"] == "offline"
    assert memory["keys"] == [
        "bo: So good to see ann again, it has been ages.",
        "bo: bo adopted a puppy from the shelter last week.",
        "bo: ann's garden looks great.",
    ], "the statements, one a key, 'I' and 'you' named; the greeting, the question and the exclamation make none"
    assert AgentMemoryKey.objects.filter(memory_id=memory["id"]).exclude(embedding=None).count() == 3, "embedded"


def test_a_question_finds_a_fact_buried_in_chatter_through_its_key(agent_api, world, settings):
    start = timezone.now() - timedelta(days=3)
    lines = [
        f"{CHATTER} " + LONG_WEEK + " Oh, and I adopted a puppy from the shelter last week.",
        "I've been reading a lot of books about sailing lately, the old sea stories are the best.",
        "The bakery on the corner finally reopened and their bread is as good as ever.",
        "My sister moved to a new flat near the river with a big balcony.",
        "I bought a new bike, a red one, and ride it to work every day now.",
        "The concert in the park was loud but we had a great time dancing.",
        "Our neighbours have a cat that keeps sleeping on the roof of my car.",
        "The pet shop in town had adorable kittens in the window, I nearly took one home.",
        "I fed the ducks at the pond with Ann's kids, they loved the animals.",
        "I finally fixed the leaking tap in the kitchen all by myself.",
    ]
    for n, line in enumerate(lines):
        say(agent_api, world, "bo", "ann", line, start + timedelta(hours=n))
    upkeep(world)
    ann = Agent.objects.get(external_id="ann")

    def rank(keys):
        settings.AGENT_RECALL = {**settings.AGENT_RECALL, "keys": keys}
        found, _ = agent_recall.agent_recall(
            world=world,
            agent=ann,
            query="Did Bo get a dog?",
            limit=10,
            token_budget=100_000,
            cooldown_s=0,
            record=False,
        )
        return [m.content for m in found].index(next(m.content for m in found if "puppy" in m.content))

    assert rank(0.7) == 0, "its key 'bo: bo adopted a puppy...' is the question's nearest"
    assert rank(0.0) > 0, "without keys the chatter around the fact hides it"


def test_keys_follow_their_memory_through_edit_delete_and_export(agent_api, world, alice):
    owner = api_client_for(alice)
    say(agent_api, world, "bo", "ann", "I hid the silver key under the old oak tree.", timezone.now())
    upkeep(world)
    (memory,) = memories_of(owner, world, "ann")
    assert memory["keys"] == ["bo: bo hid the silver key under the old oak tree."]
    exported = json.loads(b"".join(owner.get(f"/api/worlds/{world.pk}/export/").streaming_content))
    by_agent = {a["external_id"]: a["memories"] for a in exported["agents"]}
    assert by_agent["ann"][0]["keys"] == memory["keys"], "the export carries each memory's keys"

    url = f"/api/worlds/{world.pk}/agents/ann/memories/{memory['id']}/"
    patched = owner.patch(
        url, {"content": "Bo buried the golden ring by the well. He told nobody else."}, format="json"
    )
    assert patched.status_code == 200 and patched.json()["keys"] == [] and patched.json()["keys_made"] == ""
    upkeep(world)
    (edited,) = memories_of(owner, world, "ann")
    assert edited["keys"] == ["Bo buried the golden ring by the well.", "He told nobody else."], "made anew"
    assert not AgentMemoryKey.objects.filter(memory_id=memory["id"], text__icontains="silver").exists()

    assert owner.delete(url).status_code == 204
    assert not AgentMemoryKey.objects.filter(memory_id=memory["id"]).exists(), "a deleted memory's keys go with it"


def test_keys_made_from_a_text_edited_meanwhile_are_not_stored_against_the_new_text(agent_api, world):
    say(agent_api, world, "bo", "ann", "I hid the silver key under the old oak tree.", timezone.now())
    memory = AgentMemory.objects.get(agent__external_id="ann")
    read = fact_keys.Source(memory.pk, memory.kind, memory.content, memory.actor, memory.partner, memory.location)
    edit = "Bo buried the golden ring by the well. He told nobody else."
    AgentMemory.objects.filter(pk=memory.pk).update(content=edit)
    with connection.cursor() as cursor:  # the pass stores what it made from the text it read
        cursor.execute(
            agent_upkeep._KEYS_STORE,
            {
                "ids": [read.id],
                "contents": [read.content],
                "sources": ["offline"],
                "keys": fact_keys.keys_json({read.id: fact_keys.offline_keys(read)}),
            },
        )
    assert not AgentMemoryKey.objects.exists() and AgentMemory.objects.get(pk=memory.pk).keys_made == ""
    agent_upkeep.agent_keys_make(agent_id=memory.agent_id)
    assert list(AgentMemoryKey.objects.order_by("id").values_list("text", flat=True)) == [
        "Bo buried the golden ring by the well.",
        "He told nobody else.",
    ]


def test_another_agents_keys_never_match(agent_api, world, settings):
    when = timezone.now() - timedelta(days=1)
    say(agent_api, world, "bo", "cy", "I adopted a puppy from the shelter last week.", when)  # cy's and bo's
    say(agent_api, world, "bo", "ann", "The bakery on the corner finally reopened.", when + timedelta(hours=1))
    upkeep(world)
    assert AgentMemoryKey.objects.filter(agent__external_id="cy", text__icontains="puppy").exists()
    ann = Agent.objects.get(external_id="ann")
    for forced in ({}, {"exact_up_to": 0, "hnsw_row_cost": 0}):  # exact, and the candidate path's key arm
        settings.AGENT_RECALL = {**settings.AGENT_RECALL, **forced}
        found, _ = agent_recall.agent_recall(
            world=world, agent=ann, query="bo adopted a puppy from the shelter", limit=5, cooldown_s=0, record=False
        )
        assert [m.content for m in found] and all("puppy" not in m.content for m in found)


def test_with_the_owners_model_the_model_states_the_facts(agent_api, world, alice, fake_llm):
    owner = api_client_for(alice)
    assert (
        owner.patch(
            "/api/settings/", {"endpoint_url": fake_llm.url, "api_key": "sk-x", "model": "m"}, format="json"
        ).status_code
        == 200
    )

    def reply(body, n):
        asked = body["messages"][0]["content"]
        if "For each numbered memory" not in asked:
            return "ok"
        return "Here are the facts:\n1. Bo hid the silver key under the old oak.\n1. Bo fears the dark.\n7. Nobody.\n"

    fake_llm.reply = reply
    say(agent_api, world, "bo", "ann", "I hid it, you know where. Scary night!", timezone.now())
    upkeep(world)
    (memory,) = memories_of(owner, world, "ann")
    assert memory["keys_made"] == "model"
    assert memory["keys"] == ["Bo hid the silver key under the old oak.", "Bo fears the dark."]
    asked = [r for r in fake_llm.requests if "For each numbered memory" in str(r.body)]
    assert len(asked) == 2, "one call for each agent's pass (bo said it, ann heard it)"
    assert {k.lower(): v for k, v in asked[0].headers.items()}["authorization"] == "Bearer sk-x", "the owner's key"

    failing = Reply(status=500, when=lambda body: "For each numbered memory" in str(body))
    fake_llm.queue(*[failing] * 10)
    say(agent_api, world, "bo", "ann", "I left the lantern at the mill yesterday evening.", timezone.now())
    upkeep(world)
    latest = memories_of(owner, world, "ann")[0]
    assert latest["keys_made"] == "offline", "a failing model: the rules stand in"
    assert latest["keys"] == ["bo: bo left the lantern at the mill yesterday evening."]


def test_an_admin_edit_of_the_text_makes_the_keys_anew(agent_api, world, django_user_model, client):
    from django.urls import reverse

    say(agent_api, world, "bo", "ann", "I hid the silver key under the old oak tree.", timezone.now())
    upkeep(world)
    memory = AgentMemory.objects.get(agent__external_id="ann")
    root = django_user_model.objects.create_superuser(username="root", password="root-pass-123")
    client.force_login(root)
    url = reverse("admin:memory_agentmemory_change", args=[memory.pk])
    page = client.get(url)
    assert "bo: bo hid the silver key under the old oak tree." in page.content.decode(), "the keys are shown"
    form = page.context["adminform"].form
    data = {name: form[name].value() for name in form.fields}
    data = {k: ("" if v is None else v) for k, v in data.items()}
    data["metadata"] = json.dumps(memory.metadata)
    data["occurred_at_0"], data["occurred_at_1"] = f"{memory.occurred_at:%Y-%m-%d}", f"{memory.occurred_at:%H:%M:%S}"
    data.pop("occurred_at", None)
    for formset in page.context["inline_admin_formsets"]:
        management = formset.formset.management_form
        data.update({management.add_prefix(n): management[n].value() for n in management.fields})
        for inline in formset.formset.forms:
            data.update({inline.add_prefix(n): inline[n].value() or "" for n in inline.fields})
    data["content"] = "Bo buried the golden ring by the well. He told nobody else."
    response = client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    memory.refresh_from_db()
    assert memory.content.startswith("Bo buried") and memory.keys_made == "" and memory.embedding is None
    assert not AgentMemoryKey.objects.filter(memory=memory).exists(), "the old text's keys went with it"
    upkeep(world)
    assert sorted(AgentMemoryKey.objects.filter(memory=memory).values_list("text", flat=True)) == [
        "Bo buried the golden ring by the well.",
        "He told nobody else.",
    ]


def test_a_new_embedding_model_embeds_the_keys_again(agent_api, world, alice, fake_llm):
    say(agent_api, world, "bo", "ann", "I hid the silver key under the old oak tree.", timezone.now())
    upkeep(world)
    local = set(AgentMemoryKey.objects.values_list("embedding_model", flat=True))
    assert len(local) == 1 and "" not in local
    owner = api_client_for(alice)
    changed = owner.patch(
        "/api/settings/",
        {"endpoint_url": fake_llm.url, "api_key": "sk-x", "model": "m", "embedding_model": "fake-embed"},
        format="json",
    )
    assert changed.status_code == 200
    upkeep(world)
    memory_models = set(AgentMemory.objects.values_list("embedding_model", flat=True))
    key_models = set(AgentMemoryKey.objects.values_list("embedding_model", flat=True))
    assert key_models == memory_models and key_models.isdisjoint(local), "recall compares like with like"
    assert any("input" in r.body and "bo: bo hid the silver key" in str(r.body) for r in fake_llm.requests)
