"""Moderators see who plays and watches each story, its invitations and how it takes its turns
(stories played together): view only."""

from importlib import import_module

from django.db import migrations

WANTED = {("stories", "membership"): ["view"], ("stories", "invite"): ["view"], ("stories", "party"): ["view"]}
_GRANTS = import_module("stories.migrations.0016_moderators_scenarios")


def permissions_add(apps, schema_editor):
    _GRANTS.grant(apps, WANTED)


def permissions_remove(apps, schema_editor):
    _GRANTS.revoke(apps, WANTED)


class Migration(migrations.Migration):
    dependencies = [("stories", "0024_party"), ("stories", "0016_moderators_scenarios")]
    operations = [migrations.RunPython(permissions_add, permissions_remove)]
