"""Moderators see who plays and watches each story, its invitations and how it takes its turns
(stories played together): view only."""

from django.db import migrations

WANTED = {("stories", "membership"): ["view"], ("stories", "invite"): ["view"], ("stories", "party"): ["view"]}


def permissions_add(apps, schema_editor):
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
    for (app_label, model), actions in WANTED.items():
        for action in actions:
            group.permissions.add(
                Permission.objects.get(content_type__app_label=app_label, codename=f"{action}_{model}")
            )


def permissions_remove(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    codenames = [f"{action}_{model}" for (_, model), actions in WANTED.items() for action in actions]
    for group in Group.objects.filter(name="Moderators"):
        group.permissions.remove(*Permission.objects.filter(content_type__app_label="stories", codename__in=codenames))


class Migration(migrations.Migration):
    dependencies = [("stories", "0024_party"), ("stories", "0016_moderators_scenarios")]
    operations = [migrations.RunPython(permissions_add, permissions_remove)]
