"""What a player types into a search box, made into text Postgres' ``websearch_to_tsquery`` always
parses: words (letters and digits), "quoted phrases", ``or`` between two terms and a leading ``-``
(not), at most TERMS_MAX terms; every other character is a space. Postgres never sees the raw
text: a run of dashes or quotes once overflowed its parser ("tsquery stack too small", a 500)."""

from __future__ import annotations

import re

TERMS_MAX = 16  # words and phrases a search reads; the rest of the text is ignored
PHRASE_WORDS_MAX = 8  # words of one quoted phrase
_WORD = re.compile(r"[^\W_]+")
_TOKENS = re.compile(r'"([^"]*)"?|(-?)([^\W_]+)')


def websearch(q: str) -> str | None:
    """``q`` as bounded web-search syntax, or None when nothing searchable is left (a search for
    nothing finds nothing)."""
    terms: list[str] = []
    pending_or = False
    for phrase, minus, word in (m.groups() for m in _TOKENS.finditer(q)):
        if len(terms) >= TERMS_MAX:
            break
        if phrase is not None:
            words = _WORD.findall(phrase)[:PHRASE_WORDS_MAX]
            term = f'"{" ".join(words)}"' if words else ""
        elif word.lower() == "or" and not minus:
            pending_or = bool(terms)
            continue
        else:
            term = f"-{word}" if minus else word
        if not term:
            continue
        if pending_or and not term.startswith("-"):
            terms.append("or")
        pending_or = False
        terms.append(term)
    if not any(not t.startswith("-") and t != "or" for t in terms):
        return None  # only exclusions (or nothing): websearch_to_tsquery would find nothing either
    return " ".join(terms)


def plain_words(q: str) -> list[str] | None:
    """The words of ``q`` when it uses no search syntax (no quotes, ``or`` or ``-word``), at most
    TERMS_MAX; None when it does (read it with ``websearch``)."""
    if '"' in q or re.search(r"(^|\s)-[^\W_]|\bor\b", q, re.IGNORECASE):
        return None
    return _WORD.findall(q)[:TERMS_MAX]
