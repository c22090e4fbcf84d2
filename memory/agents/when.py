"""Time in a recall query: whether it asks *when* something happened, and the
period it names ("in June", "in 2023", "last week", "three days ago"), so
recall can use the memories' event times (docs/agent-memory.md).

English only, like the full-text side of recall. Everything here is a rule
about language, not a parameter fitted to a benchmark; how much each cue
counts is a weight in memory.agents.agent_recall, chosen by cross-validation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

# A question about time: "When did...", "How long has...", "What year...", "since when".
_WHEN = re.compile(
    r"\bwhen\b|\bhow long\b|\bhow many (?:years|months|weeks|days|hours)\b|\bhow old\b"
    r"|\b(?:what|which) (?:year|month|date|day|week|time of year)\b|\bwhat time\b",
    re.IGNORECASE,
)

# A memory that says when (Postgres ARE syntax: \m and \M are word boundaries). "may" and "march"
# count only after a preposition; numbers of units count with or without "ago".
_MONTHS = "january|february|april|june|july|august|september|october|november|december"
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_UNITS = "days?|weeks?|months?|years?|decades?|hours?"
# how many units a memory or a query may count ("two weeks", "a few years", "3 days")
_NUMBER_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "couple of": 2,
    "few": 3,
    "several": 4,
    "many": 5,
}
_COUNTS = "|".join(_NUMBER_WORDS) + "|[0-9]+"
TIME_EXPRESSION_SQL = (
    r"\m(yesterday|today|tonight|tomorrow|recently|lately|ago|earlier|weekend|the other day"
    rf"|(last|next|this|past|previous|coming|upcoming) ({_UNITS}|night|weekend|summer|winter|spring|fall|autumn|{_DAYS})"
    rf"|{_DAYS}|{_MONTHS}|(in|of|since|until|by|during|early|late|mid) (may|march)"
    rf"|(19|20)[0-9][0-9]|({_COUNTS}) ({_UNITS}))\M"
)

_MONTH_NUMBERS = {
    name: n
    for n, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
_MONTH_IN_QUERY = re.compile(
    r"\b(?:(?:in|of|since|until|by|during|early|late|mid|last|this|next)\s+)?"
    r"(january|february|march|april|may|june|july|august|september|october|november|december"
    r"|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)\b\.?",
    re.IGNORECASE,
)
_YEAR_IN_QUERY = re.compile(r"\b(19[0-9]{2}|20[0-9]{2})\b")
_AGO = re.compile(rf"\b({_COUNTS})\s+(day|week|month|year)s?\s+ago\b", re.IGNORECASE)
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}


@dataclass
class TimeCues:
    """What a query says about time."""

    asks_when: bool = False
    months: list[int] = field(default_factory=list)  # named months (any year unless ``years``)
    years: list[int] = field(default_factory=list)
    start: datetime | None = None  # a period relative to now ("last week")
    end: datetime | None = None

    @property
    def names_a_period(self) -> bool:
        return bool(self.months or self.years or self.start)


def cues(query: str, now: datetime) -> TimeCues:
    """The time cues of ``query``, relative periods resolved against ``now``."""
    out = TimeCues(asks_when=bool(_WHEN.search(query)))
    for match in _MONTH_IN_QUERY.finditer(query):
        word = match.group(1).lower()
        preposition = match.group(0).split()[0].lower() if len(match.group(0).split()) > 1 else ""
        if (word in ("may", "march") or len(word) <= 4 and word not in ("june", "july")) and not preposition:
            continue  # "may I", "march on", "Jan said": not a month without "in", "of", ...
        out.months.append(_MONTH_NUMBERS[word])
    out.years = sorted({int(y) for y in _YEAR_IN_QUERY.findall(query)})
    out.months = sorted(set(out.months))
    lowered = query.lower()
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if re.search(r"\byesterday\b", lowered):
        out.start, out.end = day - timedelta(days=1), day
    elif re.search(r"\btoday\b|\btonight\b", lowered):
        out.start, out.end = day, now
    elif re.search(r"\b(?:last|past|previous) week\b", lowered):
        out.start, out.end = day - timedelta(days=7 + day.weekday()), day - timedelta(days=day.weekday())
    elif re.search(r"\bthis week\b", lowered):
        out.start, out.end = day - timedelta(days=day.weekday()), now
    elif re.search(r"\b(?:last|past|previous) month\b", lowered):
        first = day.replace(day=1)
        out.start, out.end = (first - timedelta(days=1)).replace(day=1), first
    elif re.search(r"\bthis month\b", lowered):
        out.start, out.end = day.replace(day=1), now
    elif re.search(r"\b(?:last|past|previous) year\b", lowered) and not out.years:
        out.years = [now.year - 1]
    elif re.search(r"\bthis year\b", lowered) and not out.years:
        out.years = [now.year]
    elif (ago := _AGO.search(lowered)) is not None:
        count = ago.group(1)
        number = int(count) if count.isdigit() else _NUMBER_WORDS.get(count, 1)
        days = number * _UNIT_DAYS[ago.group(2)]
        slack = max(1, _UNIT_DAYS[ago.group(2)] // 2)
        out.start, out.end = day - timedelta(days=days + slack), day - timedelta(days=days - slack - 1)
    return out
