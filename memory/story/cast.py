"""The cast's memories: each member's memory of a block, from the sentences the
scene reading (memory.story.presence) says it was present for and able to perceive.
One model call writes every member's memory of a block (a JSON answer); without a
model, the offline writer keeps each member's most telling sentences."""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from memory.models import MEMORY_TEXT_MAX
from memory.sentences import most_telling, ranked
from memory.story import presence
from memory.story.claims_words import SLOTS
from memory.story.scene import Member, Witness
from memory.story.summarize import (
    MEMORY_WORDS_MAX,
    cast_brief,
    clean_memory,
    protagonist,
    sentence_case,
)
from stories import providers
from stories.models import Adventure, ProviderCall, StoryCard
from stories.prompt import tokens

log = logging.getLogger(__name__)

CAST_PARTS_MAX = 4  # memories one member keeps of one block, at most
WITNESS_TOKENS = 600  # of one member's scenes in the writer's prompt (its newest kept)
CAST_MAX_OUTPUT = 1300  # tokens of the writer's JSON answer (up to CAST_PARTS_MAX memories a member, changes)
CHANGED_CARDS_MAX = 20  # cards listed for the changes the passage makes
KINDS = ("say", "heard", "interaction", "witnessed")
# the offline writer's importance, by kind: what a member said or did outweighs what it only saw
KIND_IMPORTANCE = {"say": 0.7, "interaction": 0.6, "heard": 0.5, "witnessed": 0.4}

CAST_INSTRUCTIONS = (
    "You keep the memories of each character in a long interactive story. Below are the cast and a passage, "
    "one numbered sentence per line. First read the scene: for EVERY sentence, list the cast members who are "
    "present where it happens AND able to perceive it (not asleep, not out of earshot, not only talked about, "
    "heard of over a phone or radio, or seen from afar; a whisper reaches only those it is whispered to; someone "
    "who left is gone until the text brings them back). Then, for each cast member who perceived at least one "
    "sentence, write a memory of the passage from that character's side using ONLY the sentences they "
    'perceived: 1-2 plain sentences, past tense, third person, at most {words} words, naming everyone (never "you"); '
    "when their part holds more facts than {words} words can keep, write up to {parts} memories for them, in story "
    "order, and leave no fact out. Answer with JSON only, no prose: "
    '{{"scene": [{{"sentence": <number>, "present": ["<name as listed>", ...]}}, ...], "memories": '
    '[{{"character": "<name as listed>", "kind": "say|heard|interaction|witnessed", "importance": <0 to 1>, '
    '"text": "<the memory>"}}]}}. kind: say if the character mainly spoke, heard if they mainly listened, '
    "interaction if they acted with or on someone or something, witnessed if they only watched. importance: how "
    "much it will matter to that character later."
)
CHANGES_INSTRUCTIONS = (
    ' Also list what the passage CHANGES about the cards listed, in the same JSON object: "changes": '
    '[{{"card": "<card as listed>", "slot": "status|whereabouts|role|allegiance|holdings|relations|alias", '
    '"topic": "<the item held or the other party; else empty>", "value": "<what is true now, a few words: dead, '
    'gone to Greywater, has the silver key>", "sentence": <number>}}]. Only what the narration states has happened; '
    "never a plan, threat, wish, rumour, report, dream, vision, lie, pretence, sleep or wound, nor what a character "
    "only says. [] when nothing changed."
)

_SPEECH = re.compile(
    r"\b(?:says?|said|asks?|asked|repl(?:y|ies|ied)|whispers?|whispered|shouts?|shouted|tells?|told|"
    r"answers?|answered|calls?|called|mutters?|muttered|cries|cried|warns?|warned|promises?|promised|"
    r"admits?|admitted|explains?|explained|insists?|insisted|swears?|swore|laughs?|laughed)\b",
    re.IGNORECASE,
)
_QUOTE = re.compile(r"[\"“”]")


@dataclass(frozen=True)
class CastMemory:
    card_id: int
    text: str
    kind: str
    importance: float
    offline: bool
    part: int = 0  # its place among the member's memories of the block


# ---------------------------------------------------------------------------- writing


def _speaks(member: Member, sentence: str) -> bool:
    """``member`` is the one speaking: named just before a speech verb ("Cora whispers", "Cora
    quietly says") or just after it at the clause's end ("..., says Cora."); "whispers to Cora"
    and "promises Cora to" are Cora hearing."""
    for verb in _SPEECH.finditer(sentence):
        for start, end in member.spans(sentence):
            if end <= verb.start() and re.fullmatch(r"\s+(?:\w+ly\s+)?", sentence[end : verb.start()]):
                return True
            if (
                start >= verb.end()
                and re.fullmatch(r"\s+", sentence[verb.end() : start])
                and re.match(r"\s*(?:[.,;:!?]|$)", sentence[end:])
            ):
                return True
    return False


def _kind(member: Member, sentences: list[str]) -> str:
    """say > interaction > heard > witnessed, over the sentences a memory keeps."""
    kinds = set()
    for sentence in sentences:
        if _speaks(member, sentence):
            kinds.add("say")
        elif member.spans(sentence):
            kinds.add("interaction")
        elif _SPEECH.search(sentence) or _QUOTE.search(sentence):
            kinds.add("heard")
        else:
            kinds.add("witnessed")
    return next((k for k in KINDS if k in kinds), "witnessed")


def offline_cast_memories(witness: Witness, *, name: str) -> list[CastMemory]:
    """Everything the member witnessed, in story order, packed into memories of at most 50 words (a
    longer sentence whole, up to a memory's length), at most CAST_PARTS_MAX; past that, its most
    telling sentences (names, numbers and rare words score high; those naming the member higher)."""
    sentences = witness.sentences
    if sum(len(s.split()) for s in sentences) > CAST_PARTS_MAX * MEMORY_WORDS_MAX:
        order = ranked(sentences, bonus=lambda s: 3.0 if witness.member.spans(s) else 0.0)
        sentences = most_telling(sentences, order, words_max=CAST_PARTS_MAX * MEMORY_WORDS_MAX)
    chunks: list[list[str]] = []
    for sentence in sentences:
        if chunks and sum(len(s.split()) for s in chunks[-1]) + len(sentence.split()) <= MEMORY_WORDS_MAX:
            chunks[-1].append(sentence)
        else:
            chunks.append([sentence])
    out = []
    for part, chunk in enumerate(chunks[:CAST_PARTS_MAX]):
        kind = _kind(witness.member, chunk)
        text = sentence_case(" ".join(chunk), name=name)[:MEMORY_TEXT_MAX]
        out.append(CastMemory(witness.member.card_id, text, kind, KIND_IMPORTANCE[kind], offline=True, part=part))
    return out


def write_cast_memories(
    *,
    conn: providers.Connection | None,
    adventure: Adventure,
    witnesses: list[Witness] | Callable[[], list[Witness]],
    cards: list[StoryCard],
    user_id: int,
    cast: list[Member] | None = None,
    sentences: list[str] | None = None,
    before: str = "",
    changes: dict | None = None,
) -> list[CastMemory]:
    """The cast's memories of a block. Without ``conn``, the offline writer over the offline reading
    (``witnesses``). With ``conn``, one model call reads the scene of the block's ``sentences`` (who
    of ``cast`` is present and able to perceive each) and writes each member's memories from the
    sentences it says that member perceived (raises ProviderError when the call fails). Parsed
    strictly: when the scene answer is missing or garbled, every member falls back to the offline
    reading and writer; a member it reads as present whose memory the answer leaves out gets the
    offline writer's memories of what the model says it perceived; both flagged offline.

    ``changes``: the same call also reads what the passage changed on ``cards`` (memory.story.claims);
    a well-formed answer is put under ``changes["changes"]`` (each: card id, slot, topic, value, the
    0-based sentence); a missing or garbled one leaves it out (the caller reads offline)."""
    name = protagonist(adventure)
    # ``witnesses`` may be a function that reads them (the scene reading is regular expressions over
    # the block and two before it): read once, and only when the model does not read the scene
    given = witnesses
    witnesses = functools.cache(given if callable(given) else lambda: given)
    cast = cast if cast is not None else [w.member for w in witnesses()]
    if sentences is None:
        sentences = list(dict.fromkeys(s for w in witnesses() for s in w.sentences))
    if conn is None or not cast or not sentences:
        return [m for w in witnesses() for m in offline_cast_memories(w, name=name)]
    if not any(m.spans(" ".join(sentences) + " " + before) for m in cast) and not witnesses():
        return []  # nobody of the cast anywhere near the block: no model call
    numbered = "\n".join(f"{n}. {s}" for n, s in enumerate(sentences, start=1))
    brief = cast_brief(adventure=adventure, text=" ".join(sentences), cards=cards)
    context = tokens.keep_end(before, tokens=WITNESS_TOKENS // 2, model=conn.model) if before else ""
    listed = _changed_cards(cards, " ".join(sentences)) if changes is not None else []
    system = CAST_INSTRUCTIONS + (CHANGES_INSTRUCTIONS if listed else "")
    messages = [
        {"role": "system", "content": system.format(words=MEMORY_WORDS_MAX, parts=CAST_PARTS_MAX)},
        {
            "role": "user",
            "content": (brief + "\n\n" if brief else "")
            + "The cast: "
            + ", ".join(m.name for m in cast)
            + "\n\n"
            + ("The cards: " + ", ".join(f"{c.name} ({c.type})" for c in listed) + "\n\n" if listed else "")
            + (f"Just before (context only, remember nothing of it):\n{context}\n\n" if context else "")
            + "The passage:\n"
            + tokens.keep_end(numbered, tokens=WITNESS_TOKENS * 2, model=conn.model),
        },
    ]
    result = providers.complete(
        conn=conn,
        messages=messages,
        max_tokens=CAST_MAX_OUTPUT,
        temperature=0.2,
        user_id=user_id,
        purpose=ProviderCall.Purpose.MEMORY,
        adventure_id=adventure.pk,
    )
    read, answered = _parse(result.text, cast=cast, count=len(sentences))
    if listed:
        found = _changes(result.text, cards=listed, count=len(sentences))
        if found is not None:
            changes["changes"] = found
    if read is None:
        log.info("cast of adventure %s read offline: the model's scene answer is missing or garbled", adventure.pk)
        return [m for w in witnesses() for m in offline_cast_memories(w, name=name)]
    out = []
    seen = [Witness(m, [sentences[i] for i in sorted(read[m])], named=len(read[m])) for m in cast if read.get(m)]
    seen.sort(key=lambda w: (-len(w.sentences), w.member.card_id))
    for w in seen[: presence.CAST_MEMORIES_PER_BLOCK]:
        entries = [(e, clean_memory(e["text"], name=name)) for e in answered.get(w.member.name.casefold(), [])]
        entries = [(e, text) for e, text in entries if text][:CAST_PARTS_MAX]
        if not entries:
            log.info(
                "cast memory of %s in adventure %s written offline: the model left it out", w.member.name, adventure.pk
            )
            out.extend(offline_cast_memories(w, name=name))
            continue
        for part, (entry, text) in enumerate(entries):
            kind = entry.get("kind") if entry.get("kind") in KINDS else _kind(w.member, w.sentences)
            importance = entry.get("importance")
            if not isinstance(importance, (int, float)) or isinstance(importance, bool):
                importance = KIND_IMPORTANCE[kind]
            importance = round(min(max(float(importance), 0.0), 1.0), 3)
            out.append(CastMemory(w.member.card_id, text, kind, importance, offline=False, part=part))
    return out


class _Seen(BaseModel):
    """One line of the scene reading: a sentence's number and who of the cast perceived it."""

    model_config = ConfigDict(strict=True, extra="ignore")
    sentence: int
    present: list[str]


class _Remembered(BaseModel):
    """One memory the writer wrote; its kind and importance are read leniently (cast_memories)."""

    model_config = ConfigDict(strict=True, extra="ignore")
    character: str
    text: str
    kind: object = None
    importance: object = None


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore")
    scene: object = None
    memories: object = None


_SCENE = TypeAdapter(list[_Seen])
_REMEMBERED = TypeAdapter(_Remembered)


def _parse(text: str, *, cast: list[Member], count: int) -> tuple[dict[Member, set[int]] | None, dict[str, list[dict]]]:
    """The writer's answer, checked against its declared shape: who of ``cast`` perceived which of
    the ``count`` sentences (0-based), or None when the scene answer is missing or garbled (every
    sentence must be listed, each with a list of names; names outside the cast are ignored), and
    {character name (casefolded): its memory entries} (an entry not of the shape is passed over)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None, {}
    try:
        answer = _Answer.model_validate_json(text[start : end + 1])
    except ValidationError:
        return None, {}
    answered: dict[str, list[dict]] = {}
    for entry in answer.memories if isinstance(answer.memories, list) else []:
        try:
            memory = _REMEMBERED.validate_python(entry)
        except ValidationError:
            continue
        if memory.text.strip():
            answered.setdefault(memory.character.strip().casefold(), []).append(memory.model_dump())
    try:
        scene = _SCENE.validate_python(answer.scene)
    except ValidationError:
        return None, answered
    read: dict[Member, set[int]] = {m: set() for m in cast}
    listed = set()
    for seen in scene:
        if not 1 <= seen.sentence <= count:
            return None, answered
        listed.add(seen.sentence)
        for n in seen.present:
            member = next((m for m in cast if m.name.casefold() == n.strip().casefold()), None)
            if member is not None:
                read[member].add(seen.sentence - 1)
    if len(listed) != count:
        return None, answered
    return read, answered


def _changed_cards(cards: list[StoryCard], text: str) -> list[StoryCard]:
    """The cards whose changes the writer is asked for: those the passage names (name or key)."""
    folded = text.casefold()
    named = [c for c in cards if any(w.strip() and w.strip().casefold() in folded for w in [c.name, *c.keys])]
    return named[:CHANGED_CARDS_MAX]


class _Change(BaseModel):
    """One change the writer read, checked strictly (an entry not of this shape is passed over)."""

    model_config = ConfigDict(strict=True, extra="ignore")
    card: str
    slot: str
    value: str
    sentence: int
    topic: str = ""


class _Changes(BaseModel):
    model_config = ConfigDict(extra="ignore")
    changes: list[object]


_CHANGE = TypeAdapter(_Change)


def _changes(text: str, *, cards: list[StoryCard], count: int) -> list[dict] | None:
    """The writer's "changes", or None when the answer has none or garbled ones: each entry names a
    listed card, a known slot, a value and one of the ``count`` sentences (0-based in the result)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        answer = _Changes.model_validate_json(text[start : end + 1])
    except ValidationError:
        return None
    by_name = {c.name.strip().casefold(): c for c in cards}
    out = []
    for entry in answer.changes:
        try:
            change = _CHANGE.validate_python(entry)
        except ValidationError:
            continue
        card = by_name.get(change.card.strip().casefold())
        value = " ".join(change.value.split())[:200]
        if card is None or change.slot not in SLOTS or not value or not 1 <= change.sentence <= count:
            continue
        topic = " ".join(change.topic.split())[:100]
        out.append(
            {"card_id": card.pk, "slot": change.slot, "topic": topic, "value": value, "sentence": change.sentence - 1}
        )
    return out
