"""Moderators read scenarios and the report queue and act through the lists' actions (unpublish,
hide, restore, dismiss): view and change on both, nothing else."""

from django.db import migrations

WANTED = {("stories", "scenario"): ["view", "change"], ("stories", "scenarioreport"): ["view", "change"]}


def permissions_add(apps, schema_editor):
    grant(apps, WANTED)


def permissions_remove(apps, schema_editor):
    revoke(apps, WANTED)


def grant(apps, wanted: dict) -> None:
    """The Moderators group gets ``wanted``'s permissions ({(app, model): [action, ...]}); later
    migrations that widen what moderators see call this too."""
    from django.apps import apps as global_apps
    from django.contrib.auth.management import create_permissions

    # Permissions are normally made after all migrations; the group needs these now.
    app_config = global_apps.get_app_config("stories")
    original = app_config.models_module
    app_config.models_module = original or True
    try:
        create_permissions(app_config, apps=apps, verbosity=0)
    finally:
        app_config.models_module = original
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name="Moderators")
    for (app_label, model), actions in wanted.items():
        for action in actions:
            group.permissions.add(
                Permission.objects.get(content_type__app_label=app_label, codename=f"{action}_{model}")
            )


def revoke(apps, wanted: dict) -> None:
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    codenames = [f"{action}_{model}" for (_, model), actions in wanted.items() for action in actions]
    for group in Group.objects.filter(name="Moderators"):
        group.permissions.remove(*Permission.objects.filter(content_type__app_label="stories", codename__in=codenames))


class Migration(migrations.Migration):
    dependencies = [("stories", "0015_starter_scenarios"), ("stories", "0004_moderators_group")]
    operations = [migrations.RunPython(permissions_add, permissions_remove)]
