"""Jobs the worker pool gave up on, for operators to see and re-queue."""

from django.db import models


class ParkedJob(models.Model):
    """A job that failed (or crashed its worker) on every one of its attempts."""

    task_name = models.CharField(max_length=200)
    task_id = models.CharField(max_length=100, unique=True)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    attempts = models.PositiveIntegerField()
    reason = models.CharField(max_length=500, blank=True, default="")
    parked_at = models.DateTimeField(auto_now_add=True, db_index=True)

    def __str__(self) -> str:
        return f"{self.task_name}{tuple(self.args)} parked after {self.attempts} attempts"
