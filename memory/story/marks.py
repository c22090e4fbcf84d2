"""The pass's marks and pace: how far the adventure's memories and its summary have come along
the head's path (the Cursor's two marks, moved only by compare-and-set in the transaction that
stores what they cover), and when work is due (block size, threshold, summary interval)."""

from __future__ import annotations

import redis
from django.db import transaction
from django.db.models import F, Q, QuerySet, Value
from django.db.models.functions import Coalesce

from config.compiled_once import CompiledOnce
from config.redis_pool import redis_client
from memory.models import Cursor
from memory.story.blocks import own_memories
from stories.models import Adventure, Branch
from stories.tree import lineage

MEMORY_INTERVAL = 6  # actions per memory block
MEMORY_THRESHOLD = 12  # story actions on the path before the first memories
MEMORIES_PER_RUN = 5  # imports catch up over several runs
SUMMARY_INTERVAL = 15  # actions past the summary mark before a rewrite


def cursor_of(adventure_id: int) -> Cursor:
    """The adventure's marks as stored, or both at the root (unsaved) before its first pass. Writes
    nothing: ``cursor_ensure`` makes the row the pass moves its marks on."""
    return Cursor.objects.filter(adventure_id=adventure_id).first() or Cursor(adventure_id=adventure_id)


def cursor_ensure(adventure_id: int) -> Cursor:
    """The adventure's marks, the row made (both marks at the root) when the pass first runs. Read
    through a statement compiled once: every pass asks it."""
    found = _CURSOR.first(adventure_id=adventure_id)
    return found if found is not None else Cursor.objects.get_or_create(adventure_id=adventure_id)[0]


_CURSOR = CompiledOnce(lambda shape, adventure_id: Cursor.objects.filter(adventure_id=adventure_id))


def with_marks(adventures: QuerySet) -> QuerySet:
    """``adventures`` annotated with the head's tip and both marks' depths (``tip``, ``mem``, ``summ``),
    for MEMORIES_DUE and SUMMARY_DUE."""
    return adventures.annotate(
        tip=F("head_branch__tip_depth"),
        mem=Coalesce(F("memory_cursor__memory_depth"), Value(0)),
        summ=Coalesce(F("memory_cursor__summary_depth"), Value(0)),
    )


# The one rule of "behind": a block of memories is due once the path holds MEMORY_THRESHOLD actions
# and a whole block past the memory mark; a summary once SUMMARY_INTERVAL actions past its mark.
MEMORIES_DUE = Q(memory_bank_enabled=True, tip__gte=MEMORY_THRESHOLD) & Q(tip__gte=F("mem") + MEMORY_INTERVAL)
SUMMARY_DUE = Q(auto_summarize=True, tip__gte=F("summ") + SUMMARY_INTERVAL)


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


def memory_mark(*, adventure: Adventure, head: Branch, cursor: Cursor | None = None) -> tuple[int | None, int]:
    """The memory mark as a node on the head's path; reconciled (compare-and-set)
    when the player moved to a path the mark is not on. ``cursor``: the pass's own
    copy of the marks (read once a pass; every move is a compare-and-set, so a copy
    another run made stale only loses a race), kept current here."""
    cursor = cursor if cursor is not None else cursor_of(adventure.pk)
    old = (cursor.memory_branch_id, cursor.memory_depth)
    if lineage.on_path(head, *old):
        return old
    new = lineage.node_ref(head, covered_depth(head))
    with transaction.atomic():
        if not mark_move(adventure.pk, "memory", old, new):
            moved = cursor_of(adventure.pk)
            new = (moved.memory_branch_id, moved.memory_depth)
    cursor.memory_branch_id, cursor.memory_depth = new
    return new


# ---------------------------------------------------------------------------- quiet until a depth
# Most turns make nothing due (a block every MEMORY_INTERVAL actions, a summary every SUMMARY_INTERVAL):
# measured, 59% of an evening's passes did nothing, each a job sent and taken, its lock, its record and
# its reads. A pass that leaves nothing due but what the story's growth brings says, in Redis, the depth
# at which its next block or summary comes due; a turn's reply that grows the path to less than that
# sends no pass (workers.tasks.send_post_turn). Every other change (an edit, an undo, a hide, a secret,
# a failed turn) sends its pass and forgets the depth. The key is a hint: the marks are the truth, the
# sweeper (MEMORIES_DUE, SUMMARY_DUE) catches up what a race left, and with Redis away every turn sends.
QUIET_KEY = "everlore:pass-quiet:{}"
QUIET_TTL_S = 3600
QUIET_NEVER = 2**31 - 1  # a story whose bank and summary are both off: growth brings nothing due


def quiet_until(adventure_id: int, depth: int | None) -> None:
    """Record that nothing is due on the path before ``depth`` but what growth brings (None: not known;
    the next change sends its pass)."""
    key = QUIET_KEY.format(adventure_id)
    try:
        if depth is None:
            redis_client().delete(key)
        else:
            redis_client().set(key, depth, ex=QUIET_TTL_S)
    except redis.RedisError:
        pass  # the key lives no longer than its TTL; without it every turn sends its pass


def quiet_at(adventure_id: int, depth: int) -> bool:
    """Whether a path grown to ``depth`` leaves the adventure's pass nothing to do (its last pass said so)."""
    try:
        until = redis_client().get(QUIET_KEY.format(adventure_id))
    except redis.RedisError:
        return False
    return until is not None and depth < int(until)
