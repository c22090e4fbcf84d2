"""Fact keys: the short facts an agent memory states, each said plainly with who it is about, stored
beside the memory (memory.models.AgentMemoryKey) and embedded by the agent's pass; recall matches a
question against a memory and its keys and returns the memory (memory.agents.agent_recall_sql).

A line of conversation says "I" and "you" and several things at once: 'Caroline said to Melanie: "Hey
Mel! I went to a LGBTQ support group yesterday and it was so powerful."' Its keys are its statements
one by one, each with the speaker and the person spoken to named: "Caroline: Caroline went to a LGBTQ
support group yesterday and it was so powerful." A question ("When did Caroline go to the LGBTQ support
group?") is nearer such a key than the whole line. Questions and short exclamations state no fact and
make no key. Measured on LoCoMo (bench/locomo.py, docs/benchmarks.md).

Offline keys are made by the rules below; when the world's owner has a model of their own for
background work, the model states the facts instead (``model_keys``), and the offline rules stand in
whenever it fails."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from memory.agents.agent_events import undated

KEYS_MAX = 8  # keys one memory holds
KEY_CHARS_MAX = 300
KEY_WORDS_MIN = 4  # a shorter sentence ("Wow, that's great!") states no fact
MODEL_BATCH = 10  # memories one model call is asked about
MODEL_MEMORIES_PER_RUN = 60  # memories one pass asks the model about (its spend is bounded); the rest next pass


@dataclass(frozen=True)
class Source:
    """What the keys of one memory are made from."""

    id: int
    kind: str
    content: str
    actor: str
    partner: str
    location: str


_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"”’')\]]*\s+|\n+")

# (pattern, replacement) in order: contractions before the bare pronouns they hold. {a} is the speaker,
# {b} the one spoken to.
_FIRST_PERSON = [
    (r"\bI'm\b", "{a} is"),
    (r"\bI've\b", "{a} has"),
    (r"\bI'll\b", "{a} will"),
    (r"\bI'd\b", "{a} would"),
    (r"\bI\b", "{a}"),
    (r"\b[Mm]yself\b", "{a}"),
    (r"\b[Mm]ine\b", "{a}'s"),
    (r"\b[Mm]y\b", "{a}'s"),
    (r"\b[Mm]e\b", "{a}"),
]
_SECOND_PERSON = [
    (r"\b[Yy]ou're\b", "{b} is"),
    (r"\b[Yy]ou've\b", "{b} has"),
    (r"\b[Yy]ou'll\b", "{b} will"),
    (r"\b[Yy]ou'd\b", "{b} would"),
    (r"\b[Yy]ourself\b", "{b}"),
    (r"\b[Yy]ours\b", "{b}'s"),
    (r"\b[Yy]our\b", "{b}'s"),
    (r"\b[Yy]ou\b", "{b}"),
]
_PLURAL_FIRST = [
    (r"\b[Ww]e're\b", "{a} and {b} are"),
    (r"\b[Ww]e've\b", "{a} and {b} have"),
    (r"\b[Ww]e\b", "{a} and {b}"),
    (r"\b[Uu]s\b", "{a} and {b}"),
    (r"\b[Oo]urs\b", "{a} and {b}'s"),
    (r"\b[Oo]ur\b", "{a} and {b}'s"),
]


def _resolve(sentence: str, speaker: str, spoken_to: str) -> str:
    """``sentence`` with "I", "my", "you", "we"... replaced by the names they stand for."""
    rules = list(_FIRST_PERSON) if speaker else []
    if spoken_to:
        rules += _SECOND_PERSON
        if speaker:
            rules += _PLURAL_FIRST
    for pattern, replacement in rules:
        name = replacement.format(a=speaker, b=spoken_to).replace("\\", "\\\\")
        sentence = re.sub(pattern, name, sentence)
    return sentence


def _said(source: Source) -> tuple[str, str, str]:
    """(speaker, the one spoken to or "", the words) of a memory, from the text the events wrote
    (memory.agents.agent_events._fan_out); a memory of another shape is its own words."""
    text = undated(source.content).strip()
    actor = source.actor
    if actor and source.kind in ("say", "heard") and text.startswith(f"{actor} said to "):
        rest = text[len(actor) + len(" said to ") :]
        m = re.match(r'(?P<to>.+?): "(?P<words>.*)"$', rest, re.S)
        if m:
            to = m.group("to")
            if source.location and to.endswith(f" at {source.location}"):
                to = to[: -len(f" at {source.location}")]
            return actor, ("" if to == "everyone nearby" else to), m.group("words")
    if actor and source.kind == "observation" and text.startswith(f"{actor} noticed"):
        return actor, "", text.split(": ", 1)[-1]
    if source.kind == "note":
        return actor, source.partner, text
    return "", "", text


def offline_keys(source: Source) -> list[str]:
    """The keys of one memory by rule: its statements (not its questions or short exclamations), one
    a key, "I" and "you" replaced by who they are, each led by the speaker's name."""
    speaker, spoken_to, words = _said(source)
    whole = undated(source.content).strip().lower()
    keys: list[str] = []
    for sentence in _SENTENCE_END.split(words):
        sentence = sentence.strip().strip('"“”').strip()
        if not sentence or sentence.rstrip("\"”’')]").endswith("?") or len(sentence.split()) < KEY_WORDS_MIN:
            continue
        key = _resolve(sentence, speaker, spoken_to)
        key = f"{speaker}: {key}" if speaker else key
        key = key[:KEY_CHARS_MAX]
        if key.lower() != whole and key not in keys:
            keys.append(key)
        if len(keys) == KEYS_MAX:
            break
    return keys


MODEL_INSTRUCTIONS = (
    "For each numbered memory below, list the facts it states: who did, has, likes, plans or feels what, "
    "and when or where when it says so. One fact a line, as '<memory number>. <fact>', each a short "
    "sentence that names the people it is about (never 'I', 'you' or 'we'). Skip greetings, questions "
    "and small talk; a memory that states no fact gets no line. At most {keys} facts a memory. "
    "Answer with the lines only."
)


def model_keys(*, conn, owner_id: int, sources: list[Source]) -> dict[int, list[str]]:
    """The keys of ``sources`` as the owner's model states them, by memory id (one call). Raises
    ProviderError when the model fails; an answer that names no memory leaves those to the rules."""
    from stories import providers
    from stories.models import ProviderCall

    numbered = "\n".join(f"{n}. {undated(s.content)}" for n, s in enumerate(sources, start=1))
    result = providers.complete(
        conn=conn,
        messages=[
            {"role": "system", "content": MODEL_INSTRUCTIONS.format(keys=KEYS_MAX)},
            {"role": "user", "content": numbered},
        ],
        max_tokens=80 * len(sources),
        temperature=0.0,
        user_id=owner_id,
        purpose=ProviderCall.Purpose.AGENT,
    )
    keys: dict[int, list[str]] = {}
    for line in result.text.splitlines():
        m = re.match(r"^\s*(\d+)[.):]\s+(.+?)\s*$", line)
        if not m or not 1 <= int(m.group(1)) <= len(sources):
            continue
        fact = re.sub(r"\s+", " ", m.group(2)).strip()[:KEY_CHARS_MAX]
        mine = keys.setdefault(sources[int(m.group(1)) - 1].id, [])
        if len(fact.split()) >= 2 and fact not in mine and len(mine) < KEYS_MAX:
            mine.append(fact)
    return keys


def keys_json(keys: dict[int, list[str]]) -> str:
    """Keys by memory id as JSON (the statement that stores them reads it)."""
    return json.dumps([{"memory": pk, "text": text} for pk, texts in keys.items() for text in texts])
