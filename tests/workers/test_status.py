from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from memory.models import Cursor
from memory.story import marks, memory_pass
from tests.support.story import grow
from workers.models import ParkedJob

pytestmark = pytest.mark.django_db


def test_the_sweeper_finds_lagging_adventures_and_backs_off_on_failing_ones(adventure, memory_llm):
    assert memory_pass.adventures_behind() == []
    grow(adventure, 12)
    assert memory_pass.adventures_behind() == [adventure.pk]
    memory_pass.run(adventure.pk)
    assert memory_pass.adventures_behind() == [], "caught up: nothing to do"
    grow(adventure, 18)
    Cursor.objects.filter(adventure=adventure).update(
        failures=3, last_error="bad key", last_error_at=timezone.now() - timedelta(minutes=2)
    )
    assert memory_pass.adventures_behind() == [], "failed 3 times: waits 8 minutes before the next try"
    Cursor.objects.filter(adventure=adventure).update(last_error_at=timezone.now() - timedelta(minutes=9))
    assert memory_pass.adventures_behind() == [adventure.pk]


def test_a_recorded_pass_counts_failures_and_clears_them_on_success(adventure, memory_llm):
    from tests.support.fake_llm import Reply

    grow(adventure, 12)
    memory_llm.queue(Reply(status=401))
    report = memory_pass.run_recorded(adventure.pk, worker="w1")
    assert report.errors and not report.transient, "a bad key is not worth a quick retry"
    assert Cursor.objects.get(adventure=adventure).failures == 1
    memory_pass.run_recorded(adventure.pk, worker="w1")
    cursor = Cursor.objects.get(adventure=adventure)
    assert cursor.failures == 0 and cursor.memory_depth == 12


def test_workers_status_shows_the_pool_to_operators(adventure, memory_llm, capsys, client, django_user_model):
    grow(adventure, 13)
    ParkedJob.objects.create(task_name="workers.post_turn", task_id="t-1", args=[adventure.pk], attempts=5)
    call_command("workers_status")
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "Adventures behind" in line)
    assert row.split("│")[2].strip() == "1"
    assert "parked: workers.post_turn" in out
    call_command("workers_status", "--json")
    import json

    status = json.loads(capsys.readouterr().out)
    assert status["adventures_behind"] == 1 and status["parked_jobs"] == 1 and status["redis"] == "up"
    assert status["recent_parked"][0]["args"] == [adventure.pk]

    staff = django_user_model.objects.create_user(username="ops", password="x", is_staff=True)
    player = django_user_model.objects.create_user(username="player", password="x")
    client.force_login(player)
    assert client.get("/api/admin/workers/").status_code == 403
    client.force_login(staff)
    response = client.get("/api/admin/workers/")
    assert response.status_code == 200 and response.json()["parked_jobs"] == 1


def test_adventures_that_keep_failing_never_starve_the_others_out_of_the_sweep(owner, memory_llm):
    """The backoff used to be applied after the batch was cut: enough failing adventures
    (lower ids first) filled it, and the healthy one behind them was never re-queued."""
    from stories.adventures import story_create

    made = []
    for n in range(6):
        a = story_create(owner_id=owner.pk, title=f"A{n}", opening="Action 1: dawn.")
        grow(a, 13)
        made.append(a)
    failing, healthy = made[:5], made[5]
    for a in failing:
        marks.cursor_ensure(a.pk)
        Cursor.objects.filter(adventure=a).update(failures=4, last_error="bad key", last_error_at=timezone.now())
    assert memory_pass.adventures_behind(limit=2) == [healthy.pk]
    # and a failing one comes back once its backoff (16 minutes at 4 failures) has passed
    Cursor.objects.filter(adventure=failing[0]).update(last_error_at=timezone.now() - timedelta(minutes=17))
    assert memory_pass.adventures_behind(limit=2) == [failing[0].pk, healthy.pk]
    # ten failures wait the hour cap, not 2^10 minutes
    Cursor.objects.filter(adventure=failing[1]).update(
        failures=10, last_error_at=timezone.now() - timedelta(minutes=61)
    )
    assert failing[1].pk in memory_pass.adventures_behind()


def test_the_sweep_marks_every_run_a_dead_worker_left_running_as_crashed(adventure):
    """An adventure whose worker died mid-pass and that is never played again must not keep a
    "running" pass forever (42 were seen after worker kills)."""
    from memory.models import PassRun
    from workers.tasks import sweep

    dead = PassRun.objects.create(adventure=adventure, worker="killed")
    PassRun.objects.filter(pk=dead.pk).update(
        started_at=timezone.now() - memory_pass.PASS_ABANDONED_AFTER - timedelta(minutes=1)
    )
    busy = PassRun.objects.create(adventure=adventure, worker="busy")
    sweep()
    assert PassRun.objects.get(pk=dead.pk).outcome == "crashed"
    assert PassRun.objects.get(pk=busy.pk).outcome == "running", "a pass within its time is left alone"
