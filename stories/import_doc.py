"""The declared schema of an ``everlore.adventure`` document (what GET .../export/ gives), story
part: every field's type and bounds, checked whole before the importer touches a row.

Types are JSON's own (an id is an integer, not "12" nor true; a flag is true or false; a date
is ISO 8601 text naming a day that exists), and bounds fit the columns and the file's own size
(a depth is at most the number of actions a file may hold). What the schema cannot say (ids
that refer to each other, the tree's shape) the importer checks next, still before any row.
The memories part is declared beside the memories (``memory.story.memories.MemoryDocSerializer``).
"""

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
    Action,
    StoryCard,
)
from stories.prompt import sampling

EXPORT_FORMAT = "everlore.adventure"
EXPORT_VERSION = 1
IMPORT_ACTIONS_MAX = 20_000
IMPORT_BRANCHES_MAX = 500
IMPORT_CARDS_MAX = 1_000  # the per-adventure card limit is checked again on the stored cards
ID_MAX = 2**63 - 1  # the file's own ids: any non-negative bigint (they are mapped to new ids)
DEPTH_MAX = IMPORT_ACTIONS_MAX  # no path is deeper than the actions a file may hold


def _id(**kwargs):
    return strict.IntegerField(max_value=ID_MAX, **kwargs)


def _depth(*, min_value: int = 0, **kwargs):
    return strict.IntegerField(min_value=min_value, max_value=DEPTH_MAX, **kwargs)


class LineageEntry(serializers.ListField):
    """``[ancestor branch id, the depth up to which it is read]``."""

    def __init__(self, **kwargs):
        super().__init__(child=strict.IntegerField(max_value=ID_MAX), min_length=2, max_length=2, **kwargs)

    def to_internal_value(self, data):
        pair = super().to_internal_value(data)
        if len(pair) != 2:
            raise serializers.ValidationError("each lineage entry is [ancestor branch id, depth]")
        if pair[1] > DEPTH_MAX:
            raise serializers.ValidationError(f"the depth read from an ancestor is at most {DEPTH_MAX}")
        return pair


class AdventureFieldsDoc(serializers.Serializer):
    title = strict.TextField(max_length=TITLE_MAX, trim_whitespace=False)
    persona_name = strict.TextField(max_length=100, allow_blank=True, required=False, default="", trim_whitespace=False)
    persona_pronouns = strict.TextField(
        max_length=40, allow_blank=True, required=False, default="", trim_whitespace=False
    )
    persona_description = strict.TextField(
        max_length=LONG_TEXT_MAX, allow_blank=True, required=False, default="", trim_whitespace=False
    )
    plot_essentials = strict.TextField(
        max_length=LONG_TEXT_MAX, allow_blank=True, required=False, default="", trim_whitespace=False
    )
    authors_note = strict.TextField(
        max_length=AUTHORS_NOTE_MAX, allow_blank=True, required=False, default="", trim_whitespace=False
    )
    ai_instructions = strict.TextField(
        max_length=LONG_TEXT_MAX, allow_blank=True, required=False, default="", trim_whitespace=False
    )
    story_summary = strict.TextField(
        max_length=LONG_TEXT_MAX, allow_blank=True, required=False, default="", trim_whitespace=False
    )
    model = strict.TextField(max_length=200, allow_blank=True, required=False, default="")
    sampling_preset = strict.ChoiceField(choices=["", *sampling.PRESET_NAMES], required=False, default="")
    auto_summarize = strict.BooleanField(required=False, default=True)
    memory_bank_enabled = strict.BooleanField(required=False, default=True)
    memories_before_story = strict.BooleanField(required=False, default=False)
    claims_review = strict.BooleanField(required=False, default=False)

    def validate_title(self, value):
        if not value.strip():
            raise serializers.ValidationError("a title is required")
        return value


class BranchDoc(serializers.Serializer):
    id = _id()
    parent = _id(allow_null=True, required=False, default=None)
    fork_depth = _depth(required=False, default=0)
    lineage = serializers.ListField(child=LineageEntry(), max_length=IMPORT_BRANCHES_MAX, required=False, default=list)
    tip_depth = _depth(required=False, default=0)
    name = strict.TextField(max_length=100, allow_blank=True, required=False, default="", trim_whitespace=False)
    internal = strict.BooleanField(required=False, default=False)


class ActionDoc(serializers.Serializer):
    branch = _id()
    depth = _depth(min_value=1)
    kind = strict.ChoiceField(choices=Action.Kind.values)
    text = strict.TextField(max_length=ACTION_TEXT_MAX, allow_blank=True, trim_whitespace=False)
    live = strict.BooleanField(required=False, default=True)
    hidden = strict.BooleanField(required=False, default=False)
    created_at = strict.DateTimeField(required=False, allow_null=True)
    edited_at = strict.DateTimeField(required=False, allow_null=True, default=None)
    actor = strict.TextField(
        max_length=100, required=False, allow_blank=True, default="", help_text="a member's turn: their character"
    )

    def validate(self, attrs):
        if not attrs["hidden"] and not attrs["text"]:
            raise serializers.ValidationError({"text": "an action that is not hidden needs its text"})
        return attrs


class CardKeys(serializers.Field):
    """A list of strings or one comma-separated string (as the card API takes)."""

    def to_internal_value(self, data):
        if isinstance(data, str):
            data = data.split(",")
        if not isinstance(data, list) or not all(isinstance(k, str) for k in data):
            raise serializers.ValidationError("keys must be a list of strings or one comma-separated string")
        if len(data) > CARD_KEYS_MAX * 4 or any(len(k.strip()) > CARD_KEY_MAX for k in data):
            raise serializers.ValidationError(f"at most {CARD_KEYS_MAX} keys of {CARD_KEY_MAX} characters each")
        return data

    def to_representation(self, value):
        return value


class CardRulesDoc(serializers.Serializer):
    """A card's World Info rules (stories.prompt.triggers), each optional with its default."""

    secondary_keys = serializers.ListField(
        child=strict.TextField(max_length=CARD_KEY_MAX),
        max_length=CARD_KEYS_MAX,
        required=False,
        default=list,
        help_text="with the logic: keys that must (or must not) be there too",
    )
    selective_logic = strict.ChoiceField(
        choices=StoryCard.SelectiveLogic.choices,
        required=False,
        default="and_any",
        help_text="a key AND any secondary key, AND NOT all, AND NOT any, AND all",
    )
    position = strict.ChoiceField(
        choices=StoryCard.Position.choices,
        required=False,
        default="world_info",
        help_text="told with the world info after the story, before the story, or at_depth inside it",
    )
    depth = strict.IntegerField(
        min_value=0, max_value=1000, required=False, default=4, help_text="at_depth: actions from the newest"
    )
    probability = strict.IntegerField(
        min_value=0, max_value=100, required=False, default=100, help_text="percent of the turns it fires on"
    )
    prevent_recursion = strict.BooleanField(required=False, default=True, help_text="its entry triggers no other card")
    exclude_recursion = strict.BooleanField(
        required=False, default=False, help_text="only the story triggers it, never another card's entry"
    )
    examples = strict.TextField(
        max_length=CARD_ENTRY_MAX,
        allow_blank=True,
        required=False,
        default="",
        trim_whitespace=False,
        help_text="a character's example dialogue, told with it",
    )

    def validate_secondary_keys(self, value):
        return list(dict.fromkeys(k.strip() for k in value if k.strip()))


CARD_RULE_FIELDS = tuple(CardRulesDoc().fields)


class CardDoc(CardRulesDoc):
    type = strict.ChoiceField(choices=StoryCard.Type.values, required=False, default="other")
    name = strict.TextField(max_length=100)
    keys = CardKeys(required=False, default=list)
    entry = strict.TextField(
        max_length=CARD_ENTRY_MAX, allow_blank=True, required=False, default="", trim_whitespace=False
    )
    notes = strict.TextField(
        max_length=CARD_ENTRY_MAX, allow_blank=True, allow_null=True, required=False, default="", trim_whitespace=False
    )
    in_cast = strict.BooleanField(required=False, default=True)
    present = strict.BooleanField(required=False, default=True)  # false: on other paths than the head's


class AdventureDocSerializer(serializers.Serializer):
    format = strict.ChoiceField(
        choices=[EXPORT_FORMAT],
        error_messages={"invalid_choice": f"must be {EXPORT_FORMAT!r} (a file from an adventure's export)"},
    )
    version = strict.IntegerField(min_value=EXPORT_VERSION, max_value=EXPORT_VERSION)
    adventure = AdventureFieldsDoc()
    head = _id()
    branches = BranchDoc(many=True, min_length=1, max_length=IMPORT_BRANCHES_MAX)
    actions = ActionDoc(many=True, max_length=IMPORT_ACTIONS_MAX)
    cards = strict.list_of(CardDoc, required=False, allow_null=True, default=list, max_length=IMPORT_CARDS_MAX)
    # declared beside the memories; only its outer shape is read here
    memories = serializers.ListField(required=False, allow_null=True, default=None)


def check(serializer_class, data, *, what: str = "import"):
    """``data`` validated by ``serializer_class``, or InvalidRequest naming each problem and where
    (``import: actions[3].depth: ...``). A top level that is not an object says so."""
    if not isinstance(data, (dict, list)):
        raise InvalidRequest(f"{what}: expected a JSON object")
    serializer = serializer_class(data=data)
    if not serializer.is_valid():
        raise InvalidRequest(f"{what}: {strict.error_sentence(serializer.errors)}")
    return serializer.validated_data


def story_document(data) -> dict:
    """The story part of an export document, every field checked against the schema."""
    if not isinstance(data, dict):
        raise InvalidRequest("import: expected a JSON object")
    return check(AdventureDocSerializer, data)


IMPORT_MEMORIES_MAX = 50_000  # memories in one document (every branch, every character)


class EnvelopeDoc(serializers.Serializer):
    """What the request itself checks of a document too large to import while it waits: the
    format, the version, a title, and parts that are lists no longer than their limits. Every row
    is checked by the import job, before it writes one."""

    format = strict.ChoiceField(
        choices=[EXPORT_FORMAT],
        error_messages={"invalid_choice": f"must be {EXPORT_FORMAT!r} (a file from an adventure's export)"},
    )
    version = strict.IntegerField(min_value=EXPORT_VERSION, max_value=EXPORT_VERSION)
    adventure = serializers.DictField()
    head = _id()
    branches = serializers.ListField(min_length=1, max_length=IMPORT_BRANCHES_MAX)
    actions = serializers.ListField(max_length=IMPORT_ACTIONS_MAX)
    cards = serializers.ListField(required=False, allow_null=True, max_length=IMPORT_CARDS_MAX)
    memories = serializers.ListField(required=False, allow_null=True, max_length=IMPORT_MEMORIES_MAX)


def envelope(data) -> dict:
    """The document's outer shape checked (``EnvelopeDoc``); returns its title and its row count."""
    if not isinstance(data, dict):
        raise InvalidRequest("import: expected a JSON object")
    doc = check(EnvelopeDoc, data)
    title = doc["adventure"].get("title")
    rows = sum(len(doc.get(part) or ()) for part in ("branches", "actions", "cards", "memories"))
    return {"title": title[:TITLE_MAX] if isinstance(title, str) else "", "rows": rows}
