"""Which story cards enter the prompt, by World Info's rules as SillyTavern's lorebooks carry them.

A card is triggered when a key of it is in the recent story (whole word, any case) and, when it has
secondary keys, its logic holds: a key AND any of them (``and_any``), AND NOT all of them
(``not_all``), AND none of them (``not_any``), AND all of them (``and_all``). A card with a chance
below 100 % then fires on that share of the turns; the roll is the card's and the turn's (the same
turn, retried or shown in Insights, rolls the same). Then, for up to RECURSION_ROUNDS rounds, the
entries of the cards triggered may trigger more cards, as in SillyTavern: a card with
``prevent_recursion`` (a card made on this site, unless its player says otherwise) triggers none
by its entry, and one with ``exclude_recursion`` is triggered only by the story."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from stories.models import StoryCard

RECURSION_ROUNDS = 3  # rounds of entries triggering entries (SillyTavern's default scan is bounded too)


@dataclass(frozen=True)
class Triggered:
    card: StoryCard
    key: str  # the trigger key that matched
    via: str = ""  # the card whose entry named it; empty: the story


@dataclass
class Scan:
    hits: list[Triggered] = field(default_factory=list)
    misses: dict[int, str] = field(default_factory=dict)  # card id -> why a key it has did not trigger it


def _key_pattern(key: str) -> re.Pattern:
    return re.compile(r"(?<!\w)" + re.escape(key) + r"(?!\w)", re.IGNORECASE)


def _named(key: str, text: str) -> bool:
    return bool(key.strip()) and bool(_key_pattern(key.strip()).search(text))


def _logic_holds(card: StoryCard, text: str) -> tuple[bool, str]:
    keys = [k for k in card.secondary_keys or [] if k.strip()]
    if not keys:
        return True, ""
    named = [_named(k, text) for k in keys]
    logic = card.selective_logic
    holds = {
        "and_any": any(named),
        "not_all": not all(named),
        "not_any": not any(named),
        "and_all": all(named),
    }.get(logic, any(named))
    listed = ", ".join(f'"{k}"' for k in keys[:5])
    why = {
        "and_any": f"none of its secondary keys ({listed}) is there too",
        "not_all": f"all of its secondary keys ({listed}) are there too, and it fires only when not all are",
        "not_any": f"one of its secondary keys ({listed}) is there too, and it fires only when none is",
        "and_all": f"not all of its secondary keys ({listed}) are there too",
    }.get(logic, "")
    return holds, why


def _ident(card: StoryCard) -> int:
    return card.pk if card.pk is not None else id(card)  # a card not saved (a scenario's preview)


def _rolls(card: StoryCard, turn: int) -> bool:
    if card.probability >= 100:
        return True
    return random.Random(f"{card.pk}:{turn}").random() * 100 < card.probability


def scan(*, cards: list[StoryCard], text: str, turn: int = 0) -> Scan:
    """The cards triggered by ``text`` (the recent story) at ``turn`` (the newest action's depth),
    in card order, then those their entries trigger; and why each card named but not triggered
    was not."""
    out = Scan()
    done: set[int] = set()

    def look(pool: list[StoryCard], body: str, via: str) -> list[Triggered]:
        found = []
        for card in pool:
            key = next((k.strip() for k in card.keys if _named(k, body)), None)
            if key is None:
                continue
            holds, why = _logic_holds(card, body)
            if not holds:
                out.misses.setdefault(_ident(card), f'its key "{key}" is there, but {why}')
                continue
            if not _rolls(card, turn):
                out.misses.setdefault(
                    _ident(card),
                    f'its key "{key}" is there, but it fires on {card.probability} % of turns and not this one',
                )
                continue
            found.append(Triggered(card, key, via))
            done.add(_ident(card))
            out.misses.pop(_ident(card), None)
        return found

    new = look(cards, text, "")
    out.hits += new
    for _ in range(RECURSION_ROUNDS):
        sources = [hit for hit in new if not hit.card.prevent_recursion and hit.card.entry.strip()]
        if not sources:
            break
        pool = [c for c in cards if _ident(c) not in done and not c.exclude_recursion]
        new = []
        for source in sources:
            new += look([c for c in pool if _ident(c) not in done], source.card.entry, source.card.name)
        out.hits += new
    return out


def triggered(*, cards: list[StoryCard], text: str, turn: int = 0) -> list[Triggered]:
    """The cards ``text`` triggers (``scan``'s hits)."""
    return scan(cards=cards, text=text, turn=turn).hits
