from urllib.parse import urlsplit

from django.db import migrations, models


def _origin(url: str) -> str:  # accounts.endpoint_origin as of this migration
    try:
        parts = urlsplit(url.strip())
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError:
        return ""
    if not parts.hostname:
        return ""
    return f"{parts.scheme.lower()}://{parts.hostname.lower()}:{port}"


def bind_stored_keys(apps, schema_editor):
    """A key stored before keys were bound belongs to the endpoint it sits beside."""
    AISettings = apps.get_model("stories", "AISettings")
    for row in AISettings.objects.exclude(api_key_encrypted="").only("pk", "endpoint_url"):
        AISettings.objects.filter(pk=row.pk).update(api_key_origin=_origin(row.endpoint_url))


class Migration(migrations.Migration):
    dependencies = [("stories", "0007_storycard_in_cast")]

    operations = [
        migrations.AddField(
            model_name="aisettings",
            name="api_key_origin",
            field=models.CharField(blank=True, default="", max_length=600),
        ),
        migrations.RunPython(bind_stored_keys, migrations.RunPython.noop),
    ]
