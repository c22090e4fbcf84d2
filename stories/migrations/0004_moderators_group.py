from django.db import migrations

# Exactly what moderation needs: read players' content, hide it, suspend users,
# manage memories. Nothing on AI settings (API keys) or world tokens.
MODERATOR_PERMISSIONS = {
    ("auth", "user"): ["view", "change"],
    ("stories", "adventure"): ["view", "change"],
    ("stories", "branch"): ["view"],
    ("stories", "action"): ["view", "change"],
    ("stories", "storycard"): ["view"],
    ("stories", "providercall"): ["view"],
    ("memory", "memory"): ["view", "change"],
    ("memory", "cursor"): ["view"],
    ("memory", "passrun"): ["view"],
    ("memory", "world"): ["view", "change"],
    ("memory", "agent"): ["view"],
    ("memory", "agentmemory"): ["view", "change", "delete"],
    ("workers", "parkedjob"): ["view"],
}


def create_group(apps, schema_editor):
    from django.apps import apps as global_apps
    from django.contrib.auth.management import create_permissions

    # Permissions are normally made after all migrations; this group needs them now.
    for app_config in global_apps.get_app_configs():
        original = app_config.models_module
        app_config.models_module = original or True
        try:
            create_permissions(app_config, apps=apps, verbosity=0)
        finally:
            app_config.models_module = original
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name="Moderators")
    wanted = []
    for (app_label, model), actions in MODERATOR_PERMISSIONS.items():
        for action in actions:
            wanted.append(Permission.objects.get(content_type__app_label=app_label, codename=f"{action}_{model}"))
    group.permissions.set(wanted)


def remove_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name="Moderators").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("stories", "0003_moderation"),
        ("memory", "0004_agent_memory"),
        ("workers", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]
    operations = [migrations.RunPython(create_group, remove_group)]
