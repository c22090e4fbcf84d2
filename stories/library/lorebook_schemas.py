"""The declared shapes of the field's formats that stories.library.lorebooks reads: SillyTavern character
cards (V1 fields at the top; V2 and V3 under `data`), their character books, SillyTavern World
Info and NovelAI lorebooks. Each is checked whole before a row is written; a file that breaks one
is a 400 naming the place in the file (`entries.3.content`, `data.first_mes`). Fields these
formats carry that the site has no place for are let through, and reported as not carried."""

from __future__ import annotations

from rest_framework import serializers

from config import serializer_fields as strict
from config.errors import InvalidRequest
from stories.models import (
    ACTION_TEXT_MAX,
    AUTHORS_NOTE_MAX,
    CARD_ENTRY_MAX,
    CARD_KEY_MAX,
    CARD_KEYS_MAX,
    LONG_TEXT_MAX,
    TITLE_MAX,
)

ENTRIES_MAX = 2000  # entries of one lorebook (the adventure's card limit applies too)
GREETINGS_MAX = 100  # a card's alternate greetings


class Text(strict.TextField):
    """Text these formats may leave out or write as null (read as empty)."""

    def __init__(self, *, most: int, **kwargs):
        kwargs.setdefault("required", False)
        super().__init__(max_length=most, allow_blank=True, allow_null=True, trim_whitespace=False, **kwargs)

    def to_representation(self, value):
        return value or ""


class Keys(serializers.Field):
    """Trigger keys: a list of texts, or one text of comma-separated keys; blanks and repeats go."""

    default_error_messages = {
        "invalid": "must be a list of texts",
        "too_many": f"at most {CARD_KEYS_MAX} keys (this one has {{count}})",
        "too_long": f"a key of at most {CARD_KEY_MAX} characters ({{start}}...)",
    }

    def __init__(self, **kwargs):
        super().__init__(required=False, allow_null=True, **kwargs)

    def to_internal_value(self, data):
        if isinstance(data, str):
            data = data.split(",")
        if not isinstance(data, list) or not all(isinstance(k, str) for k in data):
            self.fail("invalid")
        keys = list(dict.fromkeys(k.strip() for k in data if k.strip()))
        if len(keys) > CARD_KEYS_MAX:
            self.fail("too_many", count=len(keys))
        for key in keys:
            if len(key) > CARD_KEY_MAX:
                self.fail("too_long", start=repr(key[:30]))
        return keys

    def to_representation(self, value):
        return value or []


class Flag(serializers.Field):
    """A switch: true or false (null and 0/1 as older files write them)."""

    default_error_messages = {"invalid": "must be true or false"}

    def __init__(self, **kwargs):
        super().__init__(required=False, allow_null=True, **kwargs)

    def to_internal_value(self, data):
        if isinstance(data, bool):
            return data
        if isinstance(data, int) and data in (0, 1):
            return bool(data)
        self.fail("invalid")

    def to_representation(self, value):
        return value


class Number(serializers.Field):
    """A whole number in a range (null: the format's default)."""

    default_error_messages = {"invalid": "must be a whole number from {low} to {high}"}

    def __init__(self, low: int, high: int, **kwargs):
        self.low, self.high = low, high
        super().__init__(required=False, allow_null=True, **kwargs)

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, float)) or data != int(data):
            self.fail("invalid", low=self.low, high=self.high)
        if not self.low <= data <= self.high:
            self.fail("invalid", low=self.low, high=self.high)
        return int(data)

    def to_representation(self, value):
        return value


class Place(serializers.Field):
    """A character book entry's position: before_char or after_char (the V2 specification), or
    SillyTavern's number (0-7) as some tools write it."""

    default_error_messages = {"invalid": "must be before_char, after_char or a number from 0 to 7"}

    def __init__(self, **kwargs):
        super().__init__(required=False, allow_null=True, **kwargs)

    def to_internal_value(self, data):
        if data in ("before_char", "after_char", ""):
            return data or None
        if isinstance(data, int) and not isinstance(data, bool) and 0 <= data <= 7:
            return data
        self.fail("invalid")

    def to_representation(self, value):
        return value


class WorldInfoRules(serializers.Serializer):
    """World Info's rules as SillyTavern writes them (an entry's own fields, or a character book
    entry's ``extensions``)."""

    selective = Flag()
    selectiveLogic = Number(0, 3)  # noqa: N815 (the format's own names)
    position = Number(0, 7)
    depth = Number(0, 10_000)
    probability = Number(0, 100)
    useProbability = Flag()  # noqa: N815
    excludeRecursion = Flag()  # noqa: N815
    preventRecursion = Flag()  # noqa: N815
    exclude_recursion = Flag()
    prevent_recursion = Flag()


class WorldInfoEntry(WorldInfoRules):
    """A SillyTavern World Info entry."""

    key = Keys()
    keysecondary = Keys()
    comment = Text(most=TITLE_MAX)
    content = Text(most=CARD_ENTRY_MAX)
    constant = Flag()
    disable = Flag()


class BookEntry(serializers.Serializer):
    """A character book's entry (character card V2/V3); SillyTavern keeps its rules in ``extensions``."""

    keys = Keys()
    secondary_keys = Keys()
    name = Text(most=TITLE_MAX)
    comment = Text(most=TITLE_MAX)
    content = Text(most=CARD_ENTRY_MAX)
    constant = Flag()
    enabled = Flag()
    selective = Flag()
    position = Place()
    extensions = WorldInfoRules(required=False, allow_null=True)


class NovelAIEntry(serializers.Serializer):
    """A NovelAI lorebook entry."""

    keys = Keys()
    displayName = Text(most=TITLE_MAX)  # noqa: N815 (the format's own name)
    text = Text(most=CARD_ENTRY_MAX)
    forceActivation = Flag()  # noqa: N815
    enabled = Flag()


class WorldInfo(serializers.Serializer):
    entries = serializers.DictField(child=WorldInfoEntry())

    def validate_entries(self, value):
        if len(value) > ENTRIES_MAX:
            raise serializers.ValidationError(f"at most {ENTRIES_MAX} (this book has {len(value)})")
        return value


class CharacterBook(serializers.Serializer):
    entries = strict.list_of(BookEntry, max_length=ENTRIES_MAX)


class NovelAILorebook(serializers.Serializer):
    entries = strict.list_of(NovelAIEntry, max_length=ENTRIES_MAX)


class CardFields(serializers.Serializer):
    """A character card's fields this site carries (the others are reported as not carried)."""

    name = strict.TextField(max_length=100)
    first_mes = Text(most=ACTION_TEXT_MAX)
    alternate_greetings = serializers.ListField(
        child=strict.TextField(max_length=ACTION_TEXT_MAX, allow_blank=True, trim_whitespace=False),
        max_length=GREETINGS_MAX,
        required=False,
        allow_null=True,
    )
    mes_example = Text(most=CARD_ENTRY_MAX)
    description = Text(most=LONG_TEXT_MAX)
    scenario = Text(most=LONG_TEXT_MAX)
    personality = Text(most=CARD_ENTRY_MAX)
    system_prompt = Text(most=LONG_TEXT_MAX)
    post_history_instructions = Text(most=AUTHORS_NOTE_MAX)
    character_book = CharacterBook(required=False, allow_null=True)


class CharacterCard(serializers.Serializer):
    """A V2 or V3 card: its fields under `data`."""

    spec = strict.ChoiceField(choices=["chara_card_v2", "chara_card_v3"])
    data = CardFields()


def checked(schema: type[serializers.Serializer], data, *, prefix: str = "") -> dict:
    """``data`` as ``schema`` declares it (fields it does not name kept as they were), or
    InvalidRequest naming the first places to fix."""
    serializer = schema(data=data)
    if not serializer.is_valid():
        raise InvalidRequest(strict.error_sentence(serializer.errors, path=prefix.rstrip(".")))
    return {**data, **serializer.validated_data}
