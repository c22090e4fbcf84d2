"""The starter library: the scenarios the project writes (stories/starters/scenarios.json),
published and nobody's (author null), so a newcomer has a story one click away. Reversible:
going back removes them (adventures started from them keep their copies)."""

import json
import secrets
from pathlib import Path

from django.contrib.postgres.search import SearchVector
from django.db import migrations
from django.db.models import Value
from django.utils import timezone

STARTERS = Path(__file__).resolve().parent.parent / "starters" / "scenarios.json"
CONTENT = ("title", "description", "opening", "plot_essentials", "ai_instructions", "authors_note", "tags", "rating")


def load(apps, schema_editor):
    Scenario = apps.get_model("stories", "Scenario")
    ScenarioVersion = apps.get_model("stories", "ScenarioVersion")
    for item in json.loads(STARTERS.read_text(encoding="utf-8")):
        if Scenario.objects.filter(slug=item["slug"]).exists():
            continue
        library = {k: item[k] for k in ("title", "description", "tags", "rating", "cover_emoji", "cover_color")}
        scenario = Scenario.objects.create(
            key=secrets.token_urlsafe(12),
            slug=item["slug"],
            visibility="published",
            published_at=timezone.now(),
            **library,
        )
        version = ScenarioVersion.objects.create(
            scenario=scenario,
            number=1,
            cards=item["cards"],
            cover_emoji=item["cover_emoji"],
            cover_color=item["cover_color"],
            **{k: item[k] for k in CONTENT},
        )
        Scenario.objects.filter(pk=scenario.pk).update(
            current=version,
            search=SearchVector(Value(item["title"]), weight="A", config="english")
            + SearchVector(Value(" ".join(item["tags"])), weight="A", config="english")
            + SearchVector(Value(item["description"]), weight="B", config="english"),
        )


def unload(apps, schema_editor):
    Scenario = apps.get_model("stories", "Scenario")
    Scenario.objects.filter(author__isnull=True, slug__startswith="starter-").delete()


class Migration(migrations.Migration):
    dependencies = [("stories", "0014_scenarios")]

    operations = [migrations.RunPython(load, unload)]
