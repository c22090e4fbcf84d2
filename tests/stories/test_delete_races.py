"""Deleting an adventure while its memory pass writes for it: the delete
always succeeds and takes everything along. Without a lock, a pass run
committed after Django gathered what to delete (but before the adventure's own
row went) failed the player's delete with a 500 (seen in bench/concurrency.py)."""

import threading

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models.signals import post_delete

from memory.models import PassRun
from stories.adventures import story_create
from stories.models import Adventure, Branch
from stories.tree.writes import adventure_delete
from tests.support.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _someone_waits_on_a_lock() -> bool:
    from django.db import connections

    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")  # asked inside the delete's transaction: no stale view
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0


def test_a_pass_run_committed_mid_delete_does_not_fail_the_delete(alice):
    adventure = story_create(owner_id=alice.pk, title="Race", opening="Dusk.")
    pass_outcome = {}

    def memory_pass_writes():
        try:
            with transaction.atomic():
                PassRun.objects.create(adventure_id=adventure.pk, worker="w1")
            pass_outcome["committed"] = True
        except IntegrityError:
            pass_outcome["refused"] = True  # the adventure went first: the pass has nothing to write for
        finally:
            connection.close()

    writer = threading.Thread(target=memory_pass_writes)

    def mid_delete(sender, instance, **kwargs):
        # the delete has gathered what to remove and removed the branches; the pass commits now
        if not writer.is_alive() and not pass_outcome:
            writer.start()
            wait_for(
                lambda: pass_outcome or _someone_waits_on_a_lock(),
                timeout=20,
                what="the pass to commit or to wait for the delete",
            )

    post_delete.connect(mid_delete, sender=Branch)
    try:
        adventure_delete(adventure_id=adventure.pk)
    finally:
        post_delete.disconnect(mid_delete, sender=Branch)
        writer.join(30)
    assert not Adventure.objects.filter(pk=adventure.pk).exists()
    assert not PassRun.objects.filter(adventure_id=adventure.pk).exists()
    assert pass_outcome == {"refused": True}, "the pass waited for the delete, then found its adventure gone"


@pytest.mark.parametrize("claimed", [False, True])
def test_a_node_placed_while_an_undo_holds_the_story_ends_what_that_undo_kept_to_redo(alice, claimed):
    """An undo holds the story's lock and keeps its turn to redo; a node placed meanwhile waits for the
    lock and must then end what the undo kept (a redo after it would bring back a turn from before the
    new one). A placement is one statement whose snapshot predates the wait, so it runs alone only for
    a generation holding its claim, which an undo is refused while it holds: with no claim it takes the
    lock first. Claimed: the undo comes first and the claim after it (the claim waits for the undo)."""
    from stories.models import RedoTurn
    from stories.tree import generation, writes

    adventure = story_create(owner_id=alice.pk, title="Race", opening="Dusk.")
    branch_id = Adventure.objects.get(pk=adventure.pk).head_branch_id
    placed = {}

    def place():
        try:
            if claimed:
                token = generation.generation_claim(
                    adventure_id=adventure.pk
                )  # waits for the undo's lock, as a turn's does
                with generation.held(token):
                    placed["node"] = writes.place(adventure_id=adventure.pk, branch_id=None, kind="do", text="Go.")
            else:
                placed["node"] = writes.place(adventure_id=adventure.pk, branch_id=None, kind="do", text="Go.")
        finally:
            connection.close()

    with transaction.atomic():  # the undo: the lock, then its turn kept to redo
        writes.lock(adventure.pk)
        RedoTurn.objects.create(branch_id=branch_id, from_depth=2, nodes=[{"kind": "do", "text": "Undone."}])
        placing = threading.Thread(target=place)
        placing.start()
        wait_for(_someone_waits_on_a_lock, timeout=20, what="the placement to wait for the undo's lock")
    placing.join(30)
    assert placed["node"].depth == 2
    assert not RedoTurn.objects.filter(branch_id=branch_id).exists(), "the new node ended what undo kept"
