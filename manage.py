#!/usr/bin/env python
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from config.embedded import one_machine_environment

    one_machine_environment()  # embedded Postgres and Redis for what DATABASE_URL / REDIS_URL do not name
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
