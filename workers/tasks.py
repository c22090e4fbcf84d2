"""Celery tasks: doorways that take ids and call one function of `memory`.

Delivery is at-least-once (late acks, requeue when a worker dies); every task
here is idempotent, and the database (cursor compare-and-set, unique
constraints) decides what is true. The per-adventure lock only saves work.
"""

from __future__ import annotations

import gc
import logging
import resource
import socket
import time
from contextlib import contextmanager

import redis
from celery import Task, current_app, shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import IntegrityError, connection, transaction

from config.health import database_status
from memory.agents import agent_indexes, agent_upkeep
from memory.story import marks, memory_pass
from play import imports, party
from workers.locks import adventure_lock, agent_lock, client
from workers.models import ParkedJob

log = logging.getLogger(__name__)

ATTEMPTS_TTL_S = 24 * 3600  # how long a job's delivery count is remembered


class ParkingTask(Task):
    """Counts deliveries of each job in Redis. A job delivered more than
    JOB_MAX_ATTEMPTS times (it keeps crashing its worker, or keeps failing) is
    parked in the database and reported instead of being run again."""

    abstract = True
    acks_late = True
    reject_on_worker_lost = True

    def __call__(self, *args, **kwargs):
        task_id = self.request.id
        if task_id:
            key = f"everlore:attempts:{task_id}"
            try:  # one round trip (a job's every delivery pays it)
                attempts, _ = client().pipeline(transaction=False).incr(key).expire(key, ATTEMPTS_TTL_S).execute()
            except redis.RedisError:
                attempts = 1
            if attempts > settings.JOB_MAX_ATTEMPTS:
                self._park(task_id, args, kwargs, attempts - 1)
                return "parked"
        return super().__call__(*args, **kwargs)

    def _park(self, task_id, args, kwargs, attempts):
        log.error("job %s%s parked after %s attempts", self.name, tuple(args), attempts)
        try:
            with transaction.atomic():
                ParkedJob.objects.create(
                    task_name=self.name,
                    task_id=task_id,
                    args=list(args),
                    kwargs=kwargs,
                    attempts=attempts,
                    reason="crashed or failed on every attempt",
                )
        except IntegrityError:
            pass  # parked already (a redelivery of the parked job)


@shared_task(name="workers.health_probe", bind=True, ignore_result=False)
def health_probe(self) -> dict:
    """Answer from a worker with its name and what it sees of the database."""
    return {"worker": self.request.hostname, "database": database_status()}


@shared_task(name="workers.post_turn", bind=True, base=ParkingTask, max_retries=3, ignore_result=True)
def post_turn(self, adventure_id: int, enqueued_at: float | None = None) -> str:
    """Run the memory pass of one adventure under its lock.

    A job that finds the lock held asks the holder to run again (coalescing)
    and returns at once; a follow-up after the lock's TTL covers a holder that
    died. Transient model errors retry with backoff, a few times."""
    lock = adventure_lock(adventure_id)
    if not lock.acquire():
        lock.request_rerun()
        if not lock.acquire():  # the holder may have finished just now
            if lock.claim_followup():
                post_turn.apply_async(args=[adventure_id], countdown=lock.ttl_ms / 1000)
            return "coalesced"
    transient = more_due = False
    try:
        while True:
            lock.take_rerun()
            report = memory_pass.run_recorded(adventure_id, worker=self.request.hostname or socket.gethostname())
            transient, more_due = report.transient, report.more_due and not report.errors
            if not lock.take_rerun():
                break
    finally:
        lock.release()
    # A job that arrived between the last check and the release set the flag and then
    # found the lock still held; or the pass stopped at its cap with a backlog left
    # (an import): either way the next pass is a new job, queued at once, so other
    # adventures' jobs interleave with a long backlog instead of waiting behind it.
    if lock.take_rerun() or more_due:
        post_turn.apply_async(args=[adventure_id])
    if transient and self.request.retries < self.max_retries:
        raise self.retry(countdown=settings.JOB_RETRY_BACKOFF_S * 2**self.request.retries)
    return "done"


@shared_task(name="workers.agent_pass", bind=True, base=ParkingTask, ignore_result=True)
def agent_pass(self, agent_id: int) -> str:
    """Embed and consolidate one agent's memories under its lock (coalescing
    like post_turn)."""
    lock = agent_lock(agent_id)
    if not lock.acquire():
        lock.request_rerun()
        if not lock.acquire():
            if lock.claim_followup():
                agent_pass.apply_async(args=[agent_id], countdown=lock.ttl_ms / 1000)
            return "coalesced"
    more = False
    try:
        while True:
            lock.take_rerun()
            more = agent_upkeep.agent_upkeep_run(agent_id=agent_id)["more"]
            if not lock.take_rerun():
                break
    finally:
        lock.release()
    # work left beyond one pass's batches (a large batch of events): the next pass is a new job, so
    # other agents' jobs interleave with a long backlog
    if lock.take_rerun() or more:
        agent_pass.apply_async(args=[agent_id])
    return "done"


@shared_task(
    name="workers.import_adventure",
    bind=True,
    base=ParkingTask,
    ignore_result=True,
    soft_time_limit=settings.IMPORT_TIME_LIMIT_S,
    time_limit=settings.IMPORT_TIME_LIMIT_S + 30,
)
def import_adventure(self, job_id: int) -> str:
    """Import one adventure document (play.imports.run), within IMPORT_TIME_LIMIT_S and
    IMPORT_MEMORY_MB; past either, the import rolls back and its job fails saying so."""
    try:
        with _memory_bound(settings.IMPORT_MEMORY_MB):
            return imports.run(job_id)
    except SoftTimeLimitExceeded:
        log.warning("import job %s stopped after %s s", job_id, settings.IMPORT_TIME_LIMIT_S)
        imports.job_stopped(job_id, "timeout")
        return "timeout"
    except Exception as exc:
        if not _out_of_memory(exc):
            raise
        # the bound may bite inside the database driver too (libpq's "out of memory", or a rollback
        # failing on a connection a MemoryError left mid-message): the connection starts afresh
        connection.close()
        gc.collect()
        log.warning("import job %s stopped: it needed more than %s MB", job_id, settings.IMPORT_MEMORY_MB)
        imports.job_stopped(job_id, "too_large")
        return "too_large"


def _out_of_memory(exc: BaseException | None) -> bool:
    """Whether ``exc`` or an error it was raised from is a failed allocation (a thread's stack is one:
    under the bound Python says it "can't start new thread")."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        words = str(exc).lower()
        if isinstance(exc, MemoryError) or "out of memory" in words or "can't start new thread" in words:
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


THREAD_HEADROOM_MB = 72  # one thread's default stack (8 MB) and its malloc arena's reservation (64 MB)


@contextmanager
def _memory_bound(mb: int):
    """While inside, the process's address space may grow by at most ``mb``: an allocation past
    it raises MemoryError in the task instead of swapping or waking the kernel's OOM killer."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as statm:
        size = int(statm.read().split()[0]) * resource.getpagesize()
    # the import's own data counts; a thread's stack or a malloc arena that a library starts now
    # (address space reserved, mostly never touched) does not make a small import "too large"
    cap = size + (mb + THREAD_HEADROOM_MB) * 2**20
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def send_import(job_id: int) -> None:
    """Queue an import job now (config.jobs calls this after commit; the sweeper for lost ones)."""
    _send(import_adventure, args=[job_id])


class _Queued:
    """What sending a job returns here: its id only. Celery's own AsyncResult
    builds the result backend (a Redis client) once per thread, and under the
    ASGI server every request's database steps run on a fresh thread, so that
    cost ~18 ms of CPU per turn; these jobs keep no result anyway."""

    def __init__(self, task_id: str):
        self.id = task_id


def _send(task, *, args: list, kwargs: dict | None = None) -> None:
    # No time limits in the message: a limit written there by the sender wins over the worker's own
    # (its task's, from the worker's settings), and the sender's settings are not the worker's.
    current_app.send_task(
        task.name,
        args=args,
        kwargs=kwargs or {},
        retry=False,
        ignore_result=True,
        add_to_parent=False,
        result_cls=_Queued,
        soft_time_limit=None,
        time_limit=None,
    )


def send_agent_pass(agent_id: int) -> None:
    """Queue an agent's pass now (config.jobs calls this after commit)."""
    _send(agent_pass, args=[agent_id])


@shared_task(name="workers.sweep", ignore_result=True)
def sweep() -> int:
    """Re-enqueue adventures whose cursors lag behind their story (a job lost
    with a Redis restart is picked up within a sweep interval), and drop agent
    indexes no agent needs."""
    closed = memory_pass.abandoned_runs_close()
    if closed:
        log.warning(
            "sweeper marked %s memory passes crashed (running past %s: their worker died)",
            closed,
            memory_pass.PASS_ABANDONED_AFTER,
        )
    behind = memory_pass.adventures_behind()
    for adventure_id in behind:
        try:
            send_post_turn(adventure_id)
        except Exception as exc:  # kombu/redis raise many types when the broker is away
            log.warning("sweeper: adventure %s not queued (%s)", adventure_id, exc.__class__.__name__)
            break
    if behind:
        log.info("sweeper re-enqueued %s adventures", len(behind))
    resent = imports.jobs_resend()
    if resent:
        log.warning("sweeper sent %s import jobs again (their delivery was lost)", len(resent))
    for name in agent_indexes.agent_indexes_prune():
        log.info("sweeper dropped %s (its agent is gone or embeds at another size)", name)
    for adventure_id in party.rounds_due():  # gather rounds whose time passed with no page to close them
        try:
            _send(gather_close, args=[adventure_id])
        except Exception as exc:  # kombu/redis raise many types when the broker is away
            log.warning("sweeper: gather round of %s not queued (%s)", adventure_id, exc.__class__.__name__)
            break
    return len(behind)


@shared_task(name="workers.gather_close", ignore_result=True)
def gather_close(adventure_id: int) -> bool:
    """A gather round's narration, written when its time passed (play.party.round_close)."""
    return party.round_close(adventure_id=adventure_id)


def send_post_turn(adventure_id: int, *, grown_to: int | None = None) -> None:
    """Queue an adventure's memory pass now (config.jobs calls this after commit;
    the sweeper calls it for adventures that fell behind). ``grown_to``: the change only grew the
    path to this depth: no pass when the last one said nothing comes due there (marks.quiet_at);
    any other change forgets what the last pass said, and its pass says it again."""
    if grown_to is not None and marks.quiet_at(adventure_id, grown_to):
        return
    if grown_to is None:
        marks.quiet_until(adventure_id, None)
    _send(post_turn, args=[adventure_id], kwargs={"enqueued_at": time.time()})
