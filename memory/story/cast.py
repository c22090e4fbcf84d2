"""The cast: who was in each scene of a block, and each character's memory of it.

Presence is read from the text, a sentence at a time, in story order:
- a cast member (a character card with ``in_cast``) enters the scene in the first sentence that names
  it (whole word: a capitalised name as written, its keys in any case);
- it leaves after a sentence that names it as the one leaving ("Bram leaves the hall", "Bram walks
  out", "Bram and Cora ride off"): the name nearest before the verb that can be its subject;
- when the protagonist leaves, the scene moves with them: only those named in that sentence come
  along ("you step outside after Oswin");
- a member who left comes back only when the text says so ("Bram returns", "Nell comes back in");
  until then a mention ("the ring Sable left behind") does not bring them in, nor does a possessive
  ("the elder's son") bring in anyone;
- a block starts with the members named in the block before it who did not leave there (presence
  carries over one block, no further: a member nobody names for a whole block has left the story's
  eye); departures hold over LOOKBACK_BLOCKS blocks.
The protagonist is in every scene (the story is told from their side): their memory is the
adventure's own bank, so only the cast's character cards get memories here.

A member remembers only the sentences it was present for. One model call writes every member's
memory of a block (a JSON answer); without a model, the offline writer picks each member's most
telling sentences.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field

from memory.sentences import limit_words, most_telling, ranked, split_sentences
from memory.story.summarize import (
    MEMORY_WORDS_MAX,
    cast_brief,
    clean_memory,
    protagonist,
    second_to_third_person,
    sentence_case,
)
from stories import providers, tokens
from stories.models import Action, Adventure, ProviderCall, StoryCard

log = logging.getLogger(__name__)

CAST_MEMORIES_PER_BLOCK = 4  # members remembering one block, at most (the most present first)
LOOKBACK_BLOCKS = 2  # blocks read before one, for who is in the scene and who left
WITNESS_TOKENS = 600  # of one member's scenes in the writer's prompt (its newest kept)
CAST_MAX_OUTPUT = 500  # tokens of the writer's JSON answer
KINDS = ("say", "heard", "interaction", "witnessed")
# the offline writer's importance, by kind: what a member said or did outweighs what it only saw
KIND_IMPORTANCE = {"say": 0.7, "interaction": 0.6, "heard": 0.5, "witnessed": 0.4}

CAST_INSTRUCTIONS = (
    "You keep the memories of each character in a long interactive story. For each character listed below, "
    "write ONE memory of the passage from that character's side: what they saw, said, did and heard. 1-2 plain "
    'sentences, past tense, third person, at most {words} words, naming everyone (never "you"). A character '
    "knows ONLY the text listed under their own name: never add anything from another character's part. "
    'Answer with JSON only, no prose: {{"memories": [{{"character": "<name as listed>", "kind": '
    '"say|heard|interaction|witnessed", "importance": <0 to 1>, "text": "<the memory>"}}]}}. kind: say '
    "if the character mainly spoke, heard if they mainly listened, interaction if they acted with or on someone "
    "or something, witnessed if they only watched. importance: how much it will matter to that character later."
)

_LEAVE_PLACES = (
    "room|hall|house|home|tavern|inn|castle|city|town|village|camp|chamber|building|place|keep|tower|temple|"
    "chapel|court|courtyard|square|market|ship|cave|forest|palace|party|table|scene|study|kitchen|library|"
    "office|shop|store|garden|yard|stable|stables|crypt|vault|cellar|tent|feast|meeting|council|gathering|"
    "bar|station|street|road|clearing|bridge|gate|gates|door|hut|cabin|manor|throne"
)
_LEAVE = re.compile(
    r"\b(?:"
    r"(?:leaves?|left|leaving|departs?|departed|exits?|exited)"
    r"(?=\s*(?:[.,;:!?\"”]|$|(?:for|to|through|with|without|and|again|at|before|after|into|alone|quietly|"
    r"quickly|too)\b|(?:the|this|that|his|her|their|our|my|your)\s+(?:\w+\s+)?(?:" + _LEAVE_PLACES + r")\b))"
    r"|(?:goes|go|going|went|gone|walks?|walked|storms?|stormed|rides?|rode|heads?|headed|slips?|slipped|"
    r"hurries|hurried|runs?|ran|steps?|stepped|wanders?|wandered|marches|marched|sneaks?|sneaked|snuck|"
    r"stalks?|stalked|strides?|strode|flees|fled|sets?|set|climbs?|climbed)"
    r"\s+(?:out|off|away|outside|home|below|upstairs|downstairs|inside|ashore)\b"
    r"|(?:vanish(?:es|ed)?|disappears?|disappeared)\b"
    r")",
    re.IGNORECASE,
)
_ARRIVE = re.compile(
    r"\b(?:returns?|returned|returning|arrives?|arrived|enters?|entered|reappears?|reappeared|rejoins?|rejoined|"
    r"(?:comes?|came|walks?|walked|steps?|stepped|bursts?|burst|hurries|hurried|rides?|rode|slips?|slipped)\s+"
    r"(?:back|in|inside)|(?:is|was)\s+back)\b",
    re.IGNORECASE,
)
_SPEECH = re.compile(
    r"\b(?:says?|said|asks?|asked|repl(?:y|ies|ied)|whispers?|whispered|shouts?|shouted|tells?|told|"
    r"answers?|answered|calls?|called|mutters?|muttered|cries|cried|warns?|warned|promises?|promised|"
    r"admits?|admitted|explains?|explained|insists?|insisted|swears?|swore|laughs?|laughed)\b",
    re.IGNORECASE,
)
_QUOTE = re.compile(r"[\"“”]")


@dataclass(frozen=True)
class Member:
    card_id: int
    name: str
    patterns: tuple[re.Pattern, ...]

    def spans(self, text: str) -> list[tuple[int, int]]:
        return sorted({m.span() for p in self.patterns for m in p.finditer(text)})


@dataclass
class Witness:
    """What one member was present for in a block, in story order."""

    member: Member
    sentences: list[str] = field(default_factory=list)
    named: int = 0  # sentences of the block that name it


@dataclass(frozen=True)
class CastMemory:
    card_id: int
    text: str
    kind: str
    importance: float
    offline: bool


def _word(text: str, *, case: bool = False) -> re.Pattern:
    return re.compile(r"(?<!\w)" + re.escape(text) + r"(?!\w)", 0 if case else re.IGNORECASE)


def members(cards: list[StoryCard]) -> list[Member]:
    """The cast's character cards (``in_cast``), each with its name and keys as whole-word patterns:
    keys in any case (as card triggers), a capitalised name as written ("Will" is not "you will")."""
    out = []
    for card in cards:
        name = card.name.strip()
        if card.type != StoryCard.Type.CHARACTER or not card.in_cast or not name:
            continue
        keys = [k.strip() for k in card.keys if k.strip() and k.strip() != name]
        patterns = [_word(name, case=name != name.lower())] + [_word(k) for k in dict.fromkeys(keys)]
        out.append(Member(card.pk, name, tuple(patterns)))
    return out


def named_in(members_: list[Member], text: str) -> list[Member]:
    """The members ``text`` names, the most recently named first."""
    last = {m: max((end for _, end in m.spans(text)), default=-1) for m in members_}
    return sorted((m for m in members_ if last[m] >= 0), key=lambda m: -last[m])


def story_sentences(actions: list[Action], *, name: str) -> list[str]:
    """The actions' sentences in story order, in third person (``name`` for "you")."""

    def third_person(text: str) -> str:  # outside quotes: "you" in what someone says is its listener
        pieces = re.split(r"(\"[^\"]*\"|“[^”]*”)", text)
        return "".join(p if i % 2 else second_to_third_person(p, name=name) for i, p in enumerate(pieces))

    out = []
    for action in actions:
        text = action.text.replace("\n", " ").strip()
        if action.kind == Action.Kind.DO:  # as the offline summarizer tells a player's act
            text = re.sub(r"^(you|i)\s+", "", text, flags=re.I).rstrip(".!?")
            text = third_person(f"{name} chose to {text[:1].lower()}{text[1:]}.")
        elif action.kind == Action.Kind.SAY:
            text = f'{name} said, "{text.strip(chr(34))}"'
        else:
            text = third_person(text)
        out.extend(split_sentences(text))
    return out


def _movers(sentence: str, named: list[Member], hero: re.Pattern, verbs: re.Pattern) -> tuple[set[Member], bool]:
    """Who moves (leaves, or arrives, by ``verbs``) in ``sentence``: the one named nearest before
    such a verb as its possible subject, with those joined to it by "and" or commas ("Bram and
    Cora ride off"), and whether the protagonist is among them."""
    movers: set[Member] = set()
    hero_moves = False
    for verb in verbs.finditer(sentence):
        before = sentence[: verb.start()]
        subjects = sorted(
            [(s, e, m) for m in named for s, e in m.spans(before) if _subject(before, s, e)]
            + [(*h.span(), None) for h in hero.finditer(before) if _subject(before, *h.span())],
            key=lambda x: x[1],
        )
        if not subjects:
            continue
        chosen = [subjects[-1]]
        for prev in reversed(subjects[:-1]):
            if not re.fullmatch(r"\s*(?:,|and|,\s*and)\s*", before[prev[1] : chosen[-1][0]]):
                break
            chosen.append(prev)
        for _, _, who in chosen:
            if who is None:
                hero_moves = True
            else:
                movers.add(who)
    return movers, hero_moves


_NOT_SUBJECT_BEFORE = re.compile(
    r"\b(?:to|with|at|from|for|of|by|toward|towards|beside|behind|past|after|before|near|about|like|than|"
    r"upon|on|in|into|onto)\s+$",
    re.IGNORECASE,
)


def _possessive(text: str, end: int) -> bool:
    """Whether the name ending at ``end`` is a possessive ("Mira's coin")."""
    return re.match(r"['’]s\b", text[end:]) is not None


def _subject(text: str, start: int, end: int) -> bool:
    """Whether a name at ``text[start:end]`` can be the subject of a later verb: not a possessive
    and not the object of a preposition ("with Ulf")."""
    return not _possessive(text, end) and not _NOT_SUBJECT_BEFORE.search(text[:start])


def present(*, cast: list[Member], actions: list[Action], before: list[Action], name: str) -> list[Witness]:
    """Each member's part of the block ``actions``, the most present first, at most
    CAST_MEMORIES_PER_BLOCK; members the block never shows are left out. ``before``: the
    LOOKBACK_BLOCKS blocks before it (oldest first), for who is already in the scene and who left."""
    if not cast:
        return []
    hero = _word(name)
    here: set[Member] = set()
    gone: set[Member] = set()
    size = max(len(actions), 1)
    chunks = [before[max(end - size, 0) : end] for end in range(len(before), 0, -size)][::-1]
    for chunk in chunks:
        here, gone, _ = _walk(cast, story_sentences(chunk, name=name), hero, here=here, gone=gone, named_only=True)
    _, _, witnesses = _walk(cast, story_sentences(actions, name=name), hero, here=here, gone=gone)
    shown = [w for w in witnesses.values() if w.sentences]
    shown.sort(key=lambda w: (-w.named, -len(w.sentences), w.member.card_id))
    return shown[:CAST_MEMORIES_PER_BLOCK]


def _walk(
    cast: list[Member],
    sentences: list[str],
    hero: re.Pattern,
    *,
    here: set[Member],
    gone: set[Member],
    named_only: bool = False,
) -> tuple[set[Member], set[Member], dict[Member, Witness]]:
    """Read ``sentences`` in order from who is ``here`` and who is ``gone``: who is here and gone
    at the end (``named_only``: only those named in the sentences stay here), and what each saw."""
    here, gone = set(here), set(gone)
    witnesses = {m: Witness(m) for m in cast}
    seen: set[Member] = set()
    for sentence in sentences:
        named = [m for m in cast if m.spans(sentence)]
        back, _ = _movers(sentence, named, hero, _ARRIVE)
        gone -= back
        # a name in a possessive ("the elder's son") or of one who left and has not come back
        # ("a ring Sable left behind") does not bring them into the scene
        entering = [
            m for m in named if m not in gone and any(not _possessive(sentence, e) for _, e in m.spans(sentence))
        ]
        here.update(entering)
        seen.update(entering)
        for m in here:
            witnesses[m].sentences.append(sentence)
        for m in entering:
            witnesses[m].named += 1
        left, hero_leaves = _movers(sentence, named, hero, _LEAVE)
        gone |= left
        if hero_leaves:
            # the scene moves with the protagonist, and with those it names ("you follow Oswin out")
            here = {m for m in named if m not in left}
            gone -= here
        else:
            here -= left
    if named_only:
        here &= seen
    return here, gone, witnesses


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


def offline_cast_memory(witness: Witness, *, name: str) -> CastMemory:
    """The member's most telling sentences of its part (names, numbers and rare words score high;
    sentences naming the member higher), as many as 50 words hold, in story order."""
    sentences = witness.sentences
    order = ranked(sentences, bonus=lambda s: 3.0 if witness.member.spans(s) else 0.0)
    kept = most_telling(sentences, order, words_max=MEMORY_WORDS_MAX)
    kind = _kind(witness.member, kept)
    text = sentence_case(limit_words(" ".join(kept), MEMORY_WORDS_MAX), name=name)
    return CastMemory(witness.member.card_id, text, kind, KIND_IMPORTANCE[kind], offline=True)


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
        return [offline_cast_memory(w, name=name) for w in witnesses]
    parts = []
    for w in witnesses:
        excerpt = tokens.keep_end(" ".join(w.sentences), tokens=WITNESS_TOKENS, model=conn.model)
        parts.append(f"## {w.member.name}\n{excerpt}")
    brief = cast_brief(adventure=adventure, text="\n".join(" ".join(w.sentences) for w in witnesses), cards=cards)
    messages = [
        {"role": "system", "content": CAST_INSTRUCTIONS.format(words=MEMORY_WORDS_MAX)},
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
        entry = answered.get(w.member.name.casefold())
        text = clean_memory(entry["text"], name=name) if entry else ""
        if not text:
            log.info(
                "cast memory of %s in adventure %s written offline: the model left it out", w.member.name, adventure.pk
            )
            out.append(offline_cast_memory(w, name=name))
            continue
        kind = entry.get("kind") if entry.get("kind") in KINDS else _kind(w.member, w.sentences)
        importance = entry.get("importance")
        if not isinstance(importance, (int, float)) or isinstance(importance, bool):
            importance = KIND_IMPORTANCE[kind]
        out.append(
            CastMemory(w.member.card_id, text, kind, round(min(max(float(importance), 0.0), 1.0), 3), offline=False)
        )
    return out


def _parse(text: str) -> dict[str, dict]:
    """The writer's answer as {character name (casefolded): entry}; empty when it is not the JSON asked for."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return {}
    try:
        data = json.loads(text[start : end + 1])
    except ValueError:
        return {}
    entries = data.get("memories") if isinstance(data, dict) else None
    out: dict[str, dict] = {}
    for entry in entries if isinstance(entries, list) else []:
        if (
            isinstance(entry, dict)
            and isinstance(entry.get("character"), str)
            and isinstance(entry.get("text"), str)
            and entry["text"].strip()
        ):
            out.setdefault(entry["character"].strip().casefold(), entry)
    return out
