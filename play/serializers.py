"""Input and output shapes of the story API. Limits are documented in the schema."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.utils import timezone
from drf_spectacular.utils import PolymorphicProxySerializer
from rest_framework import serializers

from config import serializer_fields as strict
from config.errors import InvalidRequest
from stories.cards import clean_keys
from stories.import_doc import CARD_RULE_FIELDS, CardRulesDoc
from stories.models import (
    ACTION_TEXT_MAX,
    AUTHORS_NOTE_MAX,
    CARD_ENTRY_MAX,
    CARD_KEY_MAX,
    CARD_KEYS_MAX,
    CARDS_PER_ADVENTURE_MAX,
    LONG_TEXT_MAX,
    TITLE_MAX,
    Adventure,
    Branch,
    StoryCard,
)
from stories.party import secrets
from stories.prompt import sampling
from stories.serializers import ActionSerializer

User = get_user_model()


# ---------------------------------------------------------------------------- adventures


class CardInputSerializer(CardRulesDoc):
    type = strict.ChoiceField(choices=StoryCard.Type.choices, default=StoryCard.Type.OTHER)
    name = strict.TextField(max_length=100)
    keys = serializers.ListField(
        child=strict.TextField(max_length=CARD_KEY_MAX), max_length=CARD_KEYS_MAX, required=False, default=list
    )
    entry = strict.TextField(max_length=CARD_ENTRY_MAX, allow_blank=True, required=False, default="")
    notes = strict.TextField(max_length=CARD_ENTRY_MAX, allow_blank=True, required=False, default="")
    in_cast = strict.BooleanField(
        required=False,
        default=True,
        help_text="a character card in the cast keeps its own memories of the scenes it is in",
    )

    def validate_keys(self, value):
        try:
            return clean_keys(value)
        except InvalidRequest as exc:
            raise serializers.ValidationError(str(exc)) from None


class CardSerializer(strict.StrictModelSerializer):
    present = serializers.BooleanField(
        read_only=True, help_text="on the branch played (false: made on another branch, or deleted here)"
    )

    class Meta:
        model = StoryCard
        fields = [
            "id",
            "type",
            "name",
            "keys",
            "entry",
            "notes",
            "in_cast",
            *CARD_RULE_FIELDS,
            "present",
            "created_at",
            "updated_at",
        ]


class AdventureSerializer(strict.StrictModelSerializer):
    title = strict.TextField(max_length=TITLE_MAX)
    persona_name = strict.TextField(max_length=100, allow_blank=True, required=False)
    persona_pronouns = strict.TextField(max_length=40, allow_blank=True, required=False)
    persona_description = strict.TextField(max_length=LONG_TEXT_MAX, allow_blank=True, required=False)
    plot_essentials = strict.TextField(max_length=LONG_TEXT_MAX, allow_blank=True, required=False)
    authors_note = strict.TextField(max_length=AUTHORS_NOTE_MAX, allow_blank=True, required=False)
    ai_instructions = strict.TextField(max_length=LONG_TEXT_MAX, allow_blank=True, required=False)
    story_summary = strict.TextField(max_length=LONG_TEXT_MAX, allow_blank=True, required=False)
    model = strict.TextField(
        max_length=200, allow_blank=True, required=False, help_text="this adventure's own model; blank: your Settings'"
    )
    sampling_preset = strict.ChoiceField(
        choices=["", *sampling.PRESET_NAMES],
        required=False,
        help_text="this adventure's sampling preset (GET /api/settings/presets/); blank: your Settings' sampling",
    )
    opening = strict.TextField(
        max_length=ACTION_TEXT_MAX,
        allow_blank=True,
        required=False,
        write_only=True,
        help_text="The story's first passage (create only).",
    )
    cards = CardInputSerializer(many=True, required=False, write_only=True, help_text="Story cards (create only).")
    head_branch = serializers.PrimaryKeyRelatedField(read_only=True)
    head_depth = serializers.SerializerMethodField()
    generating = serializers.SerializerMethodField(
        help_text="A reply is being written now; turns, edits, undo and branch switches answer 409 until it is done."
    )

    class Meta:
        model = Adventure
        fields = [
            "id",
            "title",
            "persona_name",
            "persona_pronouns",
            "persona_description",
            "plot_essentials",
            "authors_note",
            "ai_instructions",
            "story_summary",
            "auto_summarize",
            "memory_bank_enabled",
            "memories_before_story",
            "claims_review",
            "model",
            "sampling_preset",
            "head_branch",
            "head_depth",
            "generating",
            "opening",
            "cards",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["created_at", "updated_at"]

    def get_head_depth(self, obj) -> int:
        return obj.head_branch.tip_depth if obj.head_branch_id else 0

    def get_generating(self, obj) -> bool:
        return obj.generation_until is not None and obj.generation_until > timezone.now()


class AdventureUpdateSerializer(AdventureSerializer):
    """What a PATCH may change: the opening and cards are set at creation (cards have their own routes)."""

    class Meta(AdventureSerializer.Meta):
        fields = [f for f in AdventureSerializer.Meta.fields if f not in ("opening", "cards")]


class StoryHitSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    depth = serializers.IntegerField()
    kind = strict.TextField()
    snippet = strict.TextField(help_text="the words found between « and »")


class StorySearchSerializer(serializers.Serializer):
    query = strict.TextField()
    results = StoryHitSerializer(many=True)
    more = serializers.BooleanField(help_text="other actions match too, past the limit: add words to narrow it")


class StoryPageSerializer(serializers.Serializer):
    branch = serializers.IntegerField()
    tip_depth = serializers.IntegerField()
    actions = ActionSerializer(many=True)
    next_before = serializers.IntegerField(allow_null=True, help_text="Pass as ?before= for older actions.")
    can_redo = serializers.BooleanField(help_text="an undone turn waits to be redone at the tip (Redo is enabled)")


class TurnInputSerializer(serializers.Serializer):
    mode = strict.ChoiceField(choices=["do", "say", "story", "continue"])
    text = strict.TextField(
        max_length=ACTION_TEXT_MAX,
        allow_blank=True,
        required=False,
        default="",
        help_text=f"1-{ACTION_TEXT_MAX} characters; empty for continue.",
    )

    private = strict.BooleanField(
        required=False, default=False, help_text="a secret: told to the narrator alone (a story played together)"
    )
    to = serializers.ListField(
        child=strict.TextField(min_length=1, max_length=100),
        max_length=secrets.TO_MAX,
        required=False,
        default=list,
        help_text="a whisper: the characters it is told to, by name (a story played together)",
    )

    def validate(self, attrs):
        attrs["to"] = tuple(attrs["to"])
        if attrs["mode"] == "continue":
            if attrs["text"].strip():
                raise serializers.ValidationError({"text": "continue takes no text; use mode story to write"})
        elif not attrs["text"].strip():
            raise serializers.ValidationError({"text": "write something for this mode (or use continue)"})
        return attrs


class WrittenTurnSerializer(serializers.Serializer):
    """OpenAPI only: a turn the player writes."""

    mode = strict.ChoiceField(choices=["do", "say", "story"])
    text = strict.TextField(max_length=ACTION_TEXT_MAX)


class ContinueTurnSerializer(serializers.Serializer):
    """OpenAPI only: let the model go on, with no text."""

    mode = strict.ChoiceField(choices=["continue"])
    text = strict.TextField(max_length=0, allow_blank=True, required=False)


TURN_INPUT_SCHEMA = PolymorphicProxySerializer(
    component_name="TurnInput",
    resource_type_field_name="mode",
    serializers={
        "do": WrittenTurnSerializer,
        "say": WrittenTurnSerializer,
        "story": WrittenTurnSerializer,
        "continue": ContinueTurnSerializer,
    },
)


class AIDungeonCardSerializer(serializers.Serializer):
    """OpenAPI only: one card of AI Dungeon's story-card export (keys may also be one comma-separated string)."""

    title = strict.TextField(max_length=100)
    keys = serializers.ListField(
        child=strict.TextField(max_length=CARD_KEY_MAX), max_length=CARD_KEYS_MAX, required=False
    )
    value = strict.TextField(max_length=CARD_ENTRY_MAX, allow_blank=True, required=False)
    type = strict.TextField(
        allow_blank=True,
        allow_null=True,
        required=False,
        help_text="character, location, item or faction; any other becomes a card of type other",
    )
    description = strict.TextField(max_length=CARD_ENTRY_MAX, allow_blank=True, allow_null=True, required=False)


class AIDungeonCardsSerializer(serializers.Serializer):
    """OpenAPI only: the export file (a bare list of cards is accepted too)."""

    storyCards = serializers.ListField(child=AIDungeonCardSerializer(), max_length=CARDS_PER_ADVENTURE_MAX)


class UsageSerializer(serializers.Serializer):
    model = strict.TextField()
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    cached_tokens = serializers.IntegerField(
        help_text="prompt tokens the endpoint served from its prefix cache (0 when it does not say)"
    )
    prefix_reused = serializers.FloatField(
        allow_null=True, help_text="share of the last prompt sent for this adventure that this one started with"
    )
    latency_ms = serializers.IntegerField()
    demo = serializers.BooleanField()


class ContextPartSerializer(serializers.Serializer):
    name = strict.TextField()
    tokens = serializers.IntegerField()
    reason = strict.TextField()
    items = serializers.ListField(child=serializers.DictField())
    text = strict.TextField()


class UntoldSerializer(serializers.Serializer):
    part = strict.ChoiceField(choices=["summary", "card", "memories"])
    name = strict.TextField(allow_blank=True, help_text="a card's name")
    why = strict.TextField()
    when = strict.TextField(allow_blank=True)


class ContextSerializer(serializers.Serializer):
    budget = serializers.IntegerField()
    total_tokens = serializers.IntegerField()
    encoding = strict.TextField()
    recall_note = strict.TextField(
        allow_blank=True,
        help_text="why recall fell back to pinned memories only (empty when it ranked the bank as usual)",
    )
    prefix_reused = serializers.FloatField(
        allow_null=True,
        help_text="share of the last prompt sent for this adventure that this one starts with (what a prefix "
        "cache can serve; null before the first turn)",
    )
    last_cached_tokens = serializers.IntegerField(
        allow_null=True, help_text="Insights: prompt tokens the endpoint said it had cached on the last turn"
    )
    sent_at = serializers.DateTimeField(required=False, help_text="the last turn's view: when it was sent")
    cached_tokens = serializers.IntegerField(
        required=False, help_text="the last turn's view: prompt tokens the endpoint served from its cache"
    )
    parts = ContextPartSerializer(many=True)
    untold = UntoldSerializer(
        many=True,
        required=False,
        help_text="Insights: each part the model is not told this turn, why, and when it will be",
    )


class GatherRoundSerializer(serializers.Serializer):
    waiting = serializers.ListField(child=serializers.CharField(), help_text="the characters still to write")
    closes_at = serializers.DateTimeField(allow_null=True, help_text="when the round is narrated, written or not")


class GatheredSerializer(serializers.Serializer):
    """A gather round's action, kept until the round's one narration answers every player's."""

    actions = ActionSerializer(many=True)
    gather = GatherRoundSerializer()


class TurnResultSerializer(serializers.Serializer):
    actions = ActionSerializer(many=True)
    context = ContextSerializer()
    usage = UsageSerializer()
    memories = serializers.ListField(child=serializers.DictField())
    recall_note = strict.TextField(allow_blank=True, help_text="why recall fell back to pinned memories only")
    notices = serializers.ListField(
        child=strict.TextField(),
        help_text="what the player should know of how this turn was played (a convenience the site could not "
        "give just now); usually empty",
    )


class EditInputSerializer(serializers.Serializer):
    text = strict.TextField(max_length=ACTION_TEXT_MAX, required=False)


class TakeSelectSerializer(serializers.Serializer):
    take_id = strict.IntegerField(min_value=1, max_value=strict.ID_MAX)


class TakesSerializer(serializers.Serializer):
    depth = serializers.IntegerField()
    takes = ActionSerializer(many=True)


class ForkInputSerializer(serializers.Serializer):
    name = strict.TextField(max_length=100, allow_blank=True, required=False, default="")
    checkout = strict.BooleanField(required=False, default=True)


class BranchSerializer(strict.StrictModelSerializer):
    is_head = serializers.SerializerMethodField()

    class Meta:
        model = Branch
        fields = ["id", "name", "parent", "fork_depth", "tip_depth", "is_head", "created_at"]

    def get_is_head(self, obj) -> bool:
        return obj.pk == self.context.get("head_id")


class BranchRenameSerializer(serializers.Serializer):
    name = strict.TextField(max_length=100, required=False)


class UndoResultSerializer(serializers.Serializer):
    removed_depth = serializers.IntegerField(help_text="the first depth taken back")
    removed = serializers.IntegerField(help_text="nodes taken back: 2 for an action and its reply")
    tip_depth = serializers.IntegerField()
    can_redo = serializers.BooleanField()


class RedoResultSerializer(serializers.Serializer):
    actions = ActionSerializer(many=True, help_text="the nodes placed again (new ids)")
    tip_depth = serializers.IntegerField()
    can_redo = serializers.BooleanField(help_text="another undone turn waits to be redone")
