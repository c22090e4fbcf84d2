"""The Celery app. Workers start with `celery -A config worker`."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("everlore")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"])


def _add_worker_steps(app: Celery) -> None:
    from workers.heartbeat import Heartbeat

    app.steps["worker"].add(Heartbeat)


_add_worker_steps(app)
