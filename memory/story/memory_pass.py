"""The post-turn pass over one adventure: create due memories, rewrite stale ones, update the
story summary, embed pending memories, evict past capacity (memory.story.steps); its PassRun
bookkeeping, and the sweeper's selector of adventures whose passes lag behind.

Every step commits its result and advances its mark by compare-and-set in one transaction. A
failed model call leaves the mark where it was, so a later run retries the same block; a run
that lost a race writes nothing. Running the pass twice changes nothing the second time.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from datetime import timedelta

from django.db import DatabaseError, connection
from django.db.models import Exists, F, OuterRef, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from config.compiled_once import CompiledOnce
from config.errors import DomainError
from memory import embedder, embeddings
from memory.models import Cursor, Memory, PassRun
from memory.story.marks import MEMORIES_DUE, QUIET_NEVER, SUMMARY_DUE, cursor_ensure, quiet_until, with_marks
from memory.story.report import PassReport
from memory.story.steps.backfill import backfill_cast
from memory.story.steps.blocks import create_due_memories
from memory.story.steps.eviction import evict
from memory.story.steps.secrets import remember_secrets
from memory.story.steps.stale import rewrite_stale
from memory.story.steps.summary import update_summary
from stories.accounts import ai_settings
from stories.models import Adventure, StoryCard

log = logging.getLogger(__name__)

PASS_ABANDONED_AFTER = timedelta(minutes=30)  # longer than any pass (5 memories + a summary at 120 s a call)


# A pass's record, made in the statement that marks the adventure's runs left "running" past any
# pass's length crashed (their worker died).
RECORD_SQL = """
WITH abandoned AS (
  UPDATE memory_passrun SET outcome = 'crashed', finished_at = %(now)s, errors = %(crashed)s
  WHERE adventure_id = %(adventure)s AND finished_at IS NULL AND started_at < %(before)s
)
INSERT INTO memory_passrun
  (adventure_id, worker, started_at, finished_at, outcome, memories_created, summary_written, embedded, evicted, errors)
VALUES (%(adventure)s, %(worker)s, %(now)s, NULL, 'running', 0, false, 0, 0, '')
RETURNING id
"""
CRASHED = "crashed: the worker stopped mid-pass"

# What most passes would otherwise learn in a statement a step, to find nothing: whether the adventure
# holds secret nodes, stale blocks, a cast member whose backfill mark is behind the memory mark (or a
# mark of a character who left the cast), and memories without the owner's embedding. Each is over the
# whole adventure, so it holds whatever its step reads on the path (a mark the pass's own block step
# moves past is read on the next pass).
FINISH_SQL = f"""
UPDATE {PassRun._meta.db_table} SET finished_at = %s, outcome = %s, memories_created = %s,
    summary_written = %s, embedded = %s, evicted = %s, errors = %s
WHERE id = %s
"""

DUE_SQL = r"""
SELECT
  EXISTS (SELECT 1 FROM stories_action WHERE adventure_id = %(adventure)s AND seen_by IS NOT NULL),
  EXISTS (
    SELECT 1 FROM memory_memory
    WHERE adventure_id = %(adventure)s AND stale AND NOT edited AND source_start IS NOT NULL
  ),
  EXISTS (
    SELECT 1 FROM stories_storycard c LEFT JOIN memory_castmark m ON m.card_id = c.id
    WHERE c.adventure_id = %(adventure)s AND c.type = %(character)s AND c.in_cast AND c.name ~ '\S'
      AND (m.id IS NULL OR m.depth < %(memory_depth)s)
  ) OR EXISTS (
    SELECT 1 FROM memory_castmark m JOIN stories_storycard c ON c.id = m.card_id
    WHERE c.adventure_id = %(adventure)s AND NOT (c.type = %(character)s AND c.in_cast AND c.name ~ '\S')
  ),
  EXISTS (
    SELECT 1 FROM memory_memory
    WHERE adventure_id = %(adventure)s AND (embedding IS NULL OR embedding_model IS DISTINCT FROM %(model)s)
  )
"""


@dataclass(frozen=True)
class _Due:
    secrets: bool
    stale: bool
    cast: bool
    unembedded: bool


def _due(adventure: Adventure, cursor: Cursor) -> _Due:
    ai = ai_settings.ai_settings_loaded(adventure=adventure, user_id=adventure.owner_id)
    model = embedder.active_model(user_id=adventure.owner_id, ai=ai)
    with connection.cursor() as db:
        db.execute(
            DUE_SQL,
            {
                "adventure": adventure.pk,
                "character": StoryCard.Type.CHARACTER,
                "model": model,
                "memory_depth": cursor.memory_depth,
            },
        )
        return _Due(*db.fetchone())


def run_recorded(adventure_id: int, *, worker: str = "") -> PassReport:
    """``run`` with a PassRun row around it, and the cursor's failure count kept
    (the sweeper backs off on adventures whose passes keep failing). A domain
    error (the owner's key can no longer be read) is a failed run; anything
    else is recorded as a crash and raised. A run is never left "running".
    A pass with nothing due asks seven statements (it runs after every turn; tests/memory/test_pass.py)."""
    adventure = _adventure(adventure_id)
    if adventure is None:
        return PassReport()
    now = timezone.now()
    with connection.cursor() as db:
        db.execute(
            RECORD_SQL,
            {
                "adventure": adventure_id,
                "worker": worker[:200],
                "now": now,
                "crashed": CRASHED,
                "before": now - PASS_ABANDONED_AFTER,
            },
        )
        (record_id,) = db.fetchone()
    cursor = cursor_ensure(adventure_id)
    report = PassReport()
    try:
        _run(adventure, cursor=cursor, report=report)
    except DomainError as exc:  # what the steps did before it stays in the record
        report.failed(exc.message, exc.code)
    except Exception as exc:
        _crash_record(adventure_id=adventure_id, run_id=record_id, exc=exc)
        raise
    with connection.cursor() as db:  # every pass ends here: as written, not compiled each time
        db.execute(
            FINISH_SQL,
            [
                timezone.now(),
                "errors" if report.errors else "ok",
                report.memories_created,
                report.summary_written,
                report.embedded,
                report.evicted,
                "\n".join(report.errors)[:5000],
                record_id,
            ],
        )
    if report.errors:
        _failure_count(adventure_id, report.errors[0])
    elif cursor.failures:  # as read at the start: the pass's own run is the one that counts them
        Cursor.objects.filter(adventure_id=adventure_id).exclude(failures=0).update(failures=0, last_error="")
    return report


def _adventure(adventure_id: int) -> Adventure | None:
    """The adventure with its head branch and its owner's AI settings, in one statement (the steps
    read the settings with ai_settings_loaded), compiled once: every pass asks it first."""
    return _ADVENTURE.first(adventure_id=adventure_id)


_ADVENTURE = CompiledOnce(
    lambda shape, adventure_id: Adventure.objects.select_related("head_branch", "owner__ai_settings").filter(
        pk=adventure_id
    )
)


def abandoned_runs_close() -> int:
    """Runs "running" past any pass's length died with their worker: marked crashed (the sweeper's
    round, for every adventure; an adventure's own pass does it for its runs in RECORD_SQL)."""
    rows = PassRun.objects.filter(finished_at__isnull=True, started_at__lt=timezone.now() - PASS_ABANDONED_AFTER)
    return rows.update(outcome="crashed", finished_at=timezone.now(), errors=CRASHED)


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
        cursor_ensure(adventure_id)
        _failure_count(adventure_id, error)
    except DatabaseError:
        log.warning("pass of adventure %s crashed and could not be recorded", adventure_id)


def run(adventure_id: int, *, report: PassReport | None = None) -> PassReport:
    """The whole pass (the owner's own settings only, never the demo model). A step's domain
    error is recorded in ``report`` and the later steps still run (embedding, eviction)."""
    report = report if report is not None else PassReport()
    adventure = _adventure(adventure_id)
    if adventure is not None:
        _run(adventure, cursor=cursor_ensure(adventure_id), report=report)
    return report


def _run(adventure: Adventure, *, cursor: Cursor, report: PassReport) -> None:
    """The steps over the adventure as read, with one copy of its marks (``cursor``: the row the
    steps move their marks on by compare-and-set, read once a pass)."""
    if adventure.head_branch_id is None or adventure.hidden:
        return
    head = adventure.head_branch  # read with the adventure, just now
    due = _due(adventure, cursor)
    steps = []
    if adventure.memory_bank_enabled:
        steps.append(functools.partial(create_due_memories, cursor=cursor))
        steps += [remember_secrets] if due.secrets else []
        steps += [rewrite_stale] if due.stale else []
        steps += [functools.partial(backfill_cast, cursor=cursor)] if due.cast else []
    steps += [functools.partial(update_summary, cursor=cursor)] if adventure.auto_summarize else []
    # memories to embed: those found unembedded, or any a step above may write
    wrote = due.unembedded or due.secrets or due.stale or due.cast

    def embed(adventure, head, report):
        if wrote or report.memories_created:
            embeddings.embed_pending(adventure=adventure, report=report)

    steps += [embed, evict]
    for step in steps:
        try:
            step(adventure=adventure, head=head, report=report)
        except DomainError as exc:
            report.failed(exc.message, exc.code)
    quiet_until(adventure.pk, _quiet_depth(adventure, due, report))


def _quiet_depth(adventure: Adventure, due: _Due, report: PassReport) -> int | None:
    """The depth before which growth brings this adventure's pass nothing to do, as the steps left it;
    None when something else may be due (an error, a cap, secrets, stale blocks, a cast to read back)."""
    if report.errors or report.more_due or due.secrets or due.stale or due.cast:
        return None
    nexts = []
    if adventure.memory_bank_enabled:
        nexts.append(report.memory_next)
    if adventure.auto_summarize:
        nexts.append(report.summary_next)
    return None if None in nexts else min(nexts, default=QUIET_NEVER)


# ---------------------------------------------------------------------------- lagging adventures

SWEEP_BATCH = 500  # adventures re-enqueued per sweep at most
BACKOFF_MAX_MINUTES = 60


def adventures_behind(*, limit: int = SWEEP_BATCH) -> list[int]:
    """Adventures whose cursors lag behind their story (or with unembedded
    memories), skipping those whose passes keep failing until their backoff
    (2^failures minutes, at most an hour) has passed."""
    now = timezone.now()
    unembedded = Memory.objects.filter(adventure_id=OuterRef("pk"), embedding__isnull=True)
    to_rewrite = Memory.objects.filter(
        adventure_id=OuterRef("pk"), stale=True, edited=False, source_start__isnull=False
    )
    qs = (
        with_marks(Adventure.objects.filter(head_branch__isnull=False))
        .annotate(
            fails=Coalesce(F("memory_cursor__failures"), Value(0)),
            pending=Exists(unembedded),
            rewrite=Exists(to_rewrite),
        )
        .filter(MEMORIES_DUE | SUMMARY_DUE | Q(pending=True) | Q(memory_bank_enabled=True, rewrite=True))
    )
    # The backoff is in the query: failing adventures never fill the batch the others wait behind.
    due = Q(fails=0) | Q(memory_cursor__last_error_at__isnull=True)
    for fails in range(1, BACKOFF_MAX_MINUTES.bit_length()):  # 2^fails minutes while under the cap
        due |= Q(fails=fails, memory_cursor__last_error_at__lt=now - timedelta(minutes=2**fails))
    due |= Q(
        fails__gte=BACKOFF_MAX_MINUTES.bit_length(),
        memory_cursor__last_error_at__lt=now - timedelta(minutes=BACKOFF_MAX_MINUTES),
    )
    return list(qs.filter(due).order_by("pk").values_list("pk", flat=True)[:limit])
