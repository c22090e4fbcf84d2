from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from memory import embeddings
from memory.models import Memory
from memory.story import memories, summarize
from stories.accounts import ai_settings
from stories.providers import ProviderError


class Command(BaseCommand):
    help = (
        "Re-summarize block memories from their source actions with the current prompt. Dry run by default "
        "(prints old and new text); --write applies. Uses each owner's own model, or the offline summarizer."
    )

    def add_arguments(self, parser):
        parser.add_argument("--write", action="store_true", help="store the new texts (default: dry run)")
        parser.add_argument("--adventure", type=int, action="append", help="only this adventure id (repeatable)")
        parser.add_argument("--limit", type=int, default=0, help="at most this many memories")

    def handle(self, *args, write, adventure, limit, **options):
        qs = Memory.objects.filter(source_start__isnull=False).select_related("adventure").order_by("id")
        if adventure:
            qs = qs.filter(adventure_id__in=adventure)
        if limit:
            qs = qs[:limit]
        rows = list(qs)
        if not rows:
            raise CommandError("no block memories match")
        changed = failed = 0
        for memory in tqdm(rows, desc="rewriting memories" if write else "dry run", unit="memory"):
            owner = memory.adventure.owner_id
            actions = memories.memory_source(memory=memory)
            if not actions:
                continue
            conn = ai_settings.connection_for_background(user_id=owner, purpose="summary")
            try:
                written = summarize.write_memory(
                    conn=conn,
                    adventure=memory.adventure,
                    actions=actions,
                    cards=list(memory.adventure.cards.all()),
                    user_id=owner,
                )
            except ProviderError as exc:
                failed += 1
                tqdm.write(f"#{memory.pk}: {exc.message}")
                continue
            if written.text == memory.text:
                continue
            changed += 1
            if write:
                if Memory.objects.filter(pk=memory.pk, text=memory.text).update(
                    text=written.text, stale=False, offline=written.offline
                ):
                    embeddings.vector_set(memory_id=memory.pk, expected_text=written.text, vector=None, model="")
            else:
                tqdm.write(f"#{memory.pk}\n  - {memory.text}\n  + {written.text}")
        verb = "rewrote" if write else "would rewrite"
        self.stdout.write(f"{verb} {changed} of {len(rows)} memories; {failed} failed")
        if write and changed:
            self.stdout.write("Cleared vectors are re-embedded by the next memory pass of each adventure.")
