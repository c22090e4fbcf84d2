"""Agent memory for multi-agent worlds over REST."""

import json
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.utils import timezone

from memory.agents import agent_events, agent_recall, agent_upkeep
from memory.models import Agent, AgentMemory, World
from tests.conftest import api_client_for
from tests.support.agents import SMALL_TALK, events_url, say

pytestmark = pytest.mark.django_db


def test_one_say_with_three_listeners_writes_one_say_and_three_heard(agent_api, world):
    response = agent_api.post(
        events_url(world),
        {
            "type": "say",
            "actor": "ann",
            "target": "bo",
            "location": "cafe",
            "text": "The well is poisoned.",
            "nearby": ["bo", "cy", "di"],
        },
        format="json",
    )
    assert response.status_code == 201 and response.json() == {"memories": 4, "agents": ["ann", "bo", "cy", "di"]}
    rows = {(m.agent.external_id, m.kind, m.partner) for m in AgentMemory.objects.select_related("agent")}
    assert rows == {("ann", "say", "bo"), ("bo", "heard", "ann"), ("cy", "heard", "ann"), ("di", "heard", "ann")}
    assert all('"The well is poisoned."' in m.content and m.location == "cafe" for m in AgentMemory.objects.all())


def test_an_interaction_is_the_actors_act_and_the_bystanders_sight(agent_api, world):
    agent_api.post(
        events_url(world),
        {
            "type": "interact",
            "actor": "ann",
            "target": "bo",
            "location": "market",
            "text": "sold a lamp to",
            "nearby": ["bo", "cy"],
        },
        format="json",
    )
    rows = {(m.agent.external_id, m.kind, m.partner) for m in AgentMemory.objects.select_related("agent")}
    assert rows == {("ann", "interaction", "bo"), ("bo", "interaction", "ann"), ("cy", "witnessed", "ann")}
    content = AgentMemory.objects.get(agent__external_id="ann").content
    assert content == f"({timezone.now():%-d %B %Y}) Ann sold a lamp to bo at the market.", "dated: read alone later"


def test_an_interaction_reaches_its_target_and_reads_as_a_sentence(agent_api, world):
    response = agent_api.post(
        events_url(world),
        {
            "type": "interact",
            "actor": "cy",
            "target": "bo",
            "location": "bridge",
            "text": "Cy handed Bo a rusty lantern.",
        },
        format="json",
    )
    assert response.status_code == 201 and response.json()["agents"] == ["bo", "cy"], "bo is created and told"
    bo = AgentMemory.objects.get(agent__external_id="bo")
    assert bo.kind == "interaction" and bo.partner == "cy"
    assert bo.content.split(") ", 1)[1] == "Cy handed Bo a rusty lantern at the bridge."
    agent_api.post(
        events_url(world),
        {"type": "interact", "actor": "cy", "target": "di", "text": "waved", "location": "Hobbs Cafe"},
        format="json",
    )
    di = AgentMemory.objects.get(agent__external_id="di")
    assert di.content.split(") ", 1)[1] == "Cy waved (with di) at Hobbs Cafe."


def test_a_full_bank_of_retrieved_memories_still_takes_in_new_events(agent_api, world):
    world.agent_capacity = 10
    world.save(update_fields=["agent_capacity"])
    for n in range(10):
        agent_api.post(events_url(world), {"type": "observe", "actor": "ann", "text": f"old sight {n}"}, format="json")
    ann = Agent.objects.get(external_id="ann")
    AgentMemory.objects.filter(agent=ann).update(retrieval_count=3, last_retrieved_at=timezone.now())
    for n in range(3):
        response = agent_api.post(
            events_url(world),
            {"type": "say", "actor": "bo", "target": "ann", "text": f"news number {n}"},
            format="json",
        )
        assert response.status_code == 201
    heard = AgentMemory.objects.filter(agent=ann, kind="heard").order_by("id")
    assert [m.content.rsplit('"', 2)[1] for m in heard] == ["news number 0", "news number 1", "news number 2"]
    assert AgentMemory.objects.filter(agent=ann).count() == 10
    # least recently used go first: the sights retrieved longest ago
    AgentMemory.objects.filter(agent=ann, content__contains="old sight 9").update(
        last_retrieved_at=timezone.now() - timedelta(days=30)
    )
    agent_api.post(events_url(world), {"type": "say", "actor": "bo", "target": "ann", "text": "more"}, format="json")
    assert not AgentMemory.objects.filter(agent=ann, content__contains="old sight 9").exists()
    assert AgentMemory.objects.filter(agent=ann, content__contains="old sight 8").exists()


def test_recency_halves_every_half_life(world, settings):
    settings.AGENT_RECALL = {**settings.AGENT_RECALL, "recency_half_life_hours": 10, "recency": 1.0}
    ann = Agent.objects.create(world=world, external_id="ann")
    now = timezone.now()
    for hours in (0, 10, 20):
        AgentMemory.objects.create(
            agent=ann,
            world=world,
            kind="note",
            content=f"noted {hours} hours ago",
            importance=0,
            occurred_at=now - timedelta(hours=hours),
        )
    found, _ = agent_recall.agent_recall(world=world, agent=ann, limit=3, now=now, record=False)
    recency = {m.content: m.parts["recency"] for m in found}
    assert recency == {"noted 0 hours ago": 1.0, "noted 10 hours ago": 0.5, "noted 20 hours ago": 0.25}


def test_recall_has_a_default_token_budget(world, settings):
    settings.AGENT_RECALL = {**settings.AGENT_RECALL, "token_budget": 60}
    ann = Agent.objects.create(world=world, external_id="ann")
    for n in range(10):
        AgentMemory.objects.create(
            agent=ann,
            world=world,
            kind="note",
            occurred_at=timezone.now(),
            content=f"memory {n}: " + "long words here " * 5,
        )
    found, _ = agent_recall.agent_recall(world=world, agent=ann, limit=10, record=False)
    assert 1 <= len(found) < 10, "the default budget bounds what one recall injects"
    found, _ = agent_recall.agent_recall(world=world, agent=ann, limit=10, record=False, token_budget=10_000)
    assert len(found) == 10


def test_custom_events_use_their_template(agent_api, world):
    response = agent_api.post(
        events_url(world),
        {
            "type": "trade",
            "actor": "ann",
            "target": "bo",
            "text": "3 apples",
            "template": "{actor} traded {text} with {target}",
        },
        format="json",
    )
    assert response.status_code == 201
    memory = AgentMemory.objects.get()
    assert memory.content.endswith(") ann traded 3 apples with bo") and memory.metadata["type"] == "trade"


@pytest.mark.parametrize(
    "body, field",
    [
        ({"type": "say", "actor": "ann", "text": ""}, "text"),
        ({"type": "say", "actor": "ann", "text": "x" * 2001}, "text"),
        ({"type": "say", "actor": "ann", "text": "hi", "nearby": [f"a{n}" for n in range(51)]}, "nearby"),
        ({"type": "trade", "actor": "ann", "text": "hi"}, "template"),
        ({"type": "Bad Type", "actor": "ann", "text": "hi"}, "type"),
        ({"events": []}, "events"),
    ],
)
def test_bad_events_get_field_errors_and_write_nothing(agent_api, world, body, field):
    response = agent_api.post(events_url(world), body, format="json")
    assert response.status_code == 400 and field in str(response.json())
    assert not AgentMemory.objects.exists() and not Agent.objects.exists()


def test_a_batch_with_one_far_future_event_writes_nothing(agent_api, world):
    future = (timezone.now() + timedelta(days=30)).isoformat()
    batch = {
        "events": [
            {"type": "say", "actor": "ann", "text": "fine"},
            {"type": "say", "actor": "ann", "text": "later", "time": future},
        ]
    }
    response = agent_api.post(events_url(world), batch, format="json")
    assert response.status_code == 400 and "far future" in response.json()["detail"]
    assert not AgentMemory.objects.exists()


def make(agent, world, content, *, kind="say", partner="", location="", hours_ago=1.0, importance=0.5, **extra):
    return AgentMemory.objects.create(
        agent=agent,
        world=world,
        kind=kind,
        partner=partner,
        location=location,
        content=content,
        importance=importance,
        occurred_at=timezone.now() - timedelta(hours=hours_ago),
        **extra,
    )


def test_recall_scores_partner_location_kind_and_recency_in_the_expected_order(world):
    ann = Agent.objects.create(world=world, external_id="ann")
    a = make(ann, world, "ann promised bo to repair the mill", partner="bo", location="mill", hours_ago=2)
    b = make(ann, world, "ann heard bo complain about rain", kind="heard", partner="bo", hours_ago=2)
    c = make(ann, world, "ann sold bread to cy", partner="cy", location="mill", hours_ago=2)
    d = make(ann, world, "ann chatted with di long ago", partner="di", hours_ago=24 * 30)
    found, block = agent_recall.agent_recall(
        world=world, agent=ann, partner="bo", location="mill", limit=4, record=False
    )
    assert [m.id for m in found] == [a.pk, b.pk, c.pk, d.pk]
    assert found[0].parts["partner"] > 0 and found[0].parts["location"] > 0
    assert found[1].parts["kind"] < found[0].parts["kind"], "what it heard ranks below what it did"
    assert found[3].parts["recency"] < found[2].parts["recency"]
    assert block.startswith("Relevant memories:\n- [") and "repair the mill" in block.splitlines()[1]


def test_recall_filters_window_kinds_cooldown_dedupe_and_budget(world):
    ann = Agent.objects.create(world=world, external_id="ann")
    old = make(ann, world, "ann buried the silver in the orchard", hours_ago=24 * 400)
    said = make(ann, world, "ann said the bridge is closed", hours_ago=1)
    make(ann, world, "ann said the bridge is closed!", hours_ago=2)  # a near-duplicate
    heard = make(ann, world, "ann heard wolves near the bridge", kind="heard", hours_ago=1)
    ids = lambda found: [m.id for m in found]  # noqa: E731

    found, _ = agent_recall.agent_recall(world=world, agent=ann, limit=10, record=False)
    assert old.pk not in ids(found), "outside the default window"
    assert len([m for m in found if "bridge is closed" in m.content]) == 1, "near-duplicates collapse"
    found, _ = agent_recall.agent_recall(
        world=world, agent=ann, limit=10, since=timezone.now() - timedelta(days=500), record=False
    )
    assert old.pk in ids(found)
    found, _ = agent_recall.agent_recall(world=world, agent=ann, kinds=["heard"], limit=10, record=False)
    assert ids(found) == [heard.pk]
    found, _ = agent_recall.agent_recall(world=world, agent=ann, limit=1, token_budget=16, record=False)
    assert len(found) == 1 and found[0].id == said.pk

    first, _ = agent_recall.agent_recall(world=world, agent=ann, limit=2)
    again, _ = agent_recall.agent_recall(world=world, agent=ann, limit=2)
    assert not set(ids(first)) & set(ids(again)), "just-returned memories are held back (cooldown)"
    assert AgentMemory.objects.get(pk=first[0].id).retrieval_count == 1


def test_a_query_ranks_by_meaning_and_words_inside_postgres(world, agent_api):
    for text in [
        "The blacksmith forged a sword for the mayor.",
        "It rained all day on the fields.",
        "Bo lost his lantern in the cave.",
    ]:
        agent_api.post(events_url(world), {"type": "observe", "actor": "ann", "text": text}, format="json")
    ann = Agent.objects.get(external_id="ann")
    agent_upkeep.agent_memories_embed(agent_id=ann.pk)
    found, _ = agent_recall.agent_recall(world=world, agent=ann, query="who made a weapon?", limit=1, record=False)
    assert "sword" in found[0].content and found[0].parts["vector"] > 0
    found, _ = agent_recall.agent_recall(world=world, agent=ann, query="lantern", limit=1, record=False)
    assert "lantern" in found[0].content and found[0].parts["text"] > 0


def test_capacity_holds_under_five_thousand_events_and_recall_stays_two_queries(
    agent_api, world, django_assert_num_queries
):
    now = timezone.now()
    for batch in range(10):
        events = [
            {
                "type": "observe",
                "actor": "ann",
                "text": f"ann counted crow number {batch * 500 + n}",
                "time": (now - timedelta(minutes=5000 - batch * 500 - n)).isoformat(),
            }
            for n in range(500)
        ]
        assert agent_api.post(events_url(world), {"events": events}, format="json").status_code == 201
    ann = Agent.objects.get(external_id="ann")
    assert AgentMemory.objects.filter(agent=ann).count() == world.agent_capacity
    assert AgentMemory.objects.filter(agent=ann, content__endswith="4999").exists(), "the newest stay"
    with django_assert_num_queries(3):  # the bank's size, the ranked SELECT and the retrieval-stats UPDATE
        found, _ = agent_recall.agent_recall(world=world, agent=ann, limit=5)
    assert len(found) == 5


def test_eviction_takes_the_least_recently_used_and_never_a_pin(world):
    ann = Agent.objects.create(world=world, external_id="ann")
    pinned = make(ann, world, "pinned", kind="heard", hours_ago=100, pinned=True)
    used = make(ann, world, "used", kind="heard", hours_ago=90, retrieval_count=3)
    AgentMemory.objects.filter(pk=used.pk).update(last_retrieved_at=timezone.now())
    stale = make(ann, world, "happened long ago, never used", kind="say", hours_ago=80)
    # the same last use: the less important goes first, then the passive kind
    mine = make(ann, world, "my own act", kind="say", hours_ago=1, importance=0.5)
    overheard = make(ann, world, "overheard", kind="heard", hours_ago=1, importance=0.5)
    trivial = make(ann, world, "trivial", kind="say", hours_ago=1, importance=0.1)
    AgentMemory.objects.filter(pk__in=[mine.pk, overheard.pk, trivial.pk]).update(
        occurred_at=timezone.now() - timedelta(hours=1)
    )
    left = lambda: set(AgentMemory.objects.values_list("pk", flat=True))  # noqa: E731
    agent_events.enforce_capacity(agent=ann, capacity=5)
    assert stale.pk not in left()
    agent_events.enforce_capacity(agent=ann, capacity=4)
    assert trivial.pk not in left()
    agent_events.enforce_capacity(agent=ann, capacity=3)
    assert left() == {pinned.pk, used.pk, mine.pk}
    agent_events.enforce_capacity(agent=ann, capacity=0)
    assert left() == {pinned.pk}, "pinned never"


def test_consolidation_writes_one_summary_and_hides_its_sources_from_recall(world):
    ann = Agent.objects.create(world=world, external_id="ann")
    sources = [
        make(ann, world, f"ann haggled with bo over the price of wool, offer {n}", partner="bo", hours_ago=5 - n * 0.2)
        for n in range(6)
    ]
    other = make(ann, world, "ann fed the goats", hours_ago=3)
    assert agent_upkeep.consolidate(agent_id=ann.pk) == 1
    summary = AgentMemory.objects.get(kind="summary")
    assert summary.partner == "bo" and summary.metadata["sources"] == 6 and "wool" in summary.content
    assert set(AgentMemory.objects.filter(consolidated_into=summary).values_list("pk", flat=True)) == {
        s.pk for s in sources
    }
    found, _ = agent_recall.agent_recall(world=world, agent=ann, limit=10, record=False)
    assert {m.id for m in found} == {summary.pk, other.pk}
    assert agent_upkeep.consolidate(agent_id=ann.pk) == 0, "running again folds nothing twice"


def test_worlds_are_isolated_between_tokens_and_users(world, agent_api, bob, alice):
    other = World.objects.create(owner=alice, name="Elsewhere")
    agent_api.post(events_url(world), {"type": "say", "actor": "ann", "text": "secret"}, format="json")
    assert (
        agent_api.post(events_url(other), {"type": "say", "actor": "x", "text": "y"}, format="json").status_code == 404
    )
    assert agent_api.post(f"/api/worlds/{other.pk}/agents/ann/recall/", {}, format="json").status_code == 404
    assert agent_api.get("/api/adventures/").status_code in (401, 403), "a world token is not the owner's login"
    assert agent_api.get("/api/worlds/").status_code == 404, "tokens cannot manage worlds"
    bob_api = api_client_for(bob)
    for method, url in [
        ("get", f"/api/worlds/{world.pk}/"),
        ("get", f"/api/worlds/{world.pk}/agents/"),
        ("post", f"/api/worlds/{world.pk}/agents/ann/recall/"),
        ("get", f"/api/worlds/{world.pk}/export/"),
        ("delete", f"/api/worlds/{world.pk}/agents/ann/"),
    ]:
        assert getattr(bob_api, method)(url, {}, format="json").status_code == 404
    assert Agent.objects.filter(external_id="ann").exists()


def test_revoked_tokens_are_refused_at_once(world, agent_api, alice):
    owner = api_client_for(alice)
    assert owner.delete(f"/api/worlds/{world.pk}/tokens/{agent_api.token.pk}/").status_code == 204
    response = agent_api.post(events_url(world), {"type": "say", "actor": "ann", "text": "hi"}, format="json")
    assert response.status_code == 401 and "revoked" in response.json()["detail"]
    listed = owner.get(f"/api/worlds/{world.pk}/tokens/").json()
    assert listed[0]["revoked_at"] and "token" not in listed[0] and agent_api.raw_token not in str(listed)


def test_owners_manage_memories_and_export_a_world(world, agent_api, alice):
    owner = api_client_for(alice)
    agent_api.post(
        events_url(world),
        {"type": "say", "actor": "ann", "target": "bo", "text": "meet at noon", "nearby": ["bo"]},
        format="json",
    )
    noted = agent_api.post(
        f"/api/worlds/{world.pk}/agents/ann/memories/", {"content": "bo owes me a favor", "pinned": True}, format="json"
    )
    assert noted.status_code == 201 and noted.json()["kind"] == "note"
    search = owner.get(f"/api/worlds/{world.pk}/agents/ann/memories/?q=noon").json()
    assert [m["content"].split(") ", 1)[1] for m in search] == ['ann said to bo: "meet at noon"']
    mid = search[0]["id"]
    patched = owner.patch(f"/api/worlds/{world.pk}/agents/ann/memories/{mid}/", {"pinned": True}, format="json")
    assert patched.json()["pinned"] is True
    exported = json.loads(b"".join(owner.get(f"/api/worlds/{world.pk}/export/").streaming_content))
    assert {a["external_id"]: len(a["memories"]) for a in exported["agents"]} == {"ann": 2, "bo": 1}
    assert owner.delete(f"/api/worlds/{world.pk}/agents/bo/").status_code == 204
    assert not AgentMemory.objects.filter(agent__external_id="bo").exists()


def test_full_text_weighs_a_rare_word_above_a_word_every_memory_holds(agent_api, world):
    start = timezone.now() - timedelta(days=3)
    for n in range(6):
        say(agent_api, world, "bo", "ann", f"The festival has stall number {n}.", start + timedelta(hours=n))
    say(agent_api, world, "bo", "ann", "Festival, festival, festival: the festival never ends.", start)
    say(agent_api, world, "bo", "ann", "They light a lantern at the festival.", start + timedelta(hours=9))
    ann = Agent.objects.get(external_id="ann")
    found, _ = agent_recall.agent_recall(world=world, agent=ann, query="lantern festival", limit=10, record=False)
    text = {m.content.split('"')[1]: m.parts["text"] for m in found}
    lantern = text["They light a lantern at the festival."]
    assert lantern == max(text.values()), "BM25: the rare word decides, repeating the common one does not"
    assert lantern > text["Festival, festival, festival: the festival never ends."]


def test_a_query_naming_someone_ranks_what_they_said_first(agent_api, world):
    now = timezone.now() - timedelta(days=1)
    say(agent_api, world, "ann", "bo", "The north bridge is closed today.", now)
    say(agent_api, world, "bo", "ann", "The old bridge is closed for repairs.", now + timedelta(hours=2))
    ann = Agent.objects.get(external_id="ann")
    agent_upkeep.agent_memories_embed(agent_id=ann.pk)
    about_bo, _ = agent_recall.agent_recall(
        world=world, agent=ann, query="What did Bo say about the bridge?", limit=2, record=False
    )
    assert "old bridge" in about_bo[0].content and about_bo[0].parts["named"] > 0
    assert about_bo[1].parts["named"] == 0
    about_ann, _ = agent_recall.agent_recall(
        world=world, agent=ann, query="what did ann say about the bridge", limit=2, record=False
    )
    assert "north bridge" in about_ann[0].content and about_ann[0].parts["named"] > 0
    assert AgentMemory.objects.get(agent=ann, kind="heard").actor == "bo"


def test_an_answer_is_found_through_the_question_it_answers(agent_api, world):
    t = timezone.now() - timedelta(days=2)
    say(agent_api, world, "bo", "ann", "Where did you hide the silver key?", t)
    say(agent_api, world, "ann", "bo", "Under the third stone by the well.", t + timedelta(minutes=1))
    for n, line in enumerate(
        [
            "The weather turned cold.",
            "Bread is cheaper at the mill.",
            "My cousin visits soon.",
            "The cart needs a new wheel.",
            "Owls nest in the tower.",
        ]
    ):
        say(agent_api, world, "bo", "ann", line, t + timedelta(hours=3 + n))
    say(agent_api, world, "cy", "ann", "Stones are heavy to carry.", t + timedelta(minutes=2))  # another talk
    ann = Agent.objects.get(external_id="ann")
    agent_upkeep.agent_memories_embed(agent_id=ann.pk)
    found, _ = agent_recall.agent_recall(
        world=world, agent=ann, query="where is the silver key hidden", limit=3, record=False
    )
    answer = next(m for m in found if "third stone" in m.content)
    assert answer.parts["context"] > 0, "it shares in the match of the question just before it"
    assert found.index(answer) <= 1
    other_talk = agent_recall.agent_recall(world=world, agent=ann, query="stones", limit=10, record=False)[0]
    by_text = {m.content: m.parts["context"] for m in other_talk}
    assert by_text[next(c for c in by_text if "heavy to carry" in c)] == 0, "cy's line is another conversation"


def test_the_reply_to_a_matching_question_outranks_the_question(agent_api, world, settings):
    """Gina's question matches the query word for word, but holds no fact; Jon's reply, which
    shares no word with it, holds the answer: the reply takes the larger share of its question's
    match, and a line that only asks counts for less (docs/agent-memory.md)."""
    t = timezone.now() - timedelta(days=3)
    say(agent_api, world, "gina", "jon", "That's so sweet! What are the names of your pets?", t)
    say(agent_api, world, "jon", "gina", "Luna and Oliver! They liven up the whole house.", t + timedelta(minutes=1))
    for n, line in enumerate([*SMALL_TALK, "The shop's new page is example.com/shop?id=3"]):
        say(agent_api, world, "jon", "gina", line, t + timedelta(hours=2 + n))
    gina = Agent.objects.get(external_id="gina")
    agent_upkeep.agent_memories_embed(agent_id=gina.pk)

    def ranked():
        found, _ = agent_recall.agent_recall(
            world=world, agent=gina, query="What are the names of Jon's pets?", limit=3, record=False
        )
        return found

    found = ranked()
    assert "Luna and Oliver" in found[0].content and found[0].parts["text"] == 0
    assert found[0].parts["asks"] == 0 and found[0].parts["context"] > 0
    question = next(m for m in found if "names of your pets" in m.content)
    assert question.parts["asks"] < 0, "a line that only asks"
    page, _ = agent_recall.agent_recall(world=world, agent=gina, query="the shop's new page", limit=1, record=False)
    assert "shop?id=3" in page[0].content and page[0].parts["asks"] == 0, "a question mark in a link asks nothing"
    settings.AGENT_RECALL = {**settings.AGENT_RECALL, "asks": 0.0, "answers": 0.0}
    assert "names of your pets" in ranked()[0].content, "without the two parts the question itself ranks first"


def test_a_memory_means_the_same_whatever_day_it_happened(agent_api, world):
    """The date a memory starts with is its event time (recall reads that from the event); its
    vector is the meaning of what happened."""
    for day in (datetime(2023, 5, 8, tzinfo=dt_timezone.utc), datetime(2024, 11, 23, tzinfo=dt_timezone.utc)):
        say(agent_api, world, "ann", "bo", "The lighthouse keeper found a bottle with a letter.", day)
    ann = Agent.objects.get(external_id="ann")
    agent_upkeep.agent_memories_embed(agent_id=ann.pk)
    first, second = AgentMemory.objects.filter(agent=ann).order_by("occurred_at")
    assert first.content.startswith("(8 May 2023) ") and second.content.startswith("(23 November 2024) ")
    assert list(first.embedding) == list(second.embedding) and first.embedding_model
