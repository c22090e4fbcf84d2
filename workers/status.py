"""What operators see of the worker pool."""

from __future__ import annotations

import base64
import json
import time
from datetime import timedelta

import redis
from django.conf import settings
from django.utils import timezone

from config.celery import PASSES, QUEUES
from memory.models import PassRun
from memory.story import memory_pass
from workers.heartbeat import heartbeats_read
from workers.locks import client
from workers.models import ParkedJob

QUEUE = PASSES  # kombu's Redis list of the post-turn jobs (config.celery), whose oldest wait is shown


def _oldest_wait(r: redis.Redis) -> float | None:
    """Seconds the oldest queued job has waited (jobs carry enqueued_at)."""
    raw = r.lindex(QUEUE, -1)
    if raw is None:
        return None
    try:
        message = json.loads(raw)
        body = json.loads(base64.b64decode(message["body"]))
        enqueued = body[1].get("enqueued_at")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None
    return round(time.time() - enqueued, 1) if enqueued else None


def pool_status() -> dict:
    now = timezone.now()
    out: dict = {"generated_at": now.isoformat()}
    try:
        r = client()
        out["queue_depth"] = sum(r.llen(name) for name in QUEUES)
        out["reserved_unacked"] = r.hlen("unacked")
        out["oldest_waiting_s"] = _oldest_wait(r)
        beats = heartbeats_read(client=r)
        out["workers"] = sorted(beats)
        out["redis"] = "up"
    except redis.RedisError as exc:
        out.update(
            redis=f"down ({exc.__class__.__name__})",
            queue_depth=None,
            reserved_unacked=None,
            oldest_waiting_s=None,
            workers=[],
        )
    limit = timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT)
    out["running_passes"] = PassRun.objects.filter(finished_at__isnull=True, started_at__gte=now - limit).count()
    out["adventures_behind"] = len(memory_pass.adventures_behind(limit=100_000))
    out["parked_jobs"] = ParkedJob.objects.count()
    hour = now - timedelta(hours=1)
    out["failures_last_hour"] = (
        PassRun.objects.filter(started_at__gte=hour, outcome="errors").count()
        + ParkedJob.objects.filter(parked_at__gte=hour).count()
    )
    out["passes_last_hour"] = PassRun.objects.filter(started_at__gte=hour).count()
    out["recent_parked"] = [
        {"task": p.task_name, "args": p.args, "attempts": p.attempts, "parked_at": p.parked_at.isoformat()}
        for p in ParkedJob.objects.order_by("-parked_at")[:5]
    ]
    return out
