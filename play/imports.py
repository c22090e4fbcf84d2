"""Adventure imports as jobs: the request checks the document and answers 202 with a job; the
import itself runs in a worker, bounded in time, and a large one never holds a web request.

- A small document (at most IMPORT_INLINE_ROWS branches, actions, cards and memories together,
  well under a second of work) is imported while the request waits: its job answers ``done`` (or
  the request answers 400 and stores nothing), so a client follows one flow for every size.
- A larger one has its outer shape checked (``import_doc.envelope``: format, version, the parts'
  counts), is stored on the job, and is imported by a worker (``run``), all or nothing, every row
  checked before the first is written, exactly as the synchronous import did. The job then holds
  the new adventure, or the 400 answer the document earned (``error``), and lets go of the file.
- A worker importing a job holds an advisory lock on it for the import's transaction: the job is
  ``running`` exactly while one does. A worker killed mid-import (its transaction rolls back) lets
  go of it: the job shows ``retrying`` and the sweeper sends it again at its next round (every
  SWEEP_INTERVAL_S); a delivery lost before any worker took it (a broker outage) is sent again
  once it is older than a job can run. A job that fails IMPORT_ATTEMPTS_MAX times (or runs past
  IMPORT_TIME_LIMIT_S, or needs more than IMPORT_MEMORY_MB) is failed with a sentence saying so.
  Progress is kept in Redis while the job runs (a stage and counts); finished jobs are kept a week.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import redis
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from config import advisory_locks, jobs
from config.errors import DomainError, NotFound, RateLimited
from config.redis_pool import redis_client
from play import changes
from stories import import_doc, limits
from stories.models import ImportJob

log = logging.getLogger(__name__)

IMPORT_INLINE_ROWS = 2_000
IMPORTS_QUEUED_MAX = 3  # a player's imports waiting or running at once
IMPORT_ATTEMPTS_MAX = 3
JOBS_KEPT = timedelta(days=7)
PROGRESS_TTL_S = 3600
SUBMIT_LOCK_SPACE = advisory_locks.IMPORT_SUBMIT
RUN_LOCK_SPACE = advisory_locks.IMPORT_RUN
RUNNING_SQL = """
SELECT EXISTS (SELECT 1 FROM pg_locks
               WHERE locktype = 'advisory' AND granted AND classid = %s AND objid = %s AND objsubid = 2
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))
"""


def _progress_key(job: ImportJob) -> str:
    return f"everlore:import:{job.pk}:{job.created_at.timestamp():.6f}:progress"


def _attempts_key(job: ImportJob) -> str:
    # the creation time too: ids start again in a new database (a test run), Redis keeps its keys
    return f"everlore:import:{job.pk}:{job.created_at.timestamp():.6f}:attempts"


def import_start(*, owner_id: int, data) -> ImportJob:
    """A job for the document: done already for a small one, queued for the workers otherwise.
    Raises InvalidRequest (nothing stored) for a document that is not one, RateLimited past the
    hourly limit or with IMPORTS_QUEUED_MAX imports of this player not finished."""
    shape = import_doc.envelope(data)
    limits.adventure_import(user_id=owner_id)
    if shape["rows"] <= IMPORT_INLINE_ROWS:
        adventure = changes.adventure_import(owner_id=owner_id, data=data)
        return ImportJob.objects.create(
            owner_id=owner_id,
            status=ImportJob.Status.DONE,
            title=adventure.title,
            rows=shape["rows"],
            adventure=adventure,
            finished_at=timezone.now(),
        )
    with transaction.atomic():
        # One submission of this player at a time (an advisory lock: the job rows themselves stay
        # free, a worker holds the row of the job it imports for as long as the import runs).
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [SUBMIT_LOCK_SPACE, owner_id])
        waiting = ImportJob.objects.filter(owner_id=owner_id, status=ImportJob.Status.QUEUED).count()
        if waiting >= IMPORTS_QUEUED_MAX:
            raise RateLimited(
                f"you have {IMPORTS_QUEUED_MAX} imports waiting; try again once one has finished", retry_after=30
            )
        job = ImportJob.objects.create(
            owner_id=owner_id, document=data, title=shape["title"], rows=shape["rows"], sent_at=timezone.now()
        )
        jobs.import_after_commit(job_id=job.pk)
    return job


def access_job(*, user_id: int, job_id: int) -> ImportJob:
    """The player's own job (404 for any other id)."""
    job = ImportJob.objects.defer("document").filter(pk=job_id, owner_id=user_id).first()
    if job is None:
        raise NotFound()
    return job


def job_state(job: ImportJob) -> dict:
    """What the player sees of a job: its status (``running`` while a worker imports it, with its
    progress; ``retrying`` when the worker importing it stopped and it waits to be sent again)."""
    status, progress, note = job.status, None, ""
    if status == ImportJob.Status.QUEUED:
        # the attempts first: a worker counts its attempt once it holds the job, so a count read before
        # "is it held" never takes a job just begun for one whose worker stopped
        tried = _attempts_read(job)
        if _running(job):
            status, progress = "running", _progress_read(job)
        elif tried > 0:
            status = "retrying"
            note = (
                f"the worker importing it stopped after attempt {tried} of {IMPORT_ATTEMPTS_MAX}; it is sent "
                f"again within {settings.SWEEP_INTERVAL_S} seconds"
            )
    elif status == ImportJob.Status.DONE:
        progress = {"stage": "done", "done": job.rows, "total": job.rows}
    return {
        "id": job.pk,
        "status": status,
        "title": job.title,
        "rows": job.rows,
        "progress": progress,
        "note": note,
        "adventure_id": job.adventure_id,
        "error": job.error,
        "created_at": job.created_at,
        "finished_at": job.finished_at,
    }


def _running(job: ImportJob) -> bool:
    """Whether a worker is importing the job now (it holds the job's advisory lock)."""
    with connection.cursor() as cursor:
        cursor.execute(RUNNING_SQL, [RUN_LOCK_SPACE, job.pk])
        return cursor.fetchone()[0]


def _attempts_read(job: ImportJob) -> int:
    try:
        return int(redis_client().get(_attempts_key(job)) or 0)
    except redis.RedisError:
        return 0


def _progress_read(job: ImportJob) -> dict | None:
    try:
        raw = redis_client().get(_progress_key(job))
    except redis.RedisError:
        return None
    return json.loads(raw) if raw else None


def _progress_write(job: ImportJob, stage: str, done: int, total: int) -> None:
    try:
        redis_client().set(
            _progress_key(job), json.dumps({"stage": stage, "done": done, "total": total}), ex=PROGRESS_TTL_S
        )
    except redis.RedisError:
        pass  # progress is a courtesy; the import goes on


def _attempt(job: ImportJob) -> int:
    try:
        client = redis_client()
        attempts = client.incr(_attempts_key(job))
        client.expire(_attempts_key(job), int(JOBS_KEPT.total_seconds()))
        return attempts
    except redis.RedisError:
        return 1


def run(job_id: int) -> str:
    """Import the job's document (the workers call this; a delivery that finds the job finished,
    or held by a live worker, does nothing). The job's row stays locked for the whole import, so
    two deliveries never import one document twice; a worker that dies lets go of it."""
    with transaction.atomic():
        job = (
            ImportJob.objects.select_for_update(skip_locked=True)
            .filter(pk=job_id, status=ImportJob.Status.QUEUED)
            .first()
        )
        if job is None:
            return "not queued"
        with connection.cursor() as cursor:  # "running" while this transaction lasts (job_state, jobs_resend)
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [RUN_LOCK_SPACE, job.pk])
        if _attempt(job) > IMPORT_ATTEMPTS_MAX:
            _finish(
                job,
                error={
                    "detail": f"import: it failed on each of {IMPORT_ATTEMPTS_MAX} attempts (a worker "
                    "stopped or the database was away); send the file again",
                    "error": "failed",
                },
            )
            return "failed"
        _progress_write(job, "checking", 0, job.rows)
        try:
            with transaction.atomic():
                adventure = changes.adventure_import(
                    owner_id=job.owner_id,
                    data=job.document,
                    progress=lambda stage, done, total: _progress_write(job, stage, done, total),
                )
        except DomainError as refused:
            _finish(job, error=refused.body())
            return "refused"
        job.adventure = adventure
        _finish(job, title=adventure.title)
    return "done"


def _finish(job: ImportJob, *, error: dict | None = None, title: str | None = None) -> None:
    job.status = ImportJob.Status.FAILED if error else ImportJob.Status.DONE
    job.error, job.document, job.finished_at = error, None, timezone.now()
    if title is not None:
        job.title = title
    job.save(update_fields=["status", "error", "document", "finished_at", "adventure", "title"])
    transaction.on_commit(lambda: _progress_clear(job))


def _progress_clear(job: ImportJob) -> None:
    try:
        redis_client().delete(_progress_key(job))
    except redis.RedisError:
        pass


def job_stopped(job_id: int, why: str) -> None:
    """The worker stopped the job (its transaction has rolled back): failed, saying why.
    ``why`` is ``timeout`` (it ran past IMPORT_TIME_LIMIT_S) or ``too_large`` (it needed more
    memory than IMPORT_MEMORY_MB)."""
    detail = {
        "timeout": f"import: it took longer than {settings.IMPORT_TIME_LIMIT_S:g} second"
        f"{'' if settings.IMPORT_TIME_LIMIT_S == 1 else 's'} and was stopped (nothing "
        "was stored); split the file or try again later",
        "too_large": f"import: it needed more than {settings.IMPORT_MEMORY_MB} MB of memory and was stopped "
        "(nothing was stored); split the file into smaller ones",
    }[why]
    job = ImportJob.objects.filter(pk=job_id, status=ImportJob.Status.QUEUED).first()
    if job is not None:
        with transaction.atomic():
            _finish(job, error={"detail": detail, "error": why})


def jobs_resend() -> list[int]:
    """Queued jobs no worker holds whose worker stopped mid-import (an attempt began and its
    progress is left), or whose delivery was lost (sent longer ago than a job can run): sent
    again. Old finished jobs are deleted. The sweeper calls this."""
    now = timezone.now()
    ImportJob.objects.filter(finished_at__lt=now - JOBS_KEPT).delete()
    lost_before = now - timedelta(seconds=settings.IMPORT_TIME_LIMIT_S + 60)
    with transaction.atomic():  # a job a worker is importing is locked by it: skipped, never waited for
        queued = list(
            ImportJob.objects.select_for_update(skip_locked=True)
            .filter(status=ImportJob.Status.QUEUED)
            .only("pk", "created_at", "sent_at")
            .order_by("sent_at")[:100]
        )
        again = [job for job in queued if job.sent_at is None or job.sent_at < lost_before or _stopped(job)]
        if again:
            ImportJob.objects.filter(pk__in=[job.pk for job in again]).update(sent_at=now)
            for job in again:
                _progress_clear(job)  # shown as retrying until a worker takes it
                jobs.import_after_commit(job_id=job.pk)
    return [job.pk for job in again]


def _stopped(job: ImportJob) -> bool:
    """An attempt at the job began (its progress is there) and no worker holds it now."""
    return _progress_read(job) is not None and not _running(job)
