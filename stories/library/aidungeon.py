"""AI Dungeon's story-card JSON, in and out."""

from __future__ import annotations

from django.db import transaction

from config.errors import InvalidRequest
from stories import limits
from stories.cards import card_limit_check, clean_keys
from stories.models import CARD_ENTRY_MAX, Adventure, StoryCard

# AI Dungeon's card types -> ours (anything else becomes "other").
_IMPORT_TYPES = {"character": "character", "location": "place", "place": "place", "item": "item", "faction": "faction"}
_EXPORT_TYPES = {"character": "character", "place": "location", "item": "item", "faction": "faction", "other": "custom"}


def import_aidungeon(*, adventure: Adventure, data) -> list[StoryCard]:
    """Create cards from AI Dungeon's story-card export (a list of objects with
    keys, value/entry, type, title/name, description/notes). All or nothing; counts toward the
    owner's FILE_IMPORTS_PER_HOUR."""
    limits.file_import(user_id=adventure.owner_id)
    if isinstance(data, dict) and isinstance(data.get("storyCards"), list):
        data = data["storyCards"]
    if not isinstance(data, list):
        raise InvalidRequest("expected a JSON list of story cards (AI Dungeon's story card export)")
    cards = []
    for index, item in enumerate(data, start=1):
        if not isinstance(item, dict):
            raise InvalidRequest(f"card #{index} is not an object")
        try:
            keys = clean_keys(item.get("keys", []))
        except InvalidRequest as exc:
            raise InvalidRequest(f"card #{index}: {exc}") from None
        entry = item.get("value", item.get("entry", ""))
        name = item.get("title", item.get("name", "")) or (keys[0] if keys else "")
        notes = item.get("description", item.get("notes", "")) or ""
        if not all(isinstance(v, str) for v in (entry, name, notes)):
            raise InvalidRequest(f"card #{index}: title, value and description must be text")
        if len(entry) > CARD_ENTRY_MAX:
            raise InvalidRequest(f"card #{index}: the entry is over {CARD_ENTRY_MAX} characters")
        if not name.strip():
            raise InvalidRequest(f"card #{index}: needs a title or at least one key")
        kind = _IMPORT_TYPES.get(str(item.get("type", "")).lower(), "other")
        cards.append(
            StoryCard(
                adventure=adventure,
                type=kind,
                name=name.strip()[:100],
                keys=keys,
                entry=entry,
                notes=notes[:CARD_ENTRY_MAX],
            )
        )
    card_limit_check(adventure=adventure, adding=len(cards))
    with transaction.atomic():
        return StoryCard.objects.bulk_create(cards)


def export_aidungeon(*, adventure: Adventure) -> list[dict]:
    return [
        {
            "keys": ",".join(card.keys),
            "value": card.entry,
            "type": _EXPORT_TYPES[card.type],
            "title": card.name,
            "description": card.notes,
            "useForCharacterCreation": False,
        }
        for card in StoryCard.objects.filter(adventure=adventure).order_by("id")
    ]
