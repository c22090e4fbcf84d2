"""Step 2: blocks whose actions were edited or hidden are written again (the block's memory and
its cast's), by compare-and-set; what the player wrote or edited by hand is never rewritten."""

from __future__ import annotations

from django.db import transaction

from memory import embeddings
from memory.models import Memory
from memory.story import claims, scene, summarize
from memory.story.blocks import block_changed, block_write, cast_replace, path_memories
from memory.story.marks import MEMORIES_PER_RUN
from memory.story.report import PassReport
from stories.accounts import ai_settings
from stories.cards import present_cards
from stories.models import Adventure, Branch
from stories.tree import lineage


def rewrite_stale(*, adventure: Adventure, head: Branch, report: PassReport) -> None:
    """Write the stale blocks of the head's path again from their edited actions
    (what is left of this run's MEMORIES_PER_RUN): the block's own memory and its
    cast's. A memory the player wrote or edited by hand is never rewritten. New
    text replaces old only if neither the block nor the memories changed during
    the model call (compare-and-set); a character no longer in the block loses
    its memory of it, one newly in it gains one."""
    stale = path_memories(head).filter(stale=True, edited=False, source_start__isnull=False)
    blocks = list(
        stale.order_by("source_start")
        .values_list("source_start", "source_end")
        .distinct()[: max(MEMORIES_PER_RUN - report.memories_created, 0) + 1]
    )
    if not blocks:
        return
    conn = ai_settings.connection_for_background(user_id=adventure.owner_id, purpose="summary")
    cards = present_cards(adventure)
    members = scene.members(cards)
    for start, end in blocks:
        if report.memories_created >= MEMORIES_PER_RUN:
            report.more_due = True
            return
        rows = list(stale.filter(source_start=start, source_end=end))
        actions = list(lineage.story(head).filter(depth__gte=start, depth__lte=end))
        if not actions:
            # a moderator hid the whole block: nothing of it may be remembered (shown again, sync
            # rewinds the memory mark and the block is written anew)
            Memory.objects.filter(pk__in=[m.pk for m in rows], stale=True, edited=False).delete()
            continue
        own = next((m for m in rows if m.character_id is None), None)
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
            own=own is not None,
        )
        if written is None:
            return
        if written.changes is not None:  # the owner's model read the changes in the block's call
            read = claims.model_read(head=head, actions=actions, reads=written.changes)
        else:
            read = claims.block_read(
                adventure=adventure, head=head, actions=actions, cards=cards, name=summarize.protagonist(adventure)
            )
        anchor = own or rows[0]
        with transaction.atomic():
            if block_changed(head, actions, start=start, end=end):
                continue  # edited again meanwhile: the next run writes it from the newest text
            if own is not None:
                if (
                    Memory.objects.filter(pk=own.pk, text=own.text, stale=True, edited=False).update(
                        text=written.own.text, stale=False, offline=written.own.offline
                    )
                    != 1
                ):
                    continue
                embeddings.vector_set(memory_id=own.pk, expected_text=written.own.text, vector=None, model="")
            cast_replace(
                adventure_id=adventure.pk,
                branch_id=anchor.branch_id,
                depth=anchor.depth,
                start=start,
                end=end,
                old=[m for m in rows if m.character_id is not None],
                written=written.cast,
            )
            claims.block_store(adventure=adventure, reads=read, offline=written.changes is None)
        report.memories_created += 1
