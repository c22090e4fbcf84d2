"""Sentences: splitting, trimming to a word budget, and the one extractive scorer every offline
writer uses (a block's memory, a character's memory, the summary's newest facts, an agent's
consolidated run) when no model is asked."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

STOPWORDS = set(
    """a an the and or but if then so of to in on at by for with from into over under up down out
is are was were be been being am do does did have has had this that these those it its as not no yes you your
he she they them his her their we our i me my there here what which who whom when where why how all any some
just very can could would should will shall may might must one also than too""".split()
)
_TOKEN = re.compile(r"[A-Za-z']+|\d+")
_WORD = re.compile(r"[A-Za-z']+")
_PREAMBLE = re.compile(r"^\s*(memory|summary|here is (the|a) (memory|summary))\s*[:\-]\s*", re.I)


def strip_preamble(text: str) -> str:
    """A model's answer without a "Memory:" or "Here is the summary:" before it."""
    return _PREAMBLE.sub("", text)


# a title's full stop ends no sentence ("Dr. Baptiste climbs out")
_TITLES = "".join(
    rf"(?<!\b{t}\.)"
    for t in ("Dr", "Mr", "Mrs", "Ms", "St", "Mt", "Jr", "Sr", "Lt", "Sgt", "Capt", "Prof", "Rev", "Gen", "Col", "vs")
)
_SENTENCE_END = re.compile(rf"(?<=[.!?][\"'”)\]])\s+|(?<=[.!?]){_TITLES}\s+")


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def limit_words(text: str, limit: int) -> str:
    """At most ``limit`` words, ending as a sentence ends."""
    words = text.split()
    if len(words) <= limit:
        return text
    cut = " ".join(words[:limit]).rstrip(",;:")
    return cut if cut.endswith((".", "!", "?")) else cut + "."


def ranked(
    sentences: list[str], *, names: float = 1.5, numbers: float = 0.0, bonus: Callable[[str], float] | None = None
) -> list[int]:
    """Indices of ``sentences``, the most telling first: each content word scores the rarer it is
    among these sentences, each name (a capitalised word past the first) ``names``, each number
    ``numbers``, plus ``bonus(sentence)``; all per square root of the sentence's length in words.
    A sentence of stopwords only scores nothing."""
    freq = Counter(w.lower() for s in sentences for w in _WORD.findall(s) if w.lower() not in STOPWORDS)

    def score(sentence: str) -> float:
        tokens = _TOKEN.findall(sentence)
        content = [t for t in tokens if t.lower() not in STOPWORDS]
        if not content:
            return 0.0
        value = sum(1.0 / freq[t.lower()] for t in content if t.lower() in freq)
        value += names * sum(1 for t in tokens[1:] if t[:1].isupper())
        value += numbers * sum(1 for t in tokens if t.isdigit())
        if bonus is not None:
            value += bonus(sentence)
        return value / len(tokens) ** 0.5

    return sorted(range(len(sentences)), key=lambda i: score(sentences[i]), reverse=True)


def most_telling(sentences: list[str], order: list[int], *, words_max: int, at_most: int | None = None) -> list[str]:
    """The best of ``order`` (from ``ranked``) that ``words_max`` words hold (the best always, even
    when longer), at most ``at_most`` of them, in story order."""
    chosen: list[int] = []
    count = 0
    for i in order:
        n = len(sentences[i].split())
        if count + n > words_max and chosen:
            continue
        chosen.append(i)
        count += n
        if at_most is not None and len(chosen) == at_most:
            break
    return [sentences[i] for i in sorted(chosen)]
