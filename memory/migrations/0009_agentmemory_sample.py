"""A uniform sample of an agent's memories, read in index order: (agent, hashint8(id)) puts each
agent's memories in a fixed random order, so the candidate path's BM25 statistics come from the
first thousand of them (memory.agent_recall_sql.PREPARE_SQL) whatever the bank holds."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0008_agentmemory_candidate_indexes'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='agentmemory',
            index=models.Index(models.F('agent'), models.Func(models.F('id'), function='hashint8'),
                               name='agentmemory_sample'),
        ),
    ]
