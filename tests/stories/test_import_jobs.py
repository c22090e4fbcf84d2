"""Imports are jobs: the request checks the document and answers 202 with a job; a large one is
imported by a real worker while the player polls it (running, its stage and counts, then done with
the new adventure, or failed with the answer the document earned and nothing stored); a worker
killed mid-import leaves nothing half done and the job is imported exactly once; a lost delivery
is sent again by the sweeper; a player has a bounded number of imports waiting."""

import psutil
import pytest

from play import imports
from stories.models import Action, Adventure, ImportJob
from tests.support.processes import Worker, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def document(actions: int, *, title="A long road", memories: int = 0) -> dict:
    return {
        "format": "everlore.adventure",
        "version": 1,
        "adventure": {"title": title, "opening": "The road begins."},
        "head": 7,
        "branches": [
            {
                "id": 7,
                "parent": None,
                "fork_depth": 0,
                "lineage": [],
                "tip_depth": actions,
                "name": "",
                "internal": False,
            }
        ],
        "actions": [
            {
                "branch": 7,
                "depth": d,
                "kind": "do" if d % 2 else "story",
                "live": True,
                "text": f"Step {d}: you walk on along the river and watch the water.",
                "created_at": "2026-01-01T00:00:00+00:00",
                "edited_at": None,
            }
            for d in range(1, actions + 1)
        ],
        "cards": [],
        "memories": [
            {"branch": 7, "depth": min(actions, 6 * k + 6), "text": f"Memory {k} of the river."}
            for k in range(memories)
        ],
    }


@pytest.fixture
def worker():
    w = Worker().wait_ready()
    yield w
    w.stop()


@pytest.fixture
def queued_imports(monkeypatch):
    """Every document above 10 rows goes to the workers (the production threshold is 2,000)."""
    monkeypatch.setattr(imports, "IMPORT_INLINE_ROWS", 10)


def poll(api, job_id, seen=None, timeout=120):
    def finished():
        state = api.get(f"/api/imports/{job_id}/").json()
        if seen is not None:
            seen.append(state)
        return state if state["status"] in ("done", "failed") else None

    return wait_for(finished, timeout=timeout, interval=0.05, what=f"import job {job_id} to finish")


def test_a_small_import_is_done_in_the_request_and_its_job_says_so(alice_plays):
    response = alice_plays.post("/api/adventures/import/", document(20, title="Short"), format="json")
    assert response.status_code == 202 and response["Location"] == f"/api/imports/{response.json()['id']}/"
    job = response.json()
    assert job["status"] == "done" and job["progress"] == {"stage": "done", "done": 21, "total": 21}
    assert Action.objects.filter(adventure_id=job["adventure_id"]).count() == 20
    assert [j["id"] for j in alice_plays.get("/api/imports/").json()] == [job["id"]]


@pytest.mark.slow  # a real worker process
def test_a_large_import_runs_in_a_worker_while_the_player_polls_its_progress(
    alice, alice_plays, worker, queued_imports
):
    response = alice_plays.post("/api/adventures/import/", document(12000, memories=300), format="json")
    assert response.status_code == 202, response.content
    job = response.json()
    assert job["status"] in ("queued", "running") and job["adventure_id"] is None and job["rows"] == 12301
    assert alice_plays.get("/api/adventures/").json() == [], "nothing is imported in the request"
    wait_for(
        lambda: alice_plays.get(f"/api/imports/{job['id']}/").json()["status"] == "running",
        timeout=60,
        interval=0.02,
        what="the import to start",
    )
    second = alice_plays.post("/api/adventures/import/", document(3000, title="Another road"), format="json")
    assert second.status_code == 202 and second.json()["status"] == "queued"
    assert alice_plays.get(f"/api/imports/{job['id']}/").json()["status"] == "running", (
        "the second file was taken while the first was still being imported (its job row is the worker's)"
    )
    seen = []
    done = poll(alice_plays, job["id"], seen)
    assert done["status"] == "done", done
    running = [s["progress"] for s in seen if s["status"] == "running"]
    assert running or seen[0]["status"] == "done", "the job was seen running"
    assert {p["stage"] for p in running} <= {"checking", "story", "memories", "summary"}
    story = [p["done"] for p in running if p["stage"] == "story"]
    assert story == sorted(story), "progress only goes forward"
    adventure = Adventure.objects.get(pk=done["adventure_id"])
    assert adventure.owner_id == alice.id and adventure.title == "A long road"
    assert Action.objects.filter(adventure=adventure).count() == 12000
    assert poll(alice_plays, second.json()["id"])["status"] == "done"
    assert adventure.memories.count() >= 300
    assert ImportJob.objects.get(pk=job["id"]).document is None, "the file is let go once imported"


@pytest.mark.slow  # a real worker process
def test_a_document_the_worker_refuses_fails_its_job_naming_the_field_and_stores_nothing(
    alice_plays, worker, queued_imports
):
    bad = document(3000)
    bad["actions"][2500]["depth"] = "abc"
    response = alice_plays.post("/api/adventures/import/", bad, format="json")
    assert response.status_code == 202, "its outer shape is right: the rows are checked by the job"
    failed = poll(alice_plays, response.json()["id"])
    assert failed["status"] == "failed" and failed["adventure_id"] is None
    assert "actions[2500].depth" in failed["error"]["detail"] and failed["error"]["error"] == "invalid"
    assert not Adventure.objects.exists() and not Action.objects.exists()

    wrong = alice_plays.post("/api/adventures/import/", {**bad, "format": "something else"}, format="json")
    assert wrong.status_code == 400 and "format" in wrong.json()["detail"], "the envelope is checked at once"
    too_many = alice_plays.post("/api/adventures/import/", {**bad, "actions": [{}] * 20_001}, format="json")
    assert too_many.status_code == 400 and "actions" in too_many.json()["detail"]
    assert ImportJob.objects.count() == 1


@pytest.mark.slow  # a real worker process
def test_a_worker_killed_mid_import_leaves_nothing_half_done_and_the_job_is_imported_once(
    alice_plays, worker, queued_imports
):
    job = alice_plays.post("/api/adventures/import/", document(12000, title="Once"), format="json").json()
    wait_for(
        lambda: alice_plays.get(f"/api/imports/{job['id']}/").json()["status"] == "running",
        timeout=60,
        interval=0.02,
        what="the import to start",
    )
    children = psutil.Process(worker.proc.pid).children()
    assert children, "the worker's pool process"
    for child in children:
        child.kill()  # the pool process importing it dies: the task is given back (reject_on_worker_lost)
    done = poll(alice_plays, job["id"], timeout=180)
    assert done["status"] == "done", done
    assert Adventure.objects.filter(title="Once").count() == 1
    assert Action.objects.count() == 12000


@pytest.mark.slow  # a real worker process
def test_a_whole_worker_killed_mid_import_shows_retrying_and_the_next_sweep_sends_it_again(
    alice_plays, worker, queued_imports
):
    """SIGKILL to the worker and its pool: its unacknowledged message would come back only after the
    broker's visibility timeout (minutes). The job shows ``retrying`` at once and the sweeper's next
    round (every SWEEP_INTERVAL_S) sends it again; it is imported once."""
    from workers import tasks

    job = alice_plays.post("/api/adventures/import/", document(12000, title="Twice"), format="json").json()
    wait_for(
        lambda: alice_plays.get(f"/api/imports/{job['id']}/").json()["status"] == "running",
        timeout=60,
        interval=0.02,
        what="the import to start",
    )
    main = psutil.Process(worker.proc.pid)
    for process in [*main.children(recursive=True), main]:
        process.kill()
    state = wait_for(
        lambda: (s := alice_plays.get(f"/api/imports/{job['id']}/").json())["status"] == "retrying" and s,
        timeout=30,
        what="the job to show it waits to be retried",
    )
    assert "attempt 1 of 3" in state["note"] and state["progress"] is None, state
    assert job["id"] in tasks.imports.jobs_resend(), "sent again at the next sweep, not minutes later"
    assert tasks.imports.jobs_resend() == [], "and once"
    again = Worker().wait_ready()
    try:
        done = poll(alice_plays, job["id"], timeout=180)
    finally:
        again.stop()
    assert done["status"] == "done", done
    assert Adventure.objects.filter(title="Twice").count() == 1 and Action.objects.count() == 12000
    # the killed worker's message waits in the broker's unacknowledged set for its visibility timeout
    # (minutes): this test's leftover, which would hold up any later test that waits for a drained queue
    from config.redis_pool import redis_client

    redis_client().delete("unacked", "unacked_index")


@pytest.mark.slow  # a real worker process
def test_an_import_past_its_time_limit_fails_saying_so_and_stores_nothing(alice_plays, queued_imports):
    # a tenth of a second: 35,001 rows take many times that even on a quiet machine
    slow = Worker(extra_env={"IMPORT_TIME_LIMIT_S": "0.1"}).wait_ready()
    try:
        job = alice_plays.post("/api/adventures/import/", document(20000, memories=15000), format="json").json()
        failed = poll(alice_plays, job["id"], timeout=90)
    finally:
        slow.stop()
    assert failed["status"] == "failed" and failed["adventure_id"] is None, (failed, slow.log())
    assert failed["error"]["error"] == "timeout" and "longer than 0.1 seconds and" in failed["error"]["detail"]
    assert not Adventure.objects.exists() and not Action.objects.exists()


@pytest.mark.slow  # a real worker process
def test_an_import_needing_more_memory_than_its_bound_fails_saying_so_and_its_worker_goes_on(
    alice_plays, queued_imports
):
    small = Worker(extra_env={"IMPORT_MEMORY_MB": "16"}).wait_ready()
    try:
        job = alice_plays.post("/api/adventures/import/", document(20000, memories=15000), format="json").json()
        try:
            failed = poll(alice_plays, job["id"], timeout=90)
        except AssertionError as timed_out:
            raise AssertionError(small.log()[-6000:]) from timed_out
        assert failed["status"] == "failed", (failed, small.log())
        assert failed["error"]["error"] == "too_large" and "more than 16 MB" in failed["error"]["detail"]
        assert not Adventure.objects.exists() and not Action.objects.exists()
        fits = alice_plays.post("/api/adventures/import/", document(300, title="Fits"), format="json").json()
        fitted = poll(alice_plays, fits["id"])
        assert fitted["status"] == "done", ("the same worker imports the next file", fitted, small.log()[-4000:])
    finally:
        small.stop()
    assert Adventure.objects.get().title == "Fits"


@pytest.mark.slow  # a real worker process
def test_a_lost_delivery_is_sent_again_by_the_sweeper(alice_plays, queued_imports, settings):
    from datetime import timedelta

    from django.utils import timezone

    from workers import tasks

    job = alice_plays.post("/api/adventures/import/", document(50, title="Lost"), format="json").json()
    assert job["status"] == "queued"
    from celery import current_app

    current_app.control.purge()  # the broker lost it
    ImportJob.objects.filter(pk=job["id"]).update(
        sent_at=timezone.now() - timedelta(seconds=settings.IMPORT_TIME_LIMIT_S + 120)
    )
    w = Worker().wait_ready()
    try:
        assert tasks.sweep() >= 0
        done = poll(alice_plays, job["id"])
    finally:
        w.stop()
    assert done["status"] == "done" and Adventure.objects.filter(title="Lost").count() == 1


def test_a_player_has_at_most_three_imports_waiting(alice_plays, bob_api, queued_imports):
    for n in range(imports.IMPORTS_QUEUED_MAX):
        assert (
            alice_plays.post("/api/adventures/import/", document(20, title=f"W{n}"), format="json").json()["status"]
            == "queued"
        )
    refused = alice_plays.post("/api/adventures/import/", document(20), format="json")
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert "3 imports waiting" in refused.json()["detail"]
    assert ImportJob.objects.count() == 3
    assert bob_api.post("/api/adventures/import/", document(20), format="json").status_code == 202, (
        "another player's imports are theirs"
    )
    other = ImportJob.objects.filter(owner__username="alice").first()
    assert bob_api.get(f"/api/imports/{other.pk}/").status_code == 404
