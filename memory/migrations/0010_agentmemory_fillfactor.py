"""Room on each page of agent memories for the row versions recall's bookkeeping writes (the last
time a memory was recalled, how often), so that those updates are mostly heap-only (HOT) and touch no
index; on a full page each of them inserts into every index of the table, its HNSW indexes among
them. A memory row is about 1 KB, so a page keeps room for one new version at a time: in
bench/agent_recall.py's table, rewritten with it, 71% of recall's updates were heap-only. Pages
written from now on keep 15% free; existing pages gain room as they are rewritten."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("memory", "0009_agentmemory_sample"),
    ]

    operations = [
        migrations.RunSQL("ALTER TABLE memory_agentmemory SET (fillfactor = 85)",
                          "ALTER TABLE memory_agentmemory RESET (fillfactor)"),
    ]
