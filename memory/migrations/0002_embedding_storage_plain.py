from django.db import migrations


class Migration(migrations.Migration):
    """Keep vectors inline (no TOAST detour on every ranked row); see Memory.embedding."""

    dependencies = [("memory", "0001_initial")]
    operations = [
        migrations.RunSQL(
            "ALTER TABLE memory_memory ALTER COLUMN embedding SET STORAGE PLAIN",
            reverse_sql="ALTER TABLE memory_memory ALTER COLUMN embedding SET STORAGE EXTENDED",
        ),
    ]
