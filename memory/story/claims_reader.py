"""The offline reader of what a block changed on the cards (memory.story.claims stores what it reads).

It reads the narration only (what is inside quotes is someone speaking: threats, rumours, lies) and
catches the changes a sentence states outright, about a card it names (or the character a "he" or
"she" at its start refers to): a death (said outright or told by a body, a grave, a blanket over a
face), a reversal of one ("alive after all"), going missing, departure to or arrival at a named
place, an item given, taken, lost or destroyed, a title or rank given or taken, an allegiance sworn,
changed or betrayed, a marriage, a place destroyed, an alias ("Maud, the innkeeper"). It ignores what
only suggests a change: a sentence with a plan, a threat, a wish, a condition, a modal ("would",
"must have"), a negation, a question, pretence or disguise, a lie, a rumour or anything reported
("they say", "news came that"), and every sentence of a dream or a vision until the dreamer wakes.
Sleep and wounds are not deaths: only the words of a death are read as one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memory.story import claims_words as w
from memory.story.scene import Sentence, sentences_of
from stories.models import Action, StoryCard


@dataclass(frozen=True)
class Read:
    """One change read from a sentence, about one card."""

    card_id: int
    slot: str
    value: str
    text: str
    action_id: int
    topic: str = ""


@dataclass(frozen=True)
class Named:
    """A card as the reader finds it: its name and keys as whole words."""

    card_id: int
    name: str
    type: str
    pattern: re.Pattern

    def spans(self, text: str) -> list[tuple[int, int]]:
        return [m.span() for m in self.pattern.finditer(text)]


def named_cards(cards: list[StoryCard]) -> list[Named]:
    out = []
    for card in cards:
        words = [w.strip() for w in [card.name, *card.keys] if w and w.strip()]
        if not words:
            continue
        alternatives = sorted(dict.fromkeys(words), key=len, reverse=True)
        body = "|".join((re.escape(w) if w != w.lower() else "(?i:" + re.escape(w) + ")") for w in alternatives)
        out.append(Named(card.pk, card.name.strip(), card.type, re.compile(r"(?<![\w'’])(?:" + body + r")(?!\w)")))
    return out


def clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= w.TEXT_MAX else text[: w.TEXT_MAX - 1].rstrip() + "…"


def _phrase(text: str) -> str:
    return " ".join(text.split()).strip(" ,.;:")


def _card_by_name(named: list[Named], text: str) -> Named | None:
    return next((n for n in named if n.pattern.fullmatch(text.strip())), None)


def read_block(
    *,
    actions: list[Action],
    cards: list[StoryCard],
    name: str,
    standing: dict[tuple[int, str, str], str] | None = None,
) -> list[Read]:
    """What ``actions`` (a block, oldest first) changed on ``cards``: every change a sentence states
    outright, in story order. ``standing``: the values true on the path before the block, by (card,
    slot, topic); a claim equal to its standing value is not read again, and "alive" is read only
    after a death or a disappearance."""
    named = named_cards(cards)
    state = dict(standing or {})
    out: list[Read] = []
    last_character: Named | None = None
    dreaming, passage = False, -1
    for sentence in sentences_of(actions, name=name):
        if sentence.passage != passage:
            dreaming, passage = False, sentence.passage
        narration = w.clauses_masked(w.plainly(sentence.narration))
        found = sorted(((s, e, n) for n in named for s, e in n.spans(narration)), key=lambda t: t[0])
        if w.DREAM.search(narration):
            dreaming = True
        elif dreaming and w.WAKE.search(narration):
            dreaming = False
            continue
        hedged = dreaming or bool(w.HEDGE.search(narration)) or narration.rstrip().endswith("?")
        if not hedged:
            subjects = list(found)
            pronoun = w.PRONOUN_START.match(narration)
            if pronoun and last_character is not None:
                subjects.append((pronoun.start(1), pronoun.end(1), last_character))
            for clause in w.CLAUSE_PRONOUN.finditer(narration):
                who = _antecedent(found, narration, clause.start(1)) or last_character
                if who is not None and not (pronoun and clause.start(1) == pronoun.start(1)):
                    subjects.append((clause.start(1), clause.end(1), who))
            action = actions[sentence.passage]
            reads = _reads(sentence, narration, subjects, named, action, hero=name)
            if (m := w.PRONOUN_BODY.search(narration)) and (who := _antecedent(found, narration, m.start("pronoun"))):
                reads.append(Read(who.card_id, "status", "dead", clip(sentence.text), action.pk))
            if (m := w.ROLE_TO_PRONOUN.search(narration)) and (
                who := _antecedent(found, narration, m.start("pronoun"))
            ):
                reads.append(Read(who.card_id, "role", _phrase(m["role"]), clip(sentence.text), action.pk))
            if m := w.TAKEN_FROM_PRONOUN.search(narration):
                owner = _antecedent(found, narration, m.start("pronoun")) or last_character
                if owner is not None:
                    item = _item(m["item"])
                    reads.append(Read(owner.card_id, "holdings", f"lost {item}", clip(sentence.text), action.pk, item))
            for read in reads:
                key = (read.card_id, read.slot, read.topic)
                if state.get(key) == read.value:
                    continue
                if read.value == "alive" and state.get(key) not in ("dead", "missing"):
                    continue
                state[key] = read.value
                out.append(read)
        last_character = _antecedent(found, narration, len(narration)) or last_character
    return out


def _antecedent(found: list, narration: str, at: int) -> Named | None:
    """The character a "he", "she", "his" or "her" at ``at`` most likely means: the last one named
    before it (one named as an owner, "Stroud's men", only when no other is)."""
    before = [t for t in found if t[2].type == StoryCard.Type.CHARACTER and t[1] <= at]
    plain = [t for t in before if not re.match(r"['’]s\b", narration[t[1] :])]
    chosen = plain or before
    return max(chosen, key=lambda t: t[1])[2] if chosen else None


def _reads(
    sentence: Sentence, narration: str, found: list, named: list[Named], action: Action, *, hero: str = ""
) -> list[Read]:
    out: list[Read] = []
    text = clip(sentence.text)

    def claim(card: Named, slot: str, value: str, topic: str = "") -> None:
        out.append(Read(card.card_id, slot, value[:200], text, action.pk, topic[:100]))

    for start, end, card in found:
        after, before = narration[end:], narration[:start]
        if card.type in w.PLACE_TYPES:
            if (
                w.PLACE_DESTROYED_AFTER.match(after)
                or w.PLACE_DESTROYED_BEFORE.search(before)
                or (w.PLACE_SWEPT_BEFORE.search(before) and w.PLACE_SWEPT_AFTER.match(after))
                or w.PLACE_SUNK_AFTER.match(after)
            ):
                claim(card, "status", "destroyed")
            elif m := w.PLACE_TAKEN_AFTER.match(after):
                claim(card, "status", f"taken by {_phrase(m['by'])}")
            continue
        if card.type == StoryCard.Type.CHARACTER:
            if (
                w.DEATH_AFTER.match(after)
                or w.DEATH_BEFORE.search(before)
                or w.DEATH_POSSESSIVE.match(after)
                or w.FACE_COVERED.search(before)
                or (w.DEATH_OBJECT_BEFORE.search(before) and w.DEATH_OBJECT_AFTER.match(after))
                or (w.DEATH_SPLIT_BEFORE.search(before) and w.DEATH_SPLIT_AFTER.match(after))
                or (
                    w.CAUSED_BEFORE.search(before)
                    and (caused := w.CAUSED_AFTER.match(after))
                    and caused["how"].split()[0].lower() in ("hanged", "hung", "shot", "killed", "executed", "beheaded")
                )
            ):
                claim(card, "status", "dead")
                continue
            if w.ALIVE_AFTER.match(after):
                claim(card, "status", "alive")
                continue
            if w.MISSING_AFTER.match(after):
                claim(card, "status", "missing")
                continue
            if (caused := w.CAUSED_AFTER.match(after)) and w.CAUSED_BEFORE.search(before):
                claim(card, "status", "arrested")
            elif m := w.CAUGHT_AFTER.match(after):
                caught = m["how"].split()[0].lower() in (
                    "arrested",
                    "imprisoned",
                    "jailed",
                    "locked",
                    "taken",
                    "thrown",
                )
                claim(card, "status", "arrested" if caught else " ".join(m["how"].lower().split()))
            _character_changes(card, after, before, named, claim, hero=hero)
            _done_to(card, after, before, claim, named)
            continue
        if card.type == StoryCard.Type.ITEM:
            _item_moves(card, after, before, _subject(found, narration, before), named, claim)
    return out


def _subject(found: list, narration: str, before: str) -> Named | None:
    """The character that is the subject of the verb just before an item's name: named (or a he or
    she) right before that verb, with nothing but a surname, an aside or an adverb between."""
    verb = re.search(r"(\w+(?:\s+up)?)\s+(?:the\s+)?$", before)
    if verb is None:
        return None
    for start, end, card in sorted(found, key=lambda t: -t[1]):
        if card.type == StoryCard.Type.CHARACTER and end <= verb.start():
            gap = narration[end : verb.start()]
            between = (
                r"(?:\s+[A-Z][\w'’-]+)?\s*(?:,[^,.;]{1,60},\s*)?(?:(?:\w+ly|now|then|still|already|soon|also)\s+)?"
            )
            return card if re.fullmatch(between, gap) else None
    return None


def _item_moves(card: Named, after: str, before: str, holder: Named | None, named: list[Named], claim) -> None:
    """An item card named in a sentence: destroyed, thrown away (its holder loses it), or taken by the
    character named before it."""
    topic = card.name.lower()
    if w.ITEM_DESTROYED_AFTER.match(after):
        claim(card, "status", "destroyed")
    elif m := w.ITEM_STOLEN_BEFORE.search(before):  # "made off with" is a theft; "pulls away with", a taking
        thief = m["fled"] or (m["verb"] or "").lower() in (
            "make",
            "makes",
            "made",
            "ride",
            "rides",
            "rode",
            "run",
            "ran",
        )
        claim(card, "status", "stolen" if thief else "taken")
    elif m := w.ITEM_GONE_AFTER.match(after):
        claim(card, "status", m["how"].lower())
        owner = _card_by_name(named, m["owner"]) if m["owner"] else None
        if owner is not None and owner.type == StoryCard.Type.CHARACTER:
            claim(owner, "holdings", f"lost {card.name}", topic=topic)
    elif w.ITEM_THROWN_BEFORE.search(before) and w.ITEM_THROWN_AFTER.match(after):
        claim(card, "status", "lost")
        if holder is not None:
            claim(holder, "holdings", f"lost {card.name}", topic=topic)
    elif w.ITEM_TAKEN_BEFORE.search(before) and holder is not None:
        claim(holder, "holdings", f"has {card.name}", topic=topic)


def _character_changes(card: Named, after: str, before: str, named: list[Named], claim, *, hero: str = "") -> None:
    departed, arrived = w.DEPART_AFTER.match(after), w.ARRIVE_AFTER.match(after) or w.STAYS_AFTER.match(after)
    for m, how in ((departed, "gone to"), (arrived, "at")):
        if m and _a_place(m["place"], named, hero):
            claim(card, "whereabouts", f"{how} {_phrase(m['place'])}")
            break
    m = w.GIVE_AFTER.match(after) or w.GIVE_TO_AFTER.match(after)
    if m:
        item, to = _item(m["item"]), m["to"]
        claim(card, "holdings", f"gave {item} to {to}", topic=item)
        other = _card_by_name(named, to)
        if other is not None and other.card_id != card.card_id:
            claim(other, "holdings", f"has {item}", topic=item)
    else:
        m = w.TAKE_AFTER.match(after)
        if m and not w.NOT_HELD.match(m["item"]):
            item = _item(m["item"])
            claim(card, "holdings", f"has {item}", topic=item)
            other = _card_by_name(named, m["from"]) if m["from"] else None
            if other is not None and other.card_id != card.card_id:
                claim(other, "holdings", f"lost {item} to {card.name}", topic=item)
        if (m := w.STOWED_AFTER.match(after)) and not w.NOT_HELD.match(m["item"]):
            item = _item(m["item"])
            claim(card, "holdings", f"has {item}", topic=item)
        m = w.LOSE_AFTER.match(after)
        if m and not w.NOT_HELD.match(m["item"]):
            item = _item(m["item"])
            claim(card, "holdings", f"lost {item}", topic=item)
    m = w.ROLE_AFTER.match(after)
    if m:
        claim(card, "role", _phrase(m["role"]))
    elif m := w.ROLE_LOST_AFTER.match(after):
        done = m["did"] or m["done"]
        claim(
            card, "role", "stripped of rank" if done.lower().startswith("stripped") else " ".join(done.lower().split())
        )
    m = w.ALLEGIANCE_AFTER.match(after)
    if m:
        verb, group = " ".join(m["verb"].lower().split()), _phrase(m["group"])
        other = _card_by_name(named, group)
        if other is not None and other.type == StoryCard.Type.CHARACTER:
            if w.BREAKS.match(verb):
                claim(card, "relations", f"betrayed {group}", topic=other.name)
        elif w.BREAKS.match(verb):
            claim(card, "allegiance", f"broke with {group}")
        else:
            claim(card, "allegiance", f"sworn to {group}")
    m = w.MARRY_AFTER.match(after) or w.MARRIED_PAIR_AFTER.match(after)
    if m:
        other = _card_by_name(named, m["to"])
        claim(card, "relations", f"married to {m['to']}", topic=m["to"])
        if other is not None and other.card_id != card.card_id:
            claim(other, "relations", f"married to {card.name}", topic=card.name)
    m = w.APPOSITIVE_AFTER.match(after) or w.KNOWN_AS_AFTER.match(after)
    if m is None:
        m = w.APPOSITIVE_BEFORE.search(before) or w.NAMED_BEFORE.search(before)
    if m and _card_by_name(named, m["alias"]) is None and not w.NOT_ALIASES.search(m["alias"]):
        alias = _phrase(m["alias"])
        claim(
            card,
            "alias",
            alias[0].lower() + alias[1:] if alias.lower().startswith("the ") else alias,
            topic=alias.lower(),
        )


def _done_to(card: Named, after: str, before: str, claim, named: list[Named] = ()) -> None:
    """What someone else (the protagonist too) does to a character named as the object: gives it an
    item, takes one from it, names it to a title."""
    if (m := w.ROLE_OBJECT_BEFORE.search(before)) and (r := w.ROLE_OBJECT_AFTER.match(after)):
        claim(card, "role", _phrase(r["role"]))
    if m := w.TAKEN_FROM_BEFORE.search(before):
        item = _item(m["item"])
        claim(card, "holdings", f"lost {item}", topic=item)
    elif m := w.GIVEN_TO_BEFORE.search(before):
        item = _item(m["item"])
        claim(card, "holdings", f"has {item}", topic=item)
    elif w.GIVEN_BEFORE.search(before) and (m := re.match(r"^\s+" + w.ITEM, after)):
        item = _item(m["item"])
        claim(card, "holdings", f"has {item}", topic=item)
    elif w.GIVEN_IT_BEFORE.search(before):  # "it": the item card named last before it
        items = [(s, n) for n in named if n.type == StoryCard.Type.ITEM for s, _ in n.spans(before)]
        if items:
            thing = max(items, key=lambda t: t[0])[1]
            claim(card, "holdings", f"has {thing.name}", topic=thing.name.lower())


def _a_place(text: str, named: list[Named], hero: str) -> bool:
    """Whether a capitalised phrase after "to" or "in" can be a place: not a character or a faction
    ("walks to Maud", "went over to the Brotherhood"), not the protagonist, not a day or a month."""
    other = _card_by_name(named, text)
    if other is not None and other.type in (StoryCard.Type.CHARACTER, StoryCard.Type.FACTION):
        return False
    words = _phrase(text).split()
    return not (hero and words[-1].casefold() in hero.casefold().split()) and not w.NOT_PLACES.match(words[-1])


def _item(phrase: str) -> str:
    """An item as a topic: "his silver key" and "the silver key" are one."""
    words = phrase.split()
    if words and words[0].lower() in ("his", "her", "their", "a"):
        words[0] = "the"
    return " ".join(words).lower()
