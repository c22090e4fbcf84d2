"""The story as the scene reading reads it (memory.story.presence): the cast's
members with their names and keys, and a block's sentences in third person, each
with its narration (what is outside quotes), its passage and its action's kind."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from memory.sentences import split_sentences
from memory.story.summarize import second_to_third_person
from stories.models import Action, StoryCard
from stories.prompt.voice import told_of


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
    passages: list[int] = field(default_factory=list)  # the passage of each sentence (for "heard none of it")


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


@dataclass(frozen=True)
class Sentence:
    text: str  # in third person ("you" is the protagonist's name)
    narration: str  # the same with every quoted character blanked (same length)
    passage: int  # its action's place in the block
    kind: str  # its action's kind
    raw: str  # its action's text as written (a player's act, for a move)
    first: bool  # the first sentence of its passage


_QUOTE_MARK = re.compile('["“”]')


def _blank_quotes(text: str) -> str:
    """``text`` with what is inside quotation marks (and the marks) turned to spaces: a straight mark
    opens or closes, a curly one opens (“) or closes (”)."""
    out, inside, at = [], False, 0
    for mark in _QUOTE_MARK.finditer(text):
        i = mark.start()
        out.append(" " * (i - at) if inside else text[at:i])
        out.append(" ")
        ch = mark.group()
        inside = ch == "“" or (ch == '"' and not inside)
        at = i + 1
    out.append(" " * (len(text) - at) if inside else text[at:])
    return "".join(out)


def sentences_of(actions: list[Action], *, name: str) -> list[Sentence]:
    """The actions' sentences in story order, in third person (``name`` for "you"), with their narration."""
    out = []
    for n, action in enumerate(actions):
        raw = action.text.replace("\n", " ").strip()
        for i, (text, narration) in enumerate(
            _passage(action.text, action.kind, getattr(action, "actor", "") or "", name)
        ):
            out.append(Sentence(text, narration, n, action.kind, raw, i == 0))
    return out


@functools.lru_cache(maxsize=4096)
def _passage(text: str, kind: str, actor: str, name: str) -> tuple[tuple[str, str], ...]:
    """One action's sentences and their narration, as sentences_of reads them. The pass reads each
    action of a block five times or more (the scene, the cast's memories, the claims, the names, and
    again as the next blocks' lookback): read once a process, by what the reading depends on."""

    def third_person(text: str) -> str:  # outside quotes: "you" in what someone says is its listener
        pieces = re.split(r"(\"[^\"]*\"|“[^”]*”)", text)
        return "".join(p if i % 2 else second_to_third_person(p, name=name) for i, p in enumerate(pieces))

    told = told_of(Action(text=text, kind=kind, actor=actor), name=name)  # as the offline summarizer tells an act
    if kind != Action.Kind.SAY:
        told = third_person(told)
    blanked = _blank_quotes(told)
    out, at = [], 0
    for sentence in split_sentences(told):
        start = told.find(sentence, at)
        start = at if start < 0 else start
        at = start + len(sentence)
        out.append((sentence, blanked[start : start + len(sentence)]))
    return tuple(out)


def story_sentences(actions: list[Action], *, name: str) -> list[str]:
    """The actions' sentences in story order, in third person (``name`` for "you")."""
    return [s.text for s in sentences_of(actions, name=name)]
