"""Recall over a large bank reads its candidates from indexes (the nearest by
meaning through HNSW, the full-text index, the newest with the partner, at the
place, in the period, and the lines around them) and ranks them as scoring the
whole bank would; its reads do not grow with the bank. Asked through the recall
API, as agent frameworks ask."""

import random
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from memory.agents import agent_recall
from memory.embedder import LOCAL_MODEL
from memory.models import Agent, AgentMemory, AgentWordCount, AgentWordSample
from tests.support.agents import embed_all, events_url, recall

pytestmark = pytest.mark.django_db

PEOPLE = ["my aunt", "the baker", "our neighbour", "the coach", "my cousin", "the mayor", "a sailor", "the teacher"]
DEEDS = ["painted", "repaired", "sold", "borrowed", "lost", "found", "photographed", "cleaned"]
THINGS = [
    "a red bicycle",
    "the old piano",
    "a wooden boat",
    "the garden fence",
    "a silver watch",
    "the kitchen roof",
    "a leather saddle",
    "the school bus",
    "a copper kettle",
    "the church bell",
]
WHEN = ["last spring", "on a rainy Monday", "before the harvest", "after the storm", "during the fair"]

# What the questions are about: lines said once, far back in the bank, among the ordinary talk.
TOLD = [
    ("bo", "What did you bring back from Lisbon?"),
    ("ann", "Blue tiles painted by hand, and a jar of sardines."),
    ("ann", "My sister Rosa adopted a greyhound called Comet."),
    ("bo", "I signed up for a pottery class at the harbour studio."),
    ("ann", "The dentist pulled my wisdom tooth on Friday."),
]


def conversation(count: int, seed: int = 5) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    lines = [
        (
            rng.choice(["ann", "bo"]),
            f"{rng.choice(PEOPLE).capitalize()} {rng.choice(DEEDS)} {rng.choice(THINGS)} {rng.choice(WHEN)}.",
        )
        for _ in range(count)
    ]
    at = count // 3
    return lines[:at] + TOLD + lines[at:]


@pytest.fixture
def big_bank(agent_api, world):
    """bo's bank: about 250 lines of talk with ann, five minutes apart, two months ago (each said or heard)."""
    world.agent_capacity = 1000
    world.save(update_fields=["agent_capacity"])
    start = timezone.now() - timedelta(days=60)
    lines = conversation(240)
    events = [
        {
            "type": "say",
            "actor": who,
            "target": "bo" if who == "ann" else "ann",
            "nearby": ["bo" if who == "ann" else "ann"],
            "text": text,
            "location": "harbour" if n % 7 == 0 else "",
            "time": (start + timedelta(minutes=5 * n)).isoformat(),
        }
        for n, (who, text) in enumerate(lines)
    ]
    assert agent_api.post(events_url(world), {"events": events}, format="json").status_code == 201
    embed_all(world)
    return Agent.objects.get(world=world, external_id="bo")


QUESTIONS = [
    {"query": "What souvenirs came back from Lisbon?"},
    {"query": "Tell me about Rosa's dog."},
    {"query": "pottery class"},
    {"query": "Who repaired the church bell?"},
    {"query": "What happened at the dentist?"},
    {"query": "", "partner": "ann", "location": "harbour"},
    {"query": "What did the mayor do during the fair?"},
]


def ranked(agent_api, world, settings, exact_up_to, **ask):
    settings.AGENT_RECALL = {
        **settings.AGENT_RECALL,
        "exact_up_to": exact_up_to,
        "vector_candidates": 20,
        "text_scan": 60,
        "text_candidates": 20,
        "newest_candidates": 10,
    }
    return recall(agent_api, world, "bo", ask.pop("query"), **ask)


@pytest.mark.slow  # a sweep or a bank at scale: make test runs it
def test_the_candidate_path_finds_what_scoring_the_whole_bank_finds(agent_api, world, settings, big_bank):
    assert AgentMemory.objects.filter(agent=big_bank).count() > 200
    for ask in QUESTIONS:
        exact = ranked(agent_api, world, settings, 100_000, **ask)
        fast = ranked(agent_api, world, settings, 50, **ask)
        assert fast[0]["id"] == exact[0]["id"], ask
        assert len({m["id"] for m in fast} & {m["id"] for m in exact}) >= 4, ask
    lisbon = ranked(agent_api, world, settings, 50, query="What souvenirs came back from Lisbon?")
    assert "Blue tiles" in " ".join(m["content"] for m in lisbon[:2]), "the answer, found through its question"
    plan = agent_recall.recall_explain(world=world, agent=big_bank, query="Tell me about Rosa's dog.")
    assert plan["path"] == "candidates"
    settings.AGENT_RECALL = {**settings.AGENT_RECALL, "exact_up_to": 100_000}
    assert agent_recall.recall_explain(world=world, agent=big_bank, query="Rosa")["path"] == "exact"


@pytest.mark.slow  # a sweep or a bank at scale: make test runs it
def test_the_words_of_older_days_weigh_over_candidates_what_they_weigh_in_the_whole_bank(agent_api, world, settings):
    """BM25's word statistics over candidates come from a sample of the bank: one of its newest memories
    only would hold none of the words of older days, which would then all look rare."""
    world.agent_capacity = 1000
    world.save(update_fields=["agent_capacity"])
    rng = random.Random(11)
    start = timezone.now() - timedelta(days=300)
    lines = []
    for n in range(240):
        text = f"{rng.choice(PEOPLE).capitalize()} {rng.choice(DEEDS)} {rng.choice(THINGS)} {rng.choice(WHEN)}."
        if n < 120 and n % 3 == 0:  # the first months were spent at the lighthouse
            text = text[:-1] + " near the lighthouse."
        lines.append(text)
    lines[61] = (
        "Somebody I had never met before handed me an old compass, wrapped in a piece of oilcloth and "
        "tied up with string, then walked off without a word."
    )
    events = [
        {
            "type": "say",
            "actor": "ann",
            "target": "bo",
            "nearby": ["bo"],
            "text": text,
            "time": (start + timedelta(days=n)).isoformat(),
        }
        for n, text in enumerate(lines)
    ]
    assert agent_api.post(events_url(world), {"events": events}, format="json").status_code == 201
    embed_all(world)
    question = "the compass from the lighthouse"
    exact = ranked(agent_api, world, settings, 100_000, query=question)
    settings.AGENT_RECALL = {**settings.AGENT_RECALL, "stats_sample": 60}
    fast = ranked(agent_api, world, settings, 50, query=question)
    assert "compass" in exact[0]["content"], "the rare word tells: scoring the whole bank finds it first"
    assert fast[0]["id"] == exact[0]["id"], [m["content"] for m in fast]


def _tell(agent_api, world, lines, day):
    start = timezone.now() - timedelta(days=100)
    events = [
        {
            "type": "say",
            "actor": "ann",
            "target": "bo",
            "nearby": ["bo"],
            "text": text,
            "time": (start + timedelta(days=day, minutes=n)).isoformat(),
        }
        for n, text in enumerate(lines)
    ]
    assert agent_api.post(events_url(world), {"events": events}, format="json").status_code == 201
    embed_all(world)


ORDINARY = [f"{p.capitalize()} {d} {t}." for p, d, t in zip(PEOPLE * 5, DEEDS * 5, THINGS * 4)]


def test_a_bank_that_changes_is_sampled_anew(agent_api, world, settings):
    """Over candidates, BM25's word statistics come from a sample that is kept while the bank holds
    about as many memories: once many memories mention the zeppelin, the word is common and tells
    nothing, though the last recall found it rare."""
    _tell(agent_api, world, ORDINARY + ["A zeppelin drifted over the harbour at dawn."], 0)
    rare = ranked(agent_api, world, settings, 10, query="the zeppelin")
    assert "zeppelin" in rare[0]["content"] and rare[0]["parts"]["text"] > 0
    assert ranked(agent_api, world, settings, 10, query="the zeppelin")[0]["parts"]["text"] > 0, "kept, the same"
    _tell(agent_api, world, [f"The zeppelin came back, {t} hanging below it." for t in THINGS * 6], 10)
    common = ranked(agent_api, world, settings, 10, query="the zeppelin")
    assert all(m["parts"]["text"] == 0 for m in common), "most memories hold the word now"


def test_every_process_ranks_with_the_word_statistics_stored_for_the_agent(agent_api, world, settings):
    """The sample's statistics live in the database, not in the process that took them: a recall
    ranks with what is stored (here, as if another process had found the word common since), and a
    memory removed or rewritten takes its words out of the counts."""
    _tell(agent_api, world, ORDINARY * 2 + ["A zeppelin drifted over the harbour at dawn."], 0)
    assert ranked(agent_api, world, settings, 10, query="the zeppelin")[0]["parts"]["text"] > 0
    sample = AgentWordSample.objects.get(agent__external_id="bo")
    counted = AgentWordCount.objects.filter(sample=sample)
    assert sample.n == AgentMemory.objects.filter(agent__external_id="bo").count()
    assert counted.get(term="zeppelin").df == 1 and counted.get(term="harbour").df >= 1
    counted.filter(term="zeppelin").update(df=sample.n)
    assert all(m["parts"]["text"] == 0 for m in ranked(agent_api, world, settings, 10, query="the zeppelin"))
    assert AgentWordSample.objects.get(pk=sample.pk).taken_at == sample.taken_at, "fresh: not taken again"

    _tell(agent_api, world, ["One more ordinary day at the market."], 20)  # 1 of 82: within the stale share
    assert all(m["parts"]["text"] == 0 for m in ranked(agent_api, world, settings, 10, query="the zeppelin"))
    zeppelin = AgentMemory.objects.get(agent__external_id="bo", content__contains="zeppelin")
    url = f"/api/worlds/{world.pk}/agents/bo/memories/{zeppelin.pk}/"
    assert agent_api.delete(url).status_code == 204
    assert not AgentWordSample.objects.filter(agent__external_id="bo").exists()
    ranked(agent_api, world, settings, 10, query="the zeppelin")
    assert not AgentWordCount.objects.filter(term="zeppelin").exists(), "the removed memory's words are gone"


def _fill(agent, count):
    """``count`` memories of random words and random unit vectors, made in SQL (what is measured is reads)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT setseed(0.5)")
        cursor.execute(
            """
            INSERT INTO memory_agentmemory (agent_id, world_id, partner, actor, location, kind, content, metadata,
                embedding, embedding_model, importance, pinned, occurred_at, created_at, updated_at, retrieval_count)
            SELECT %(agent)s, %(world)s, 'p' || (g %% 7), 'a', '', 'say',
                   array_to_string(ARRAY(SELECT (%(words)s::text[])[1 + floor(random() * 40)::int]
                                         FROM generate_series(1, 10) WHERE g > 0), ' '), '{}',
                   (SELECT l2_normalize(array_agg(random() - 0.5)::vector)::halfvec
                    FROM generate_series(1, 384) WHERE g > 0),
                   %(model)s, random(), false, now() - random() * interval '300 days', now(), now(), 0
            FROM generate_series(1, %(count)s) AS g
        """,
            {
                "agent": agent.pk,
                "world": agent.world_id,
                "count": count,
                "model": LOCAL_MODEL,
                "words": [f"{w}{n}" for n, w in enumerate(["amber", "birch", "cedar", "delta", "ember"] * 8)],
            },
        )
        cursor.execute("ANALYZE memory_agentmemory")


@pytest.mark.slow  # a sweep or a bank at scale: make test runs it
def test_a_recall_over_a_large_bank_reads_a_bounded_number_of_rows(world, settings):
    settings.AGENT_RECALL = {**settings.AGENT_RECALL, "exact_up_to": 500}
    agent = Agent.objects.create(world=world, external_id="keeper")
    _fill(agent, 5000)
    ask = {
        "world": world,
        "agent": agent,
        "query": "what about amber0 and cedar2?",
        "partner": "p3",
        "since": timezone.now() - timedelta(days=400),
        "limit": 10,
        "cooldown_s": 0,
    }
    plan = agent_recall.recall_explain(**ask)
    assert plan["path"] == "candidates" and "agentmemory_hnsw_384" in plan["indexes"], plan["indexes"]
    # each arm reads a bounded number (sample 500, full text 400, nearest 100, newest 4 x 30, the lines
    # around each candidate), and each candidate is read again by its key to be scored
    assert plan["rows_read"] < 3000, plan["rows_read"]
    settings.AGENT_RECALL = {**settings.AGENT_RECALL, "exact_up_to": 100_000}
    exact = agent_recall.recall_explain(**ask)
    assert exact["path"] == "exact" and exact["rows_read"] >= 5000


@pytest.mark.django_db(transaction=True)
def test_an_agent_with_a_large_bank_gets_an_index_of_its_own_and_loses_it_with_the_agent(world, settings):
    from memory.agents import agent_upkeep
    from workers.tasks import sweep

    settings.AGENT_RECALL = {**settings.AGENT_RECALL, "exact_up_to": 100, "own_index_from": 1500}
    agent = Agent.objects.create(world=world, external_id="keeper")
    _fill(agent, 1000)
    assert agent_upkeep.agent_upkeep_run(agent_id=agent.pk)["own_index"] is None, "not large enough yet"
    _fill(agent, 1000)
    with connection.cursor() as cursor:  # fact keys for some of them, embedded (as the pass makes them)
        cursor.execute(
            """
            INSERT INTO memory_agentmemorykey (memory_id, agent_id, text, embedding, embedding_model)
            SELECT m.id, m.agent_id, 'k: ' || m.content, m.embedding, m.embedding_model
            FROM memory_agentmemory m WHERE m.agent_id = %s ORDER BY m.id LIMIT 300
            """,
            [agent.pk],
        )
    name = agent_upkeep.agent_upkeep_run(agent_id=agent.pk)["own_index"]
    assert name == f"agentmemory_hnsw_a{agent.pk}_384"
    plan = agent_recall.recall_explain(
        world=world,
        agent=agent,
        query="what about amber0 and cedar2?",
        since=timezone.now() - timedelta(days=400),
        limit=10,
        cooldown_s=0,
    )
    assert plan["path"] == "candidates" and name in plan["indexes"], plan["indexes"]
    keys_index = f"agentmemorykey_hnsw_a{agent.pk}_384"
    assert keys_index in plan["indexes"], "its keys' own index gives the nearest keys"
    found, _ = agent_recall.agent_recall(
        world=world,
        agent=agent,
        query="what about amber0 and cedar2?",
        since=timezone.now() - timedelta(days=400),
        limit=10,
        cooldown_s=0,
    )
    assert len(found) == 10
    other = Agent.objects.create(world=world, external_id="other")
    _fill(other, 10)
    sweep()
    assert _index_exists(name), "the sweep keeps an index its agent uses"
    agent.delete()
    sweep()
    assert not _index_exists(name) and not _index_exists(keys_index)


def _index_exists(name):
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
        return cursor.fetchone()[0]


def test_a_recall_records_its_use_without_writing_to_any_index(world):
    """Recall writes when each memory it returns was last used; the table's pages keep room for those
    row versions (heap-only updates), so such a recall inserts into none of the table's indexes, its
    HNSW ones among them."""
    agent = Agent.objects.create(world=world, external_id="keeper")
    _fill(agent, 2000)

    def updates():  # this session's counts not yet flushed (earlier tests' too, since Postgres 15): a delta
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = 'memory_agentmemory'"
            )
            return cursor.fetchone()

    before = updates()
    found, _ = agent_recall.agent_recall(
        world=world,
        agent=agent,
        query="what about amber0 and cedar2?",
        limit=10,
        since=timezone.now() - timedelta(days=400),
        cooldown_s=0,
    )
    assert len(found) == 10
    after = updates()
    updated, heap_only = after[0] - before[0], after[1] - before[1]
    assert updated == 10 and heap_only == 10, (updated, heap_only)
