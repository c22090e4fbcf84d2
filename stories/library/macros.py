"""SillyTavern's macros in the field's files, filled once as a file becomes an adventure: {{user}} is
the player's persona name, {{char}} the card's character ({{User}}, <USER>, <BOT> and <CHAR> too),
{{newline}}, {{trim}}, {{noop}} and {{// comments}}; {{random}}, {{pick}} and {{roll}} drawn once,
the same way for the same text; {{date}}, {{time}}, {{weekday}}, {{isodate}} and {{isotime}} as of the
import. Anything else in braces stays as written and is named in the import's report."""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field
from datetime import datetime

from django.utils import timezone

from config.errors import InvalidRequest
from stories.accounts import ai_settings

_MACRO = re.compile(r"\{\{(.*?)\}\}", re.S)
_USER = re.compile(r"<user>|\{\{\s*user\s*\}\}", re.I)
_CHAR = re.compile(r"<(?:bot|char)>|\{\{\s*char\s*\}\}", re.I)
_ROLL = re.compile(r"^\s*(\d*)d(\d+)\s*([+-]\s*\d+)?\s*$", re.I)
_DICE_MAX, _SIDES_MAX = 100, 1000


def names_the_player(*texts: str) -> bool:
    """Whether any of ``texts`` says {{user}} (the player's name is needed to fill it)."""
    return any(_USER.search(text or "") for text in texts)


@dataclass
class Macros:
    """Fills the macros of one file's texts. ``user`` None leaves {{user}} as written (for a caller
    that asks the player first); ``unknown`` collects the names left as written."""

    user: str | None
    char: str | None
    now: datetime = field(default_factory=timezone.now)
    unknown: set[str] = field(default_factory=set)

    def fill(self, text: str) -> str:
        if not text or ("{{" not in text and "<" not in text):
            return text
        if self.user is not None:
            text = _USER.sub(lambda _: self.user, text)
        if self.char is not None:
            text = _CHAR.sub(lambda _: self.char, text)
        elif _CHAR.search(text):
            self.unknown.add("char")
        draw = random.Random(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest())
        text = _MACRO.sub(lambda m: self._one(m, draw), text)
        return re.sub(r"\s*\x00TRIM\x00\s*", "", text)

    def _one(self, match: re.Match, draw: random.Random) -> str:
        inner = match.group(1)
        name, _, argument = inner.partition(":")
        name = name.strip().lower()
        argument = argument[1:] if argument.startswith(":") else argument
        if inner.lstrip().startswith("//") or name == "noop":
            return ""
        if name == "newline":
            return "\n"
        if name == "trim":
            return "\x00TRIM\x00"
        if name in ("random", "pick") and argument:
            options = argument.split("::") if "::" in argument else argument.split(",")
            return draw.choice(options).strip()
        if name == "roll" and argument:
            return self._roll(argument, draw) or match.group(0)
        now = timezone.localtime(self.now)
        dated = {
            "date": now.strftime("%B %-d, %Y"),
            "time": now.strftime("%-I:%M %p"),
            "weekday": now.strftime("%A"),
            "isodate": now.date().isoformat(),
            "isotime": now.strftime("%H:%M"),
        }
        if name in dated and not argument:
            return dated[name]
        self.unknown.add(inner.strip()[:40])
        return match.group(0)

    @staticmethod
    def _roll(argument: str, draw: random.Random) -> str | None:
        dice = _ROLL.match(argument if "d" in argument.lower() else f"d{argument}")
        if not dice:
            return None
        count, sides = int(dice.group(1) or 1), int(dice.group(2))
        if not (1 <= count <= _DICE_MAX and 1 <= sides <= _SIDES_MAX):
            return None
        bonus = int((dice.group(3) or "0").replace(" ", ""))
        return str(sum(draw.randint(1, sides) for _ in range(count)) + bonus)

    def report(self, place: str) -> list[dict]:
        if not self.unknown:
            return []
        names = ", ".join("{{" + n + "}}" for n in sorted(self.unknown)[:8])
        return [{"place": place, "what": f"macros this site does not fill, kept as written: {names}"}]


def player_name(*, owner_id: int, given: str | None, texts: list[str], adventure=None) -> str:
    """The name {{user}} stands for: ``given``, else the adventure's persona, else the player's
    (their settings); asked for (InvalidRequest, code persona_needed) when ``texts`` name the player
    and there is none."""
    name = (given or "").strip() or (adventure.persona_name.strip() if adventure else "")
    name = name or ai_settings.persona_of(user_id=owner_id)["persona_name"].strip()
    if not name and names_the_player(*texts):
        raise InvalidRequest(
            "this file names the player ({{user}}): send persona_name (your name in this story), or set your "
            "persona's name in the settings",
            code="persona_needed",
        )
    return name
