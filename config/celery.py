"""The Celery app. Workers start with `celery -A config worker`.

Two queues. ``passes``: each story's and agent's post-turn pass (and a gather round's narration),
work that mostly waits on the owner's model (a memory block's call, the summary's, a cast's): a worker
of threads holds many such waits at once (`make run` starts one: config.management.commands.runsite).
``celery`` (the default): imports, which need a process of their own (a hard time limit, a memory
bound), the sweeper and the health probe. A worker started with no ``-Q`` takes only the default queue:
give it ``-Q celery,passes`` to take both."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

PASSES = "passes"
DEFAULT = "celery"
QUEUES = (DEFAULT, PASSES)  # kombu's Redis lists, one a queue

app = Celery("everlore")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    task_routes={
        name: {"queue": PASSES} for name in ("workers.post_turn", "workers.agent_pass", "workers.gather_close")
    }
)
app.autodiscover_tasks(["workers"])
# The workers app adds its heartbeat step when Django is ready (workers.apps).
