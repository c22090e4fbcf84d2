"""The pass's marks and pace: how far the adventure's memories and its summary have come along
the head's path (the Cursor's two marks, moved only by compare-and-set in the transaction that
stores what they cover), and when work is due (block size, threshold, summary interval)."""

from __future__ import annotations

from django.db import transaction

from memory.models import Cursor
from memory.story.blocks import own_memories
from stories.models import Adventure, Branch
from stories.tree import lineage

MEMORY_INTERVAL = 6  # actions per memory block
MEMORY_THRESHOLD = 12  # story actions on the path before the first memories
MEMORIES_PER_RUN = 5  # imports catch up over several runs
SUMMARY_INTERVAL = 15  # actions past the summary mark before a rewrite


def cursor_for(adventure_id: int) -> Cursor:
    cursor, _ = Cursor.objects.get_or_create(adventure_id=adventure_id)
    return cursor


def on_path(branch: Branch, node_branch_id: int | None, depth: int) -> bool:
    """Whether the node (node_branch_id, depth) is on ``branch``'s path; depth 0 always is."""
    if depth == 0:
        return True
    return (
        node_branch_id is not None and depth <= branch.tip_depth and lineage.owner_at(branch, depth) == node_branch_id
    )


def node_of(branch: Branch, depth: int) -> int | None:
    return lineage.owner_at(branch, depth) if depth else None


def mark_move(adventure_id: int, mark: str, old: tuple[int | None, int], new: tuple[int | None, int]) -> bool:
    """Compare-and-set of a cursor mark ("memory" or "summary"): the one write
    path of a cursor. Must run in the transaction that stores what it covered."""
    return (
        Cursor.objects.filter(
            adventure_id=adventure_id, **{f"{mark}_branch_id": old[0], f"{mark}_depth": old[1]}
        ).update(**{f"{mark}_branch_id": new[0], f"{mark}_depth": new[1]})
        == 1
    )


def covered_depth(branch: Branch) -> int:
    """End of the contiguous run of block memories from depth 1 on ``branch``'s path."""
    covered = 0
    for start, end in (
        own_memories(branch)
        .filter(source_start__isnull=False)
        .order_by("source_start")
        .values_list("source_start", "source_end")
    ):
        if start != covered + 1:
            break
        covered = end
    return covered


def memory_mark(*, adventure: Adventure, head: Branch) -> tuple[int | None, int]:
    """The memory mark as a node on the head's path; reconciled (compare-and-set)
    when the player moved to a path the mark is not on."""
    cursor = cursor_for(adventure.pk)
    old = (cursor.memory_branch_id, cursor.memory_depth)
    if on_path(head, *old):
        return old
    covered = covered_depth(head)
    new = (node_of(head, covered), covered)
    with transaction.atomic():
        if not mark_move(adventure.pk, "memory", old, new):
            return (cursor_for(adventure.pk).memory_branch_id, cursor_for(adventure.pk).memory_depth)
    return new
