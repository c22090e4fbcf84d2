"""Which story cards enter the prompt: those with a trigger key in the recent story."""

from __future__ import annotations

import re
from dataclasses import dataclass

from stories.models import StoryCard


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
