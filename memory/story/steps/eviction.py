"""Step 5: past the owner's capacity, the least recently used memories of the path are forgotten,
per holder (the adventure's own bank, each character's); pins stay."""

from __future__ import annotations

from django.db import connection
from django.db.models.functions import Coalesce

from memory.models import Memory
from memory.story.blocks import path_memories
from memory.story.report import PassReport
from stories.accounts import ai_settings
from stories.models import Adventure, Branch
from stories.tree import lineage

MEMORIES = Memory._meta.db_table


def evict(*, adventure: Adventure, head: Branch, report: PassReport) -> None:
    """Forget the least recently used memories of the current path past the
    owner's capacity (last used, else created; ties: lower use count first),
    for the adventure's own bank and for each character's, each on its own.
    Pinned memories are never evicted, so pins alone may exceed capacity."""
    capacity = ai_settings.ai_settings_loaded(adventure=adventure, user_id=adventure.owner_id).memory_bank_capacity
    for holder, excess in ((h, n - capacity) for h, n in _bank_sizes(head)):
        if excess <= 0:
            continue
        active = path_memories(head).filter(forgotten=False)  # built when a bank is past capacity: rarely
        held = active.filter(character_id=holder) if holder is not None else active.filter(character__isnull=True)
        victims = list(
            held.filter(pinned=False)
            .order_by(Coalesce("last_used_at", "created_at").asc(), "use_count", "id")
            .values_list("pk", flat=True)[:excess]
        )
        report.evicted += Memory.objects.filter(pk__in=victims, pinned=False).update(forgotten=True)


def _bank_sizes(head: Branch) -> list[tuple[int | None, int]]:
    """(character id or None, memories not forgotten) for every bank on ``head``'s path: the shared
    story's memories (path_memories with no reader), in one statement as written (every pass asks it;
    the ORM compiled its GROUP BY each time)."""
    path, params = lineage.path_sql(head, table="m")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT m.character_id, COUNT(*) FROM {MEMORIES} m WHERE {path} AND m.adventure_id = %s"
            " AND m.seen_by IS NULL AND NOT m.forgotten GROUP BY m.character_id",
            [*params, head.adventure_id],
        )
        return cursor.fetchall()
