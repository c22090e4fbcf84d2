"""The post-turn pass over one adventure: create due memories, update the story
summary, embed pending memories, evict past capacity.

Every step commits its result and advances its cursor by compare-and-set in
one transaction. A failed model call leaves the cursor where it was, so a later
run retries the same block; a run that lost a race writes nothing. Running the
pass twice changes nothing the second time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import Count, F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from config.errors import DomainError
from memory import embeddings
from memory.models import Cursor, Memory, PassRun
from memory.story import cast, summaries, summarize
from memory.story.blocks import block_changed, cast_replace, cast_store, own_memories, path_memories, write_cast
from stories import accounts, lineage, tree
from stories.context import render_action
from stories.models import Adventure, Branch
from stories.providers import ProviderError

log = logging.getLogger(__name__)

MEMORY_INTERVAL = 6  # actions per memory block
MEMORY_THRESHOLD = 12  # story actions on the path before the first memories
MEMORIES_PER_RUN = 5  # imports catch up over several runs
SUMMARY_INTERVAL = 15  # actions past the summary mark before a rewrite
RAW_ACTIONS_MAX = 200  # newest raw actions read for a summary (its prompt keeps at most 2,000 tokens of them)


PASS_ABANDONED_AFTER = timedelta(minutes=30)  # longer than any pass (5 memories + a summary at 120 s a call)
TRANSIENT_CODES = {"timeout", "unreachable", "rate_limited", "endpoint_error"}  # worth retrying soon


@dataclass
class PassReport:
    memories_created: int = 0
    summary_written: bool = False
    embedded: int = 0
    evicted: int = 0
    errors: list[str] = field(default_factory=list)
    transient: bool = False  # an error a retry in a little while may fix
    more_due: bool = False  # the run stopped at its cap with work left: the next pass is queued at once

    def failed(self, message: str, code: str) -> None:
        self.errors.append(message)
        self.transient = self.transient or code in TRANSIENT_CODES


def run_recorded(adventure_id: int, *, worker: str = "") -> PassReport:
    """``run`` with a PassRun row around it, and the cursor's failure count kept
    (the sweeper backs off on adventures whose passes keep failing). A domain
    error (the owner's key can no longer be read) is a failed run; anything
    else is recorded as a crash and raised. A run is never left "running"."""
    if not Adventure.objects.filter(pk=adventure_id).exists():
        return PassReport()
    abandoned_runs_close(adventure_id=adventure_id)
    record = PassRun.objects.create(adventure_id=adventure_id, worker=worker[:200])
    report = PassReport()
    try:
        run(adventure_id, report=report)
    except DomainError as exc:  # what the steps did before it stays in the record
        report.failed(exc.message, exc.code)
    except Exception as exc:
        _crash_record(adventure_id=adventure_id, run_id=record.pk, exc=exc)
        raise
    PassRun.objects.filter(pk=record.pk).update(
        finished_at=timezone.now(), outcome="errors" if report.errors else "ok",
        memories_created=report.memories_created, summary_written=report.summary_written,
        embedded=report.embedded, evicted=report.evicted, errors="\n".join(report.errors)[:5000],
    )
    cursor_for(adventure_id)
    if report.errors:
        _failure_count(adventure_id, report.errors[0])
    else:
        Cursor.objects.filter(adventure_id=adventure_id).exclude(failures=0).update(failures=0, last_error="")
    return report


def abandoned_runs_close(*, adventure_id: int | None = None) -> int:
    """Runs "running" past any pass's length died with their worker: marked crashed."""
    rows = PassRun.objects.filter(finished_at__isnull=True, started_at__lt=timezone.now() - PASS_ABANDONED_AFTER)
    if adventure_id is not None:
        rows = rows.filter(adventure_id=adventure_id)
    return rows.update(outcome="crashed", finished_at=timezone.now(), errors="crashed: the worker stopped mid-pass")


def _failure_count(adventure_id: int, error: str) -> None:
    Cursor.objects.filter(adventure_id=adventure_id).update(
        failures=F("failures") + 1, last_error=error[:500], last_error_at=timezone.now()
    )


def _crash_record(*, adventure_id: int, run_id: int, exc: Exception) -> None:
    """Mark the run crashed and count the failure, when the database still answers
    (a crash caused by a database outage cannot be recorded; the sweeper retries)."""
    error = f"crashed: {exc.__class__.__name__}"
    try:
        PassRun.objects.filter(pk=run_id).update(finished_at=timezone.now(), outcome="crashed", errors=error)
        cursor_for(adventure_id)
        _failure_count(adventure_id, error)
    except DatabaseError:
        log.warning("pass of adventure %s crashed and could not be recorded", adventure_id)


def run(adventure_id: int, *, report: PassReport | None = None) -> PassReport:
    """The whole pass (the owner's own settings only, never the demo model). A step's domain
    error is recorded in ``report`` and the later steps still run (embedding, eviction)."""
    report = report if report is not None else PassReport()
    adventure = Adventure.objects.filter(pk=adventure_id).first()
    if adventure is None or adventure.head_branch_id is None or adventure.hidden:
        return report
    head = lineage.head(adventure)
    steps = [create_due_memories, rewrite_stale] if adventure.memory_bank_enabled else []
    steps += [update_summary] if adventure.auto_summarize else []
    steps += [lambda adventure, head, report: embeddings.embed_pending(adventure=adventure, report=report), evict]
    for step in steps:
        try:
            step(adventure=adventure, head=head, report=report)
        except DomainError as exc:
            report.failed(exc.message, exc.code)
    return report


# ---------------------------------------------------------------------------- cursors


def cursor_for(adventure_id: int) -> Cursor:
    cursor, _ = Cursor.objects.get_or_create(adventure_id=adventure_id)
    return cursor


def on_path(branch: Branch, node_branch_id: int | None, depth: int) -> bool:
    """Whether the node (node_branch_id, depth) is on ``branch``'s path; depth 0 always is."""
    if depth == 0:
        return True
    return node_branch_id is not None and depth <= branch.tip_depth and lineage.owner_at(branch, depth) == node_branch_id


def node_of(branch: Branch, depth: int) -> int | None:
    return lineage.owner_at(branch, depth) if depth else None


def mark_move(adventure_id: int, mark: str, old: tuple[int | None, int], new: tuple[int | None, int]) -> bool:
    """Compare-and-set of a cursor mark ("memory" or "summary"): the one write
    path of a cursor. Must run in the transaction that stores what it covered."""
    return Cursor.objects.filter(
        adventure_id=adventure_id, **{f"{mark}_branch_id": old[0], f"{mark}_depth": old[1]}
    ).update(**{f"{mark}_branch_id": new[0], f"{mark}_depth": new[1]}) == 1


def covered_depth(branch: Branch) -> int:
    """End of the contiguous run of block memories from depth 1 on ``branch``'s path."""
    covered = 0
    for start, end in own_memories(branch).filter(source_start__isnull=False).order_by("source_start").values_list(
        "source_start", "source_end"
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


# ---------------------------------------------------------------------------- 1. memories


def create_due_memories(*, adventure: Adventure, head: Branch, report: PassReport) -> None:
    """Every full block of MEMORY_INTERVAL uncovered actions becomes one memory,
    once the path has MEMORY_THRESHOLD actions; at most MEMORIES_PER_RUN a run.
    The cast members present in the block get their own memory of it, written
    in the same transaction (memory.story.cast)."""
    if head.tip_depth < MEMORY_THRESHOLD:
        return
    mark = memory_mark(adventure=adventure, head=head)
    if not on_path(head, *mark):
        return  # another run moved it meanwhile; it will do the work
    conn = accounts.connection_for_background(user_id=adventure.owner_id, purpose="summary")
    cards = list(adventure.cards.all())
    members = cast.members(cards)
    while report.memories_created < MEMORIES_PER_RUN and mark[1] + MEMORY_INTERVAL <= head.tip_depth:
        start, end = mark[1] + 1, mark[1] + MEMORY_INTERVAL
        new = (node_of(head, end), end)
        existing = own_memories(head).filter(source_start=start, source_end=end).exists()
        actions = list(lineage.story(head).filter(depth__gte=start, depth__lte=end))
        if not actions:
            # A moderator hid every action of the block: there is nothing to remember, and the
            # mark moves past it (a later reconciliation finds it hidden again and skips it again).
            if not mark_move(adventure.pk, "memory", mark, new):
                return
            log.info("memory pass of adventure %s skipped actions %s-%s: all hidden", adventure.pk, start, end)
            mark = new
            continue
        cast_written: list[cast.CastMemory] = []
        if not existing:
            try:
                written = summarize.write_memory(conn=conn, adventure=adventure, actions=actions, cards=cards,
                                                 user_id=adventure.owner_id)
                cast_written = write_cast(conn=conn, adventure=adventure, head=head, members=members,
                                          actions=actions, cards=cards, start=start, block=MEMORY_INTERVAL)
            except ProviderError as exc:
                report.failed(f"memory of actions {start}-{end}: {exc.message}", exc.code)
                return
        try:
            with transaction.atomic():
                if block_changed(head, actions, start=start, end=end):
                    raise _Abort("the block changed while it was summarized")
                if not mark_move(adventure.pk, "memory", mark, new):
                    raise _Abort("another run moved the memory mark")
                if not existing:
                    Memory.objects.create(adventure=adventure, branch_id=new[0], depth=end, source_start=start,
                                          source_end=end, text=written.text, offline=written.offline)
                    cast_store(adventure_id=adventure.pk, branch_id=new[0], depth=end, start=start, end=end,
                               written=cast_written)
                    report.memories_created += 1
        except (_Abort, IntegrityError) as exc:
            log.info("memory pass of adventure %s stopped: %s", adventure.pk, exc)
            return
        mark = new
    if mark[1] + MEMORY_INTERVAL <= head.tip_depth:
        report.more_due = True


class _Abort(Exception):
    pass


def rewrite_stale(*, adventure: Adventure, head: Branch, report: PassReport) -> None:
    """Write the stale blocks of the head's path again from their edited actions
    (what is left of this run's MEMORIES_PER_RUN): the block's own memory and its
    cast's. A memory the player wrote or edited by hand is never rewritten. New
    text replaces old only if neither the block nor the memories changed during
    the model call (compare-and-set); a character no longer in the block loses
    its memory of it, one newly in it gains one."""
    stale = path_memories(head).filter(stale=True, edited=False, source_start__isnull=False)
    blocks = list(stale.order_by("source_start").values_list("source_start", "source_end").distinct()
                  [:max(MEMORIES_PER_RUN - report.memories_created, 0) + 1])
    if not blocks:
        return
    conn = accounts.connection_for_background(user_id=adventure.owner_id, purpose="summary")
    cards = list(adventure.cards.all())
    members = cast.members(cards)
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
        try:
            written = summarize.write_memory(conn=conn, adventure=adventure, actions=actions, cards=cards,
                                             user_id=adventure.owner_id) if own else None
            cast_written = write_cast(conn=conn, adventure=adventure, head=head, members=members, actions=actions,
                                      cards=cards, start=start, block=MEMORY_INTERVAL)
        except ProviderError as exc:
            report.failed(f"memory of actions {start}-{end}: {exc.message}", exc.code)
            return
        anchor = own or rows[0]
        with transaction.atomic():
            if block_changed(head, actions, start=start, end=end):
                continue  # edited again meanwhile: the next run writes it from the newest text
            if own is not None:
                if Memory.objects.filter(pk=own.pk, text=own.text, stale=True, edited=False).update(
                        text=written.text, stale=False, offline=written.offline) != 1:
                    continue
                embeddings.vector_set(memory_id=own.pk, expected_text=written.text, vector=None, model="")
            cast_replace(adventure_id=adventure.pk, branch_id=anchor.branch_id, depth=anchor.depth, start=start,
                         end=end, old=[m for m in rows if m.character_id is not None], written=cast_written)
        report.memories_created += 1


# ---------------------------------------------------------------------------- 2. summary


def update_summary(*, adventure: Adventure, head: Branch, report: PassReport, force: bool = False) -> None:
    """Every SUMMARY_INTERVAL actions past the head path's newest summary
    snapshot, write the summary again from that snapshot, adding the memories
    written since (raw story where memories lag), and hang it off the tip node
    (memory.story.summaries). ``force``: rewrite over the whole path from the player's
    own text. If the path's summary changed during the model call (the player
    edited it, or the tree moved), the rewrite is dropped and a later run retries."""
    cursor = cursor_for(adventure.pk)
    old = (cursor.summary_branch_id, cursor.summary_depth)
    snap = summaries.snapshot_on_path(head)
    since = 0 if force or snap is None else snap.depth
    target = head.tip_depth
    if not on_path(head, *old) or old[1] < since:
        # the mark follows the path's snapshot (a branch switch costs no model call)
        with transaction.atomic():
            mark_move(adventure.pk, "summary", old, (node_of(head, since), since))
        old = (node_of(head, since), since)
    if target == 0 or (not force and target - since < SUMMARY_INTERVAL):
        return
    base = summaries.summary_base(head)  # read only when a rewrite is due: the pass runs after every turn
    starting_text = base if force or snap is None else snap.text
    memories = list(own_memories(head).filter(source_start__isnull=False, source_end__gt=since,
                                               source_end__lte=target).order_by("source_start")
                    .values_list("source_end", "text"))
    material = [text for _, text in memories]
    covered = max([end for end, _ in memories], default=since)
    if covered < target:
        # Only the newest raw actions can reach the summary's prompt (summarize.SUMMARY_MATERIAL_TOKENS).
        raw = list(lineage.story(head).filter(depth__gt=max(covered, since), depth__lte=target)
                   .order_by("-depth")[:RAW_ACTIONS_MAX])
        material += [render_action(a) for a in reversed(raw)]
    conn = accounts.connection_for_background(user_id=adventure.owner_id, purpose="summary")
    try:
        written = summarize.write_summary(conn=conn, adventure=adventure, current=starting_text, base=base,
                                          new_material=material, user_id=adventure.owner_id,
                                          cards=list(adventure.cards.all()))
    except ProviderError as exc:
        report.failed(f"story summary: {exc.message}", exc.code)
        return
    with transaction.atomic():
        # the adventure row first, as every tree write takes it: one lock order, no deadlock
        # (a lock, not a tree write: a reply being written meanwhile does not stop the summary)
        head = tree.lock(adventure.pk, head.pk, tree_write=False).branch
        now = summaries.snapshot_on_path(head)
        if (now and (now.pk, now.text)) != (snap and (snap.pk, snap.text)) or head.tip_depth < target:
            return  # the player wrote their own summary, or the story moved, during the call
        if not mark_move(adventure.pk, "summary", old, (node_of(head, target), target)):
            return
        summaries.snapshot_write(adventure_id=adventure.pk, branch=head, depth=target, text=written.text,
                                 player=False, replace_player=force)
        summaries.summary_refresh(adventure.pk)
        Cursor.objects.filter(adventure_id=adventure.pk).update(summary_written_at=timezone.now())
    adventure.story_summary = written.text
    report.summary_written = True


# ---------------------------------------------------------------------------- 4. eviction


def evict(*, adventure: Adventure, head: Branch, report: PassReport) -> None:
    """Forget the least recently used memories of the current path past the
    owner's capacity (last used, else created; ties: lower use count first),
    for the adventure's own bank and for each character's, each on its own.
    Pinned memories are never evicted, so pins alone may exceed capacity."""
    capacity = accounts.ai_settings_get(user_id=adventure.owner_id).memory_bank_capacity
    active = path_memories(head).filter(forgotten=False)
    sizes = active.values_list("character_id").annotate(n=Count("id")).order_by()  # one query for every bank
    for holder, excess in ((h, n - capacity) for h, n in sizes):
        if excess <= 0:
            continue
        held = active.filter(character_id=holder) if holder is not None else active.filter(character__isnull=True)
        victims = list(
            held.filter(pinned=False)
            .order_by(Coalesce("last_used_at", "created_at").asc(), "use_count", "id")
            .values_list("pk", flat=True)[:excess]
        )
        report.evicted += Memory.objects.filter(pk__in=victims, pinned=False).update(forgotten=True)


# ---------------------------------------------------------------------------- lagging adventures

SWEEP_BATCH = 500  # adventures re-enqueued per sweep at most
BACKOFF_MAX_MINUTES = 60


def adventures_behind(*, limit: int = SWEEP_BATCH) -> list[int]:
    """Adventures whose cursors lag behind their story (or with unembedded
    memories), skipping those whose passes keep failing until their backoff
    (2^failures minutes, at most an hour) has passed."""
    from django.db.models import Exists, OuterRef, Value

    now = timezone.now()
    unembedded = Memory.objects.filter(adventure_id=OuterRef("pk"), embedding__isnull=True)
    to_rewrite = Memory.objects.filter(adventure_id=OuterRef("pk"), stale=True, edited=False,
                                       source_start__isnull=False)
    qs = (
        Adventure.objects.filter(head_branch__isnull=False)
        .annotate(
            tip=F("head_branch__tip_depth"),
            mem=Coalesce(F("memory_cursor__memory_depth"), Value(0)),
            summ=Coalesce(F("memory_cursor__summary_depth"), Value(0)),
            fails=Coalesce(F("memory_cursor__failures"), Value(0)),
            pending=Exists(unembedded),
            rewrite=Exists(to_rewrite),
        )
        .filter(
            Q(memory_bank_enabled=True, tip__gte=MEMORY_THRESHOLD) & Q(tip__gte=F("mem") + MEMORY_INTERVAL)
            | Q(auto_summarize=True, tip__gte=F("summ") + SUMMARY_INTERVAL)
            | Q(pending=True)
            | Q(memory_bank_enabled=True, rewrite=True)
        )
    )
    # The backoff is in the query: failing adventures never fill the batch the others wait behind.
    due = Q(fails=0) | Q(memory_cursor__last_error_at__isnull=True)
    for fails in range(1, BACKOFF_MAX_MINUTES.bit_length()):  # 2^fails minutes while under the cap
        due |= Q(fails=fails, memory_cursor__last_error_at__lt=now - timedelta(minutes=2 ** fails))
    due |= Q(fails__gte=BACKOFF_MAX_MINUTES.bit_length(),
             memory_cursor__last_error_at__lt=now - timedelta(minutes=BACKOFF_MAX_MINUTES))
    return list(qs.filter(due).order_by("pk").values_list("pk", flat=True)[:limit])
