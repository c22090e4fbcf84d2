"""Story cards: which enter the prompt, and AI Dungeon's card JSON in and out."""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.db import transaction

from config.errors import InvalidRequest, NotFound
from stories import limits
from stories.models import (
    CARD_ENTRY_MAX,
    CARD_KEY_MAX,
    CARD_KEYS_MAX,
    CARDS_PER_ADVENTURE_MAX,
    Adventure,
    StoryCard,
)

# AI Dungeon's card types -> ours (anything else becomes "other").
_IMPORT_TYPES = {"character": "character", "location": "place", "place": "place", "item": "item", "faction": "faction"}
_EXPORT_TYPES = {"character": "character", "place": "location", "item": "item", "faction": "faction", "other": "custom"}


@dataclass(frozen=True)
class Triggered:
    card: StoryCard
    key: str  # the trigger key that matched


def _key_pattern(key: str) -> re.Pattern:
    return re.compile(r"(?<!\w)" + re.escape(key) + r"(?!\w)", re.IGNORECASE)


def triggered(*, cards: list[StoryCard], text: str) -> list[Triggered]:
    """Cards with a key in ``text`` (whole word, any case), in card order."""
    out = []
    for card in cards:
        for key in card.keys:
            if key.strip() and _key_pattern(key.strip()).search(text):
                out.append(Triggered(card, key.strip()))
                break
    return out


def clean_keys(raw) -> list[str]:
    if isinstance(raw, str):
        raw = raw.split(",")
    if not isinstance(raw, list) or not all(isinstance(k, str) for k in raw):
        raise InvalidRequest("keys must be a list of strings or one comma-separated string")
    keys = []
    for key in raw:
        key = key.strip()
        if key and key.lower() not in (k.lower() for k in keys):
            keys.append(key)
    if len(keys) > CARD_KEYS_MAX:
        raise InvalidRequest(f"a card has at most {CARD_KEYS_MAX} keys")
    if any(len(k) > CARD_KEY_MAX for k in keys):
        raise InvalidRequest(f"a key is at most {CARD_KEY_MAX} characters")
    return keys


def card_limit_check(*, adventure: Adventure, adding: int) -> None:
    if StoryCard.objects.filter(adventure=adventure).count() + adding > CARDS_PER_ADVENTURE_MAX:
        raise InvalidRequest(f"an adventure has at most {CARDS_PER_ADVENTURE_MAX} story cards")


def access_card(*, adventure: Adventure, card_id: int) -> StoryCard:
    """A card of ``adventure`` (itself owner-checked); NotFound otherwise."""
    card = StoryCard.objects.filter(pk=card_id, adventure=adventure).first()
    if card is None:
        raise NotFound()
    return card


def card_create(*, adventure: Adventure, **fields) -> StoryCard:
    """A new card, within the adventure's card limit (checked under the adventure's row lock)."""
    with transaction.atomic():
        Adventure.objects.select_for_update().filter(pk=adventure.pk).first()
        card_limit_check(adventure=adventure, adding=1)
        return StoryCard.objects.create(adventure=adventure, **fields)


def card_update(*, card: StoryCard, **fields) -> StoryCard:
    """Change the fields given; writes only those."""
    for name, value in fields.items():
        setattr(card, name, value)
    if fields:
        card.save(update_fields=[*fields, "updated_at"])
    return card


def card_delete(*, card: StoryCard) -> None:
    card.delete()


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
