"""Celery tasks: doorways that take ids and call one function; no logic here."""

from celery import shared_task

from config.health import database_status


@shared_task(name="workers.health_probe", bind=True)
def health_probe(self) -> dict:
    """Answer from a worker with its name and what it sees of the database."""
    return {"worker": self.request.hostname, "database": database_status()}
