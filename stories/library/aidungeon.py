"""AI Dungeon's story-card JSON, in and out."""

from __future__ import annotations

from django.db import transaction

from config.errors import InvalidRequest
from stories import limits
from stories.cards import card_limit_check, clean_keys
from stories.models import CARD_ENTRY_MAX, Adventure, StoryCard

# AI Dungeon's card types -> ours (anything else becomes "other").
_IMPORT_TYPES = {"character": "character", "location": "place", "place": "place", "item": "item", "faction": "faction"}
TITLE_MAX = StoryCard._meta.get_field("name").max_length  # a card's title becomes our card's name
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
        name = item.get("title", item.get("name", ""))
        notes = item.get("description", item.get("notes"))
        notes = "" if notes is None else notes  # a card with no description exports it as null
        if not all(isinstance(v, str) for v in (entry, name, notes)):
            raise InvalidRequest(f"card #{index}: title, value and description must be text")
        name = name or (keys[0] if keys else "")
        for what, text, most in (("entry", entry, CARD_ENTRY_MAX), ("description", notes, CARD_ENTRY_MAX)):
            if len(text) > most:
                raise InvalidRequest(f"card #{index}: the {what} is over {most} characters")
        if len(name) > TITLE_MAX:
            raise InvalidRequest(f"card #{index}: the title is over {TITLE_MAX} characters")
        if not name.strip():
            raise InvalidRequest(f"card #{index}: needs a title or at least one key")
        kind = item.get("type")
        kind = "" if kind is None else kind
        if not isinstance(kind, str):
            raise InvalidRequest(f"card #{index}: the type must be text (character, location, item, faction ...)")
        kind = _IMPORT_TYPES.get(kind.lower(), "other")
        cards.append(
            StoryCard(
                adventure=adventure,
                type=kind,
                name=name.strip(),
                keys=keys,
                entry=entry,
                notes=notes,
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
