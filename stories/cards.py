"""Story cards: their keys, their limit per adventure, and the player's own changes."""

from __future__ import annotations

from django.db import transaction

from config.compiled_once import CompiledOnce
from config.errors import InvalidRequest, NotFound
from stories.models import (
    CARD_KEY_MAX,
    CARD_KEYS_MAX,
    CARDS_PER_ADVENTURE_MAX,
    Adventure,
    StoryCard,
)
from stories.tree import writes

# every turn and every memory pass read them: compiled once (config.compiled_once)
_PRESENT = CompiledOnce(lambda shape, adventure_id: StoryCard.objects.filter(adventure_id=adventure_id))


def present_cards(adventure: Adventure) -> list[StoryCard]:
    """The adventure's cards on the path played, as ``adventure.cards.all()`` reads them (in id order,
    each knowing its adventure), in one statement compiled once."""
    cards = _PRESENT.all(adventure_id=adventure.pk)
    for card in cards:
        card.adventure = adventure
    return cards


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
    if StoryCard.objects.filter(adventure=adventure).count() + adding > CARDS_PER_ADVENTURE_MAX:  # every branch's
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
        writes.lock(adventure.pk, tree_write=False, read_branch=False)
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
