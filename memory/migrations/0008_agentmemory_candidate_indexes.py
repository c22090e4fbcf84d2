"""Indexes recall's candidate path reads (memory.agent_recall): HNSW over the
embeddings of the usual sizes (an expression index per size, as a column of
mixed sizes cannot be indexed whole), and the newest memories per partner and
per location. Building the HNSW index over a large table takes minutes."""

from django.db import migrations, models

# Embedding sizes the candidate path can search by index (memory.agent_indexes.INDEXED_DIMS):
# the local model's 384 and the common 768 / 1024 / 1536.
DIMS = (384, 768, 1024, 1536)


class Migration(migrations.Migration):

    dependencies = [
        ("memory", "0007_summary_snapshots"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="agentmemory",
            index=models.Index(fields=["agent", "partner", "occurred_at"], name="agentmemory_partner_newest"),
        ),
        migrations.AddIndex(
            model_name="agentmemory",
            index=models.Index(fields=["agent", "location", "occurred_at"], name="agentmemory_location_newest"),
        ),
        *[
            migrations.RunSQL(
                f"CREATE INDEX agentmemory_hnsw_{dims} ON memory_agentmemory "
                f"USING hnsw ((embedding::halfvec({dims})) halfvec_cosine_ops) WHERE vector_dims(embedding) = {dims}",
                f"DROP INDEX agentmemory_hnsw_{dims}",
            )
            for dims in DIMS
        ],
    ]
