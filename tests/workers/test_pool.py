"""The worker pool under load, races, lost locks, crashes, outages and poison
jobs: real Redis, real `celery worker` processes, the fake model over HTTP."""

import os
import signal

import psutil
import pytest
from django.db.models import Count

from config.celery import PASSES, QUEUES
from memory.models import Cursor, Memory, PassRun
from stories.adventures import story_create
from tests.support.processes import Worker, broker_clear, wait_for
from tests.support.story import grow, is_memory_request
from workers.models import ParkedJob
from workers.tasks import post_turn

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# Retries back off 1 s; a lock held by a dead worker ends after 3 s (and so the follow-up a coalesced
# job queues comes 3 s later, not the production 60 s that a test would sit out).
FAST_JOBS = {"JOB_RETRY_BACKOFF_S": "1", "WORKER_LOCK_TTL_MS": "3000"}


def blocks_of(adventure_id):
    return list(
        Memory.objects.filter(adventure_id=adventure_id, source_start__isnull=False)
        .order_by("source_start")
        .values_list("source_start", "source_end")
    )


def expected_blocks(actions):
    return [(s, s + 5) for s in range(1, actions - 4, 6) if s + 5 <= actions]


def make_adventures(owner, count, actions):
    made = []
    for n in range(count):
        adventure = story_create(owner_id=owner.pk, title=f"Load {n}", opening="Action 1: dawn.", persona_name="Mira")
        grow(adventure, actions)
        made.append(adventure.pk)
    return made


def queue_drained() -> bool:
    """No job waits in the broker's queue and none is taken but unacknowledged."""
    from config.redis_pool import redis_client

    client = redis_client()
    return not any(client.llen(name) for name in QUEUES) and client.hlen("unacked") == 0


def purge_queued() -> None:
    """Drop every job waiting in the broker's queues (what ``control.purge`` does on Redis, for both)."""
    from config.redis_pool import redis_client

    redis_client().delete(*QUEUES)


def no_duplicates(adventure_ids):
    dupes = (
        Memory.objects.filter(adventure_id__in=adventure_ids, source_start__isnull=False)
        .values("adventure_id", "branch_id", "source_start")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
    )
    return not dupes.exists()


@pytest.fixture
def pool():
    broker_clear()
    workers = []

    def start(n, **env):
        for _ in range(n):
            workers.append(Worker(extra_env={**FAST_JOBS, **env}))
        for w in workers[-n:]:
            w.wait_ready()
        return workers[-n:]

    yield start
    for w in workers:  # all asked at once: each warm shutdown takes a few seconds
        if w.proc.poll() is None:
            w.proc.send_signal(signal.SIGTERM)
    for w in workers:
        w.stop()


def test_three_workers_catch_twelve_adventures_up_with_no_duplicate_and_no_gap(owner, memory_llm, pool):
    memory_llm.latency = 0.02
    ids = make_adventures(owner, 12, 81)  # 40 turns after the opening
    pool(3)
    for turn in range(40):  # every turn of every adventure enqueues a pass, interleaved
        for adventure_id in ids:
            post_turn.apply_async(args=[adventure_id])
    wait_for(
        lambda: all(len(blocks_of(a)) == 13 for a in ids), timeout=240, interval=1, what="every adventure's 13 memories"
    )
    # late passes must add nothing: drop the jobs still queued (hundreds of coalesced
    # enqueues), then wait until every job already taken has run to its end
    purge_queued()
    wait_for(
        lambda: queue_drained() and not PassRun.objects.filter(finished_at__isnull=True).exists(),
        timeout=120,
        interval=0.5,
        what="the jobs in hand to end",
    )
    for adventure_id in ids:
        assert blocks_of(adventure_id) == expected_blocks(81)
        assert Cursor.objects.get(adventure_id=adventure_id).memory_depth == 78
    assert no_duplicates(ids)


def test_the_pass_worker_of_threads_waits_on_many_stories_models_at_once_and_catches_each_up(owner, memory_llm):
    """`make run`'s pass worker (one process of threads, config.celery's passes queue) holds a pass a
    thread: six stories whose memory calls each wait on a slow model are waited on together, not two
    at a time as by two processes (the evening bench left 533 of 1,000 stories behind that way), and
    each story's blocks are written once, as by processes."""
    memory_llm.latency = 1.0  # each memory call waits a second on the model
    ids = make_adventures(owner, 6, 25)  # two blocks due in each
    broker_clear()
    worker = Worker(pool="threads", concurrency=8, queues=(PASSES,), extra_env=FAST_JOBS).wait_ready()
    try:
        for adventure_id in ids:
            post_turn.apply_async(args=[adventure_id])
        wait_for(
            lambda: all(len(blocks_of(a)) == 4 for a in ids), timeout=120, interval=0.5, what="every story's 4 blocks"
        )
    finally:
        worker.stop()
    assert memory_llm.in_flight_max >= 4, f"at most {memory_llm.in_flight_max} of six stories' calls waited at once"
    for adventure_id in ids:
        assert blocks_of(adventure_id) == expected_blocks(25)
    assert no_duplicates(ids)


def test_one_job_works_through_a_backlog_without_waiting_for_the_sweeper(owner, memory_llm, pool):
    """An import leaves many blocks due; the pass writes its cap and queues the next at once."""
    (adventure_id,) = make_adventures(owner, 1, 100)  # 16 blocks: four passes of at most five
    pool(1)
    post_turn.apply_async(args=[adventure_id])  # one job, and no beat running
    wait_for(lambda: len(blocks_of(adventure_id)) == 16, timeout=120, interval=0.5, what="the whole backlog")
    runs = PassRun.objects.filter(adventure_id=adventure_id)
    assert runs.count() >= 4 and max(runs.values_list("memories_created", flat=True)) <= 5, (
        "each pass keeps the cap of five memories"
    )
    assert blocks_of(adventure_id) == expected_blocks(100) and no_duplicates([adventure_id])


def test_two_hundred_enqueues_of_one_adventure_never_overlap_and_call_the_model_once_per_block(owner, memory_llm, pool):
    memory_llm.latency = 0.05
    (adventure_id,) = make_adventures(owner, 1, 81)
    pool(3)
    for _ in range(200):
        post_turn.apply_async(args=[adventure_id])
    wait_for(lambda: len(blocks_of(adventure_id)) == 13, timeout=180, interval=0.5, what="13 memories")
    wait_for(lambda: not PassRun.objects.filter(finished_at__isnull=True).exists(), timeout=60, what="passes to end")
    runs = list(
        PassRun.objects.filter(adventure_id=adventure_id)
        .order_by("started_at")
        .values_list("started_at", "finished_at", "worker")
    )
    assert len(runs) >= 3, "13 blocks at five a pass take three passes at least"
    for (_, end, _), (start, _, _) in zip(runs, runs[1:]):
        assert end <= start, "two passes of one adventure overlapped"
    memory_calls = [r for r in memory_llm.chat_requests() if is_memory_request(r)]
    assert len(memory_calls) <= 13 * 1.05
    assert no_duplicates([adventure_id])


def test_a_lock_lost_mid_call_wastes_a_call_at_most_and_writes_no_duplicate(owner, memory_llm, pool):
    memory_llm.latency = 0.6
    (adventure_id,) = make_adventures(owner, 1, 24)
    # the lock expires long before a model call ends, and is never extended
    pool(2, WORKER_LOCK_TTL_MS="200", WORKER_LOCK_EXTEND_MS="60000")
    for n in range(6):  # spread over 1.5 s by the broker's countdown, so passes meet mid-call
        post_turn.apply_async(args=[adventure_id], countdown=0.3 * n)
    wait_for(lambda: len(blocks_of(adventure_id)) == 4, timeout=120, interval=0.5, what="4 memories")
    wait_for(lambda: not PassRun.objects.filter(finished_at__isnull=True).exists(), timeout=60, what="passes to end")
    runs = list(PassRun.objects.filter(adventure_id=adventure_id).values_list("started_at", "finished_at"))
    overlapped = any(a[0] < b[1] and b[0] < a[1] for i, a in enumerate(runs) for b in runs[i + 1 :])
    assert overlapped, "the test must really run two passes at once"
    memory_calls = [r for r in memory_llm.chat_requests() if is_memory_request(r)]
    assert len(memory_calls) > 4, "the stale writer made a call..."
    assert blocks_of(adventure_id) == expected_blocks(24), "...and its result was discarded"
    assert no_duplicates([adventure_id])


def test_a_worker_killed_mid_call_is_replaced_and_the_work_finishes(owner, memory_llm, pool):
    memory_llm.latency = 3.0
    (adventure_id,) = make_adventures(owner, 1, 12)
    workers = pool(2, WORKER_LOCK_TTL_MS="2000")
    post_turn.apply_async(args=[adventure_id])
    wait_for(lambda: any(is_memory_request(r) for r in memory_llm.requests), timeout=30, what="a model call")
    run = PassRun.objects.get(adventure_id=adventure_id)
    victim = next(w for w in workers if w.hostname == run.worker)
    children = psutil.Process(victim.proc.pid).children()
    assert children, "the pool process running the job"
    memory_llm.latency = 0.05
    for child in children:
        os.kill(child.pid, signal.SIGKILL)
    # bounded: the lock's TTL (2 s) plus redelivery, well inside this limit
    wait_for(lambda: len(blocks_of(adventure_id)) == 2, timeout=60, interval=0.5, what="the work to finish")
    assert blocks_of(adventure_id) == [(1, 6), (7, 12)] and no_duplicates([adventure_id])


def test_a_poison_job_is_parked_after_its_attempts_and_others_keep_flowing(owner, memory_llm, pool):
    from tests.support.poison import poison

    ids = make_adventures(owner, 3, 12)
    workers = [
        Worker(extra_env={**FAST_JOBS, "JOB_MAX_ATTEMPTS": "3"}, include="tests.support.poison") for _ in range(2)
    ]
    try:
        for w in workers:
            w.wait_ready()
        poison.apply_async(args=[1])
        for adventure_id in ids:
            post_turn.apply_async(args=[adventure_id])
        wait_for(
            lambda: ParkedJob.objects.filter(task_name="tests.poison").exists(),
            timeout=120,
            interval=0.5,
            what="the poison job to be parked",
        )
        wait_for(lambda: all(len(blocks_of(a)) == 2 for a in ids), timeout=60, interval=0.5, what="other work")
    finally:
        for w in workers:
            w.stop()
    parked = ParkedJob.objects.get(task_name="tests.poison")
    assert parked.attempts == 3 and parked.args == [1]


@pytest.mark.alone
def test_turns_survive_a_broker_outage_and_the_sweeper_catches_up(owner, memory_llm, settings, caplog):
    from config import embedded
    from tests.conftest import api_client_for
    from tests.support.processes import Beat

    api = api_client_for(owner)
    aid = api.post("/api/adventures/", {"title": "Outage", "opening": "Dawn."}, format="json").json()["id"]
    data_dir = settings.DATA_DIR
    state = embedded._redis_state(data_dir)
    embedded.stop_redis(data_dir)
    try:
        statuses = [
            api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "walk on"}, format="json").status_code
            for _ in range(8)
        ]
    finally:
        embedded._start_redis(data_dir / "redis", state)
    assert statuses == [201] * 8, "every turn answered 2xx while Redis was down"
    assert "not queued" in caplog.text
    assert blocks_of(aid) == []
    worker = Worker(extra_env=FAST_JOBS).wait_ready()
    beat = Beat(extra_env={"SWEEP_INTERVAL_S": "2"})
    try:
        actions = 1 + 2 * len(statuses)
        wait_for(
            lambda: blocks_of(aid) == expected_blocks(actions),
            timeout=90,
            interval=0.5,
            what="the sweeper to catch the adventure up",
        )
    finally:
        beat.stop()
        worker.stop()


def test_a_batch_of_events_past_one_passs_share_is_all_embedded_and_keyed_by_the_workers(owner, pool):
    """An agent pass embeds 256 memories and makes the keys of 256 at a time; a batch of 300 events
    leaves more, and the pass runs again until none is left (it once stopped at 256)."""
    from memory.agents import agent_events
    from memory.models import AgentMemory, AgentMemoryKey, World

    pool(1)
    world = World.objects.create(owner=owner, name="Busy square", agent_capacity=1000)
    agent_events.events_record(
        world=world,
        events=[
            agent_events.Event(type="observe", actor="ann", text=f"I counted {n} carts crossing the old bridge today.")
            for n in range(300)
        ],
    )
    ann = AgentMemory.objects.filter(agent__external_id="ann")
    wait_for(
        lambda: (
            queue_drained()
            and not ann.filter(embedding=None).exists()
            and not ann.filter(keys_made="").exists()
            and not AgentMemoryKey.objects.filter(embedding=None).exists()
        ),
        timeout=120,
        interval=0.5,
        what="every memory and key embedded",
    )
    assert ann.count() == 300 and AgentMemoryKey.objects.filter(memory__in=ann).count() == 300
