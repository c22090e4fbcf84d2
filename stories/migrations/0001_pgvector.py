from django.db import migrations
from pgvector.django import VectorExtension


class Migration(migrations.Migration):
    """pgvector first: every later vector column needs it."""

    initial = True
    dependencies = []
    operations = [VectorExtension()]
