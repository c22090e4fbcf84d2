"""What migrations write (the Moderators group and its permissions, the starter library), written
again for transactional tests: their flush empties every table, migrations' rows included."""

from __future__ import annotations

import importlib

from django.apps import apps


def migration_rows_restore() -> None:
    """The Moderators group with its permissions and the starter scenarios, as the migrations make them."""
    for name, function in [
        ("stories.migrations.0004_moderators_group", "create_group"),
        ("stories.migrations.0016_moderators_scenarios", "permissions_add"),
        ("stories.migrations.0015_starter_scenarios", "load"),
    ]:
        getattr(importlib.import_module(name), function)(apps, None)
