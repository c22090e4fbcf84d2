"""Step 1: every full block of uncovered actions on the head's path becomes a memory, with its
cast's memories of it, written outside any transaction and stored in one with the mark's move."""

from __future__ import annotations

import logging

from django.db import IntegrityError, transaction

from memory.models import CastMark, Cursor, Memory
from memory.story import claims, proposals, scene, summarize
from memory.story.blocks import block_changed, block_write, cast_store, own_memories
from memory.story.marks import (
    MEMORIES_PER_RUN,
    MEMORY_INTERVAL,
    MEMORY_THRESHOLD,
    mark_move,
    memory_mark,
)
from memory.story.report import PassReport
from stories.accounts import ai_settings
from stories.cards import present_cards
from stories.models import Adventure, Branch
from stories.tree import lineage

log = logging.getLogger(__name__)


def create_due_memories(
    *, adventure: Adventure, head: Branch, report: PassReport, cursor: Cursor | None = None
) -> None:
    """Every full block of MEMORY_INTERVAL uncovered actions becomes one memory,
    once the path has MEMORY_THRESHOLD actions; at most MEMORIES_PER_RUN a run.
    The cast members present in the block get their own memory of it, written
    in the same transaction (memory.story.cast). ``cursor``: the pass's copy of the marks
    (memory.story.marks.memory_mark), kept current as the mark moves."""
    if head.tip_depth < MEMORY_THRESHOLD:
        _early_claims(adventure=adventure, head=head)
        return
    mark = memory_mark(adventure=adventure, head=head, cursor=cursor)
    if not lineage.on_path(head, *mark):
        return  # another run moved it meanwhile; it will do the work
    if mark[1] + MEMORY_INTERVAL > head.tip_depth:
        report.memory_next = max(MEMORY_THRESHOLD, mark[1] + MEMORY_INTERVAL)
        return  # no whole block past the mark: most turns (nothing more is read)
    conn = ai_settings.connection_for_background(
        user_id=adventure.owner_id,
        purpose="summary",
        ai=ai_settings.ai_settings_loaded(adventure=adventure, user_id=adventure.owner_id),
    )
    cards = present_cards(adventure)
    members = scene.members(cards)
    while report.memories_created < MEMORIES_PER_RUN and mark[1] + MEMORY_INTERVAL <= head.tip_depth:
        start, end = mark[1] + 1, mark[1] + MEMORY_INTERVAL
        new = lineage.node_ref(head, end)
        existing = own_memories(head).filter(source_start=start, source_end=end).exists()
        actions = list(lineage.story(head).filter(depth__gte=start, depth__lte=end))
        if not actions:
            # A moderator hid every action of the block: there is nothing to remember, and the
            # mark moves past it (a later reconciliation finds it hidden again and skips it again).
            if not mark_move(adventure.pk, "memory", mark, new):
                return
            if cursor is not None:
                cursor.memory_branch_id, cursor.memory_depth = new
            log.info("memory pass of adventure %s skipped actions %s-%s: all hidden", adventure.pk, start, end)
            mark = new
            continue
        name = summarize.protagonist(adventure)
        names = proposals.block_names(actions=actions, cards=cards, name=name)
        written = None
        if not existing:
            written = block_write(
                conn=conn,
                adventure=adventure,
                head=head,
                members=members,
                actions=actions,
                cards=cards,
                start=start,
                end=end,
                report=report,
            )
            if written is None:
                return
        if written is not None and written.changes is not None:  # the owner's model read them in the block's call
            read = claims.model_read(head=head, actions=actions, reads=written.changes)
        else:  # the offline reading only where the model did not read (it was ~11% of a cast's pass)
            read = claims.block_read(adventure=adventure, head=head, actions=actions, cards=cards, name=name)
        try:
            with transaction.atomic():
                if block_changed(head, actions, start=start, end=end):
                    raise _Abort("the block changed while it was summarized")
                if not mark_move(adventure.pk, "memory", mark, new):
                    raise _Abort("another run moved the memory mark")
                if not existing:
                    Memory.objects.create(
                        adventure=adventure,
                        branch_id=new[0],
                        depth=end,
                        source_start=start,
                        source_end=end,
                        text=written.own.text,
                        offline=written.own.offline,
                    )
                    cast_store(
                        adventure_id=adventure.pk,
                        branch_id=new[0],
                        depth=end,
                        start=start,
                        end=end,
                        written=written.cast,
                    )
                    if members:  # read for this block with the cast it was written with: no backfill of it
                        CastMark.objects.filter(
                            card_id__in=[m.card_id for m in members], depth__gte=start - 1, depth__lt=end
                        ).update(depth=end)
                    report.memories_created += 1
                claims.block_store(adventure=adventure, reads=read, offline=written is None or written.changes is None)
                proposals.note(adventure=adventure, names=names)
        except (_Abort, IntegrityError) as exc:
            log.info("memory pass of adventure %s stopped: %s", adventure.pk, exc)
            return
        mark = new
        if cursor is not None:
            cursor.memory_branch_id, cursor.memory_depth = new
    if mark[1] + MEMORY_INTERVAL <= head.tip_depth:
        report.more_due = True
    else:
        report.memory_next = max(MEMORY_THRESHOLD, mark[1] + MEMORY_INTERVAL)


class _Abort(Exception):
    pass


def _early_claims(*, adventure: Adventure, head: Branch) -> None:
    """Before the path has MEMORY_THRESHOLD actions no block is remembered yet, but what a full block
    changed on the cards is read at once (offline; a block read again stores nothing twice), so a
    change is on its card within one block of its evidence from the story's first block on."""
    cards = present_cards(adventure)
    if not cards:
        return
    name = summarize.protagonist(adventure)
    for start in range(1, head.tip_depth - MEMORY_INTERVAL + 2, MEMORY_INTERVAL):
        actions = list(lineage.story(head).filter(depth__gte=start, depth__lt=start + MEMORY_INTERVAL))
        read = claims.block_read(adventure=adventure, head=head, actions=actions, cards=cards, name=name)
        names = proposals.block_names(actions=actions, cards=cards, name=name)
        with transaction.atomic():
            if not block_changed(head, actions, start=start, end=start + MEMORY_INTERVAL - 1):
                claims.block_store(adventure=adventure, reads=read)
                proposals.note(adventure=adventure, names=names)
