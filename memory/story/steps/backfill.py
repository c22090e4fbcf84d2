"""The cast backfill: a character card that joins the cast after blocks were remembered gains
memories of the earlier blocks it was present for, a few blocks a run, in the background.

Each cast member has a mark (memory.models.CastMark) of how far the story was read for it. A run
reads, past the mark and up to the memory mark, the head path's remembered blocks that the member
holds no memory of: where the scene reading finds it present, its memories of the block are written
(with the owner's model when there is one, as the pass writes them) and stored beside the block's
own. A block the member holds any memory of is never touched (what the player wrote or edited
stays), and the mark only moves forward: past the blocks remembered after the mark was made (the
block step wrote them with the member in the cast, and moves the marks of the cast it wrote with),
so a story whose cast is caught up asks nothing of this step (memory.story.memory_pass's DUE_SQL).
A card that leaves the cast loses its mark."""

from __future__ import annotations

import logging

from django.db import IntegrityError, transaction

from memory.models import CastMark, Cursor
from memory.story import presence, scene, summarize
from memory.story.blocks import block_changed, block_write, cast_store, own_memories, path_memories
from memory.story.marks import MEMORIES_PER_RUN, MEMORY_INTERVAL, memory_mark
from memory.story.report import PassReport
from stories.accounts import ai_settings
from stories.cards import present_cards
from stories.models import Adventure, Branch
from stories.tree import lineage

log = logging.getLogger(__name__)

BACKFILL_BLOCKS_READ = 30  # remembered blocks read for one member in one run, at most


def backfill_cast(*, adventure: Adventure, head: Branch, report: PassReport, cursor: Cursor | None = None) -> None:
    cards = present_cards(adventure)
    members = scene.members(cards)
    CastMark.objects.filter(card__adventure=adventure).exclude(card_id__in=[m.card_id for m in members]).delete()
    if not members:
        return
    _, through = memory_mark(adventure=adventure, head=head, cursor=cursor)
    conn = None
    name = summarize.protagonist(adventure)
    for member in members:
        mark, _ = CastMark.objects.get_or_create(card_id=member.card_id)
        if mark.depth >= through:
            continue
        blocks = list(
            own_memories(head)
            .filter(
                source_start__isnull=False,
                source_end__gt=mark.depth,
                source_end__lte=through,
                created_at__lt=mark.created_at,
            )
            .order_by("source_start")
            .values_list("source_start", "source_end", "branch_id", "depth")[:BACKFILL_BLOCKS_READ]
        )
        held = (
            set(
                path_memories(head)
                .filter(character_id=member.card_id, source_start__isnull=False)
                .values_list("source_start", flat=True)
            )
            if blocks
            else set()
        )
        read_to = mark.depth
        for start, end, branch_id, depth in blocks:
            if start not in held:
                actions = list(lineage.story(head).filter(depth__gte=start, depth__lte=end))
                before = list(
                    lineage.story(head)
                    .filter(depth__gte=max(start - presence.LOOKBACK_BLOCKS * MEMORY_INTERVAL, 1), depth__lt=start)
                    .order_by("depth")
                )
                seen = presence.present(cast=members, actions=actions, before=before, name=name) if actions else []
                if any(w.member.card_id == member.card_id for w in seen):
                    if report.memories_created >= MEMORIES_PER_RUN:
                        report.more_due = True
                        break
                    if conn is None:
                        conn = ai_settings.connection_for_background(user_id=adventure.owner_id, purpose="summary")
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
                        own=False,
                        only=member.card_id,
                        whose=f"{member.name}'s ",
                    )
                    if written is None:
                        return
                    try:
                        with transaction.atomic():
                            if block_changed(head, actions, start=start, end=end):
                                break  # edited meanwhile: a later run reads it again
                            if not path_memories(head).filter(character_id=member.card_id, source_start=start).exists():
                                cast_store(
                                    adventure_id=adventure.pk,
                                    branch_id=branch_id,
                                    depth=depth,
                                    start=start,
                                    end=end,
                                    written=written.cast,
                                )
                                report.memories_created += 1 if written.cast else 0
                    except IntegrityError as exc:
                        log.info("cast backfill of adventure %s stopped: %s", adventure.pk, exc)
                        return
            read_to = end
        else:  # every block before the mark was read: the rest were remembered with the member in the cast
            if len(blocks) < BACKFILL_BLOCKS_READ:
                read_to = through
        if read_to > mark.depth:
            CastMark.objects.filter(pk=mark.pk, depth__lt=read_to).update(depth=read_to)
