"""The Celery app. Workers start with `celery -A config worker`."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("everlore")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"])
# The workers app adds its heartbeat step when Django is ready (workers.apps).
