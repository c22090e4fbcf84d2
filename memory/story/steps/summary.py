"""Step 3: the running summary, written again every SUMMARY_INTERVAL actions from the path's
newest snapshot and hung off the tip node (memory.story.summaries)."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from memory.models import Cursor
from memory.story import summaries, summarize
from memory.story.blocks import own_memories
from memory.story.marks import SUMMARY_INTERVAL, cursor_of, mark_move
from memory.story.report import PassReport
from stories import providers
from stories.accounts import ai_settings
from stories.cards import present_cards
from stories.models import Adventure, Branch
from stories.prompt.voice import told
from stories.tree import lineage, writes

RAW_ACTIONS_MAX = 200  # newest raw actions read for a summary (its prompt keeps at most 2,000 tokens of them)


def update_summary(
    *,
    adventure: Adventure,
    head: Branch,
    report: PassReport,
    force: bool = False,
    for_request: bool = False,
    cursor: Cursor | None = None,
) -> None:
    """Every SUMMARY_INTERVAL actions past the head path's newest summary
    snapshot, write the summary again from that snapshot, adding the memories
    written since (raw story where memories lag), and hang it off the tip node
    (memory.story.summaries). ``force``: rewrite over the whole path from the player's
    own text. If the path's summary changed during the model call (the player
    edited it, or the tree moved), the rewrite is dropped and a later run retries. ``for_request``:
    a request waits on it (the model call within providers.for_request's deadline). ``cursor``: the
    pass's copy of the marks (every move of one is a compare-and-set: a stale copy loses a race)."""
    cursor = cursor if cursor is not None else cursor_of(adventure.pk)
    old = (cursor.summary_branch_id, cursor.summary_depth)
    snap = summaries.snapshot_on_path(head)
    since = 0 if force or snap is None else snap.depth
    target = head.tip_depth
    if not lineage.on_path(head, *old) or old[1] < since:
        # the mark follows the path's snapshot (a branch switch costs no model call)
        with transaction.atomic():
            mark_move(adventure.pk, "summary", old, lineage.node_ref(head, since))
        old = lineage.node_ref(head, since)
    if target == 0 or (not force and target - since < SUMMARY_INTERVAL):
        report.summary_next = since + SUMMARY_INTERVAL
        return
    base = summaries.summary_base(head)  # read only when a rewrite is due: the pass runs after every turn
    starting_text = base if force or snap is None else snap.text
    memories = list(
        own_memories(head)
        .filter(source_start__isnull=False, source_end__gt=since, source_end__lte=target)
        .order_by("source_start")
        .values_list("source_end", "text")
    )
    material = [text for _, text in memories]
    covered = max([end for end, _ in memories], default=since)
    if covered < target:
        # Only the newest raw actions can reach the summary's prompt (summarize.SUMMARY_MATERIAL_TOKENS).
        raw = list(
            lineage.story(head)
            .filter(depth__gt=max(covered, since), depth__lte=target)
            .order_by("-depth")[:RAW_ACTIONS_MAX]
        )
        material += [told(a) for a in reversed(raw)]
    conn = ai_settings.connection_for_background(user_id=adventure.owner_id, purpose="summary")
    if conn is not None and for_request:
        conn = providers.for_request(conn)
    try:
        written = summarize.write_summary(
            conn=conn,
            adventure=adventure,
            current=starting_text,
            base=base,
            new_material=material,
            user_id=adventure.owner_id,
            cards=present_cards(adventure),
        )
    except providers.ProviderError as exc:
        report.failed(f"story summary: {exc.message}", exc.code)
        return
    with transaction.atomic():
        # the adventure row first, as every tree write takes it: one lock order, no deadlock
        # (a lock, not a tree write: a reply being written meanwhile does not stop the summary)
        head = writes.lock(adventure.pk, head.pk, tree_write=False).branch
        now = summaries.snapshot_on_path(head)
        if (now and (now.pk, now.text)) != (snap and (snap.pk, snap.text)) or head.tip_depth < target:
            return  # the player wrote their own summary, or the story moved, during the call
        if not mark_move(adventure.pk, "summary", old, lineage.node_ref(head, target)):
            return
        summaries.snapshot_write(
            adventure_id=adventure.pk, branch=head, depth=target, text=written.text, player=False, replace_player=force
        )
        summaries.summary_refresh(adventure.pk)
        Cursor.objects.filter(adventure_id=adventure.pk).update(summary_written_at=timezone.now())
    adventure.story_summary = written.text
    report.summary_written = True
    report.summary_next = target + SUMMARY_INTERVAL
