"""Keeps memories attached to the story tree. Runs inside the tree's own
transaction (stories.tree.writes sends the signals synchronously)."""

from __future__ import annotations

from django.db.models import F
from django.dispatch import receiver

from memory.models import Cursor, Memory
from memory.story import canon, claims, summaries
from memory.story.marks import MEMORY_INTERVAL, mark_move
from stories.models import Branch
from stories.tree import lineage
from stories.tree.writes import head_moved, nodes_copied, story_rewritten


@receiver(story_rewritten, dispatch_uid="memory.story.sync.story_rewritten")
def on_story_rewritten(sender, *, adventure_id: int, branch_id: int, from_depth: int, change: str, **kwargs):
    branch = Branch.objects.get(pk=branch_id)
    summaries.on_rewritten(adventure_id=adventure_id, branch_id=branch_id, from_depth=from_depth, change=change)
    canon.canon_refresh(adventure_id)  # an undone node's versions leave the path; a retried take's too
    if (
        change == "hidden"
        and not Memory.objects.filter(
            branch_id=branch_id, source_start__lte=from_depth, source_end__gte=from_depth
        ).exists()
    ):
        # no memory holds this block (it was hidden whole): the pass writes it from here
        _rewind(adventure_id, branch, from_depth)
        return
    if change == "edited":
        claims.withdraw_edited(branch_id=branch_id, depth=from_depth, block=MEMORY_INTERVAL)  # the pass reads it again
    if change in ("edited", "hidden"):
        # A stale memory leaves recall until the next pass writes it again from the edited block
        # (one the player edited by hand is theirs: it stays, flagged stale). A secret's memory goes:
        # the pass remembers the secret again as it now reads (memory.story.steps.secrets).
        held = Memory.objects.filter(branch_id=branch_id, source_start__lte=from_depth, source_end__gte=from_depth)
        held.filter(seen_by__isnull=False, edited=False).delete()
        held.update(stale=True)
        return
    # removed / replaced: the block memories from the changed node on are withdrawn.
    Memory.objects.filter(branch_id=branch_id, depth__gte=from_depth, source_start__isnull=False).delete()
    if change == "removed":
        # Hand-written memories stay with the branch: at the node before, later ones move up with their nodes.
        Memory.objects.filter(branch_id=branch_id, depth=from_depth, source_start__isnull=True).update(
            depth=max(from_depth - 1, 1)
        )
        Memory.objects.filter(branch_id=branch_id, depth__gt=from_depth, source_start__isnull=True).update(
            depth=F("depth") - 1
        )
    _rewind(adventure_id, branch, from_depth)


def _rewind(adventure_id: int, branch: Branch, from_depth: int) -> None:
    """Marks at or past the changed node move to just before the affected block."""
    cursor = Cursor.objects.filter(adventure_id=adventure_id).first()
    if cursor is None:
        return
    if cursor.memory_branch_id == branch.pk and cursor.memory_depth >= from_depth:
        depth = ((from_depth - 1) // MEMORY_INTERVAL) * MEMORY_INTERVAL
        mark_move(
            adventure_id,
            "memory",
            (cursor.memory_branch_id, cursor.memory_depth),
            (lineage.owner_at(branch, depth) if depth else None, depth),
        )
    if cursor.summary_branch_id == branch.pk and cursor.summary_depth >= from_depth:
        depth = min(from_depth - 1, branch.tip_depth)
        mark_move(
            adventure_id,
            "summary",
            (cursor.summary_branch_id, cursor.summary_depth),
            (lineage.owner_at(branch, depth) if depth else None, depth),
        )


@receiver(nodes_copied, dispatch_uid="memory.story.sync.nodes_copied")
def on_nodes_copied(sender, *, adventure_id: int, from_branch_id: int, to_branch_id: int, depths: list[int], **kwargs):
    """Memories hanging off copied nodes hang off the copies too (with their vectors)."""
    copies = [
        Memory(
            adventure_id=adventure_id,
            branch_id=to_branch_id,
            depth=m.depth,
            source_start=m.source_start,
            source_end=m.source_end,
            text=m.text,
            embedding=m.embedding,
            embedding_model=m.embedding_model,
            pinned=m.pinned,
            forgotten=m.forgotten,
            stale=m.stale,
            edited=m.edited,
            offline=m.offline,
            character_id=m.character_id,
            kind=m.kind,
            importance=m.importance,
            part=m.part,
            seen_by=m.seen_by,
            use_count=m.use_count,
            last_used_at=m.last_used_at,
        )
        for m in Memory.objects.filter(branch_id=from_branch_id, depth__in=depths)
    ]
    Memory.objects.bulk_create(copies, ignore_conflicts=True)
    summaries.on_copied(
        adventure_id=adventure_id, from_branch_id=from_branch_id, to_branch_id=to_branch_id, depths=depths
    )
    canon.on_copied(from_branch_id=from_branch_id, to_branch_id=to_branch_id, depths=depths)
    claims.on_copied(from_branch_id=from_branch_id, to_branch_id=to_branch_id, depths=depths)


@receiver(head_moved, dispatch_uid="memory.story.sync.head_moved")
def on_head_moved(sender, *, adventure_id: int, branch_id: int, **kwargs):
    """A branch switch shows that path's summary, plot essentials and author's note at once, with
    no model call."""
    summaries.summary_refresh(adventure_id)
    canon.canon_refresh(adventure_id)
