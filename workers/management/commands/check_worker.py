import socket

import redis
from django.core.management.base import BaseCommand, CommandError

from config.redis_pool import redis_client
from workers.heartbeat import HEARTBEAT_PREFIX


class Command(BaseCommand):
    help = "Exit 0 if the Celery worker on this host has a fresh heartbeat in Redis (container healthcheck)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--hostname",
            default=f"celery@{socket.gethostname()}",
            help="the worker's node name (default: celery@<this host>)",
        )

    def handle(self, *args, hostname, **options):
        try:
            alive = redis_client().exists(HEARTBEAT_PREFIX + hostname)
        except redis.RedisError as exc:
            raise CommandError(f"Redis unreachable ({exc.__class__.__name__})") from None
        if not alive:
            raise CommandError(f"no fresh heartbeat from {hostname}")
        self.stdout.write(f"{hostname} is alive")
