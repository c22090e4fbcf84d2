"""Serve the local demo model on loopback (config.local_model_server); runsite starts and watches it.

Its own knobs: LOCAL_MODEL_ENGINE (llama; stand-in: the suite's, never built), LOCAL_MODEL_CONTEXT
(tokens it reads, 8192), LOCAL_MODEL_THREADS (0: every core), LOCAL_MODEL_KEY (runsite's, per start).
"""

from __future__ import annotations

import os

from django.conf import settings
from django.core.management.base import BaseCommand

from config import local_model_server
from config.env import env_choice, env_int


class Command(BaseCommand):
    help = "Serve the local demo model (built on its first run) behind an OpenAI-compatible endpoint."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, required=True)

    def handle(self, *args, host, port, **options):
        local_model_server.serve(
            host=host,
            port=port,
            data_dir=settings.DATA_DIR,
            engine_name=env_choice("LOCAL_MODEL_ENGINE", "llama", ("llama", "stand-in")),
            context=env_int("LOCAL_MODEL_CONTEXT", 8192, minimum=512, maximum=32768),
            threads=env_int("LOCAL_MODEL_THREADS", 0, minimum=0, maximum=256),
            key=os.environ.get("LOCAL_MODEL_KEY", ""),
        )
