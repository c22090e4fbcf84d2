"""A job that always kills the worker process running it (for the parking test).
Loaded into test workers with --include tests.support.poison."""

import os
import signal

from celery import shared_task

from workers.tasks import ParkingTask


@shared_task(name="tests.poison", base=ParkingTask, bind=True)
def poison(self, n: int) -> None:
    os.kill(os.getpid(), signal.SIGKILL)
