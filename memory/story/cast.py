"""The cast's memories: each member's memory of a block, from the sentences the
scene reading (memory.story.presence) says it was present for and able to perceive.
One model call writes every member's memory of a block (a JSON answer); without a
model, the offline writer keeps each member's most telling sentences."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass

from memory.models import MEMORY_TEXT_MAX
from memory.sentences import most_telling, ranked
from memory.story.scene import Member, Witness
from memory.story.summarize import (
    MEMORY_WORDS_MAX,
    cast_brief,
    clean_memory,
    protagonist,
    sentence_case,
)
from stories import providers, tokens
from stories.models import Adventure, ProviderCall, StoryCard

log = logging.getLogger(__name__)

CAST_PARTS_MAX = 4  # memories one member keeps of one block, at most
WITNESS_TOKENS = 600  # of one member's scenes in the writer's prompt (its newest kept)
CAST_MAX_OUTPUT = 1000  # tokens of the writer's JSON answer (up to CAST_PARTS_MAX memories a member)
KINDS = ("say", "heard", "interaction", "witnessed")
# the offline writer's importance, by kind: what a member said or did outweighs what it only saw
KIND_IMPORTANCE = {"say": 0.7, "interaction": 0.6, "heard": 0.5, "witnessed": 0.4}

CAST_INSTRUCTIONS = (
    "You keep the memories of each character in a long interactive story. For each character listed below, "
    "write a memory of the passage from that character's side: what they saw, said, did and heard. 1-2 plain "
    'sentences, past tense, third person, at most {words} words, naming everyone (never "you"); when their part '
    "holds more facts than {words} words can keep, write up to {parts} memories for them, in story order, and "
    "leave no fact out. A character "
    "knows ONLY the text listed under their own name: never add anything from another character's part. "
    'Answer with JSON only, no prose: {{"memories": [{{"character": "<name as listed>", "kind": '
    '"say|heard|interaction|witnessed", "importance": <0 to 1>, "text": "<the memory>"}}]}}. kind: say '
    "if the character mainly spoke, heard if they mainly listened, interaction if they acted with or on someone "
    "or something, witnessed if they only watched. importance: how much it will matter to that character later."
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
    witnesses: list[Witness],
    cards: list[StoryCard],
    user_id: int,
) -> list[CastMemory]:
    """One memory for each witness of a block. With ``conn``, one model call writes them all
    (raises ProviderError when the call fails); a member the answer leaves out or garbles gets
    the offline writer's memory (flagged offline). Without ``conn``, all offline."""
    name = protagonist(adventure)
    if not witnesses:
        return []
    if conn is None:
        return [m for w in witnesses for m in offline_cast_memories(w, name=name)]
    parts = []
    for w in witnesses:
        excerpt = tokens.keep_end(" ".join(w.sentences), tokens=WITNESS_TOKENS, model=conn.model)
        parts.append(f"## {w.member.name}\n{excerpt}")
    brief = cast_brief(adventure=adventure, text="\n".join(" ".join(w.sentences) for w in witnesses), cards=cards)
    messages = [
        {"role": "system", "content": CAST_INSTRUCTIONS.format(words=MEMORY_WORDS_MAX, parts=CAST_PARTS_MAX)},
        {
            "role": "user",
            "content": (brief + "\n\n" if brief else "")
            + "What each character was present for:\n\n"
            + "\n\n".join(parts),
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
    answered = _parse(result.text)
    out = []
    for w in witnesses:
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


def _parse(text: str) -> dict[str, list[dict]]:
    """The writer's answer as {character name (casefolded): its entries, in order}; empty when it is
    not the JSON asked for."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return {}
    try:
        data = json.loads(text[start : end + 1])
    except ValueError:
        return {}
    entries = data.get("memories") if isinstance(data, dict) else None
    out: dict[str, list[dict]] = {}
    for entry in entries if isinstance(entries, list) else []:
        if (
            isinstance(entry, dict)
            and isinstance(entry.get("character"), str)
            and isinstance(entry.get("text"), str)
            and entry["text"].strip()
        ):
            out.setdefault(entry["character"].strip().casefold(), []).append(entry)
    return out
