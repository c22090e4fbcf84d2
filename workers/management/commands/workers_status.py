import json

from django.core.management.base import BaseCommand
from rich.console import Console
from rich.table import Table

from workers.status import pool_status


class Command(BaseCommand):
    help = "Show the worker pool: queue depth, running passes, oldest waiting job, lagging adventures, parked jobs."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")

    def handle(self, *args, **options):
        status = pool_status()
        if options["json"]:
            self.stdout.write(json.dumps(status, indent=2))
            return
        table = Table(title="Everlore worker pool", show_header=False)
        rows = [
            ("Redis", status["redis"]),
            ("Workers alive", ", ".join(status["workers"]) or "none"),
            ("Queue depth", status["queue_depth"]),
            ("Reserved, not yet acked", status["reserved_unacked"]),
            ("Oldest waiting job", "-" if status["oldest_waiting_s"] is None else f"{status['oldest_waiting_s']} s"),
            ("Passes running", status["running_passes"]),
            ("Adventures behind", status["adventures_behind"]),
            ("Passes in the last hour", status["passes_last_hour"]),
            ("Failures in the last hour", status["failures_last_hour"]),
            ("Parked jobs", status["parked_jobs"]),
        ]
        for name, value in rows:
            table.add_row(name, str(value))
        Console(file=self.stdout, force_terminal=False, width=100).print(table)
        for parked in status["recent_parked"]:
            self.stdout.write(
                f"parked: {parked['task']}{tuple(parked['args'])} after {parked['attempts']} attempts "
                f"at {parked['parked_at']}"
            )
