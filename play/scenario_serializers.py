"""Input and output shapes of the scenario API: a scenario's content (also the body of its JSON
export and import), the library's rows, starting a story, reports. Limits are in the schema."""

from __future__ import annotations

from rest_framework import serializers

from config import serializer_fields as strict
from play.serializers import CardInputSerializer
from stories.library import scenarios
from stories.models import (
    ACTION_TEXT_MAX,
    AUTHORS_NOTE_MAX,
    CARDS_PER_SCENARIO_MAX,
    LONG_TEXT_MAX,
    SCENARIO_DESCRIPTION_MAX,
    SCENARIO_TAG_MAX,
    SCENARIO_TAGS_MAX,
    TITLE_MAX,
    Rating,
    Scenario,
    ScenarioReport,
    StoryCard,
)

TAG = r"^[a-z0-9][a-z0-9 &'-]*$"


class ScenarioCardSerializer(CardInputSerializer):
    type = strict.ChoiceField(choices=StoryCard.Type.choices, default=StoryCard.Type.OTHER)
    in_cast = strict.BooleanField(
        required=False, default=True, help_text="a character card in the cast keeps its own memories"
    )


class TagField(strict.PatternField):
    def __init__(self, **kwargs):
        super().__init__(
            TAG,
            max_length=SCENARIO_TAG_MAX,
            error_messages={"invalid": "a tag is lower-case letters, digits, spaces, & ' or -"},
            **kwargs,
        )

    def to_internal_value(self, data):
        if isinstance(data, str):
            data = " ".join(data.split()).lower()
        return super().to_internal_value(data)


class ScenarioContentSerializer(serializers.Serializer):
    """What a scenario holds. `${a question?}` in the title, opening, plot essentials, instructions,
    author's note or a card is asked of the player starting it and replaced by the answer."""

    title = strict.TextField(max_length=TITLE_MAX)
    description = strict.TextField(
        max_length=SCENARIO_DESCRIPTION_MAX, allow_blank=True, required=False, help_text="shown in the library"
    )
    opening = strict.TextField(
        max_length=ACTION_TEXT_MAX, allow_blank=True, required=False, help_text="the story's first passage"
    )
    plot_essentials = strict.TextField(max_length=LONG_TEXT_MAX, allow_blank=True, required=False)
    ai_instructions = strict.TextField(max_length=LONG_TEXT_MAX, allow_blank=True, required=False)
    authors_note = strict.TextField(max_length=AUTHORS_NOTE_MAX, allow_blank=True, required=False)
    tags = serializers.ListField(child=TagField(), max_length=SCENARIO_TAGS_MAX, required=False)
    rating = strict.ChoiceField(choices=Rating.choices, required=False)
    cover_emoji = strict.TextField(max_length=16, allow_blank=True, required=False)
    cover_color = strict.PatternField(
        r"^#[0-9a-fA-F]{6}$",
        required=False,
        error_messages={"invalid": "a colour as #rrggbb"},
        help_text="the cover's colour, #rrggbb",
    )
    cards = strict.list_of(ScenarioCardSerializer, max_length=CARDS_PER_SCENARIO_MAX, required=False)

    def validate_tags(self, value):
        return list(dict.fromkeys(value))

    def validate(self, attrs):
        if len(scenarios.placeholders_of(attrs)) > scenarios.PLACEHOLDERS_MAX:
            raise serializers.ValidationError(
                f"a scenario asks at most {scenarios.PLACEHOLDERS_MAX} questions (`${{...}}` placeholders)"
            )
        if "cover_color" in attrs:
            attrs["cover_color"] = attrs["cover_color"].lower()
        return attrs


class ScenarioChangeSerializer(ScenarioContentSerializer):
    visibility = strict.ChoiceField(
        choices=Scenario.Visibility.choices,
        required=False,
        help_text="private: only you; unlisted: anyone with its link; published: in the library",
    )


class ScenarioDocumentSerializer(serializers.Serializer):
    """A scenario as its export writes it."""

    format = strict.ChoiceField(choices=[scenarios.EXPORT_FORMAT])
    version = strict.IntegerField(min_value=1, max_value=scenarios.EXPORT_VERSION)
    scenario = ScenarioContentSerializer()


class ScenarioCardOutSerializer(serializers.Serializer):
    type = serializers.CharField()
    name = serializers.CharField()
    keys = serializers.ListField(child=serializers.CharField())
    entry = serializers.CharField()
    notes = serializers.CharField(required=False)
    in_cast = serializers.BooleanField()


class ScenarioSummarySerializer(serializers.Serializer):
    """A scenario as the library lists it."""

    key = serializers.CharField(help_text="its id; the share link is /library/s/{key}/")
    title = serializers.CharField()
    description = serializers.CharField()
    tags = serializers.ListField(child=serializers.CharField())
    rating = serializers.CharField()
    cover_emoji = serializers.CharField()
    cover_color = serializers.CharField()
    author = serializers.SerializerMethodField(help_text="the author's name; null for the site's own scenarios")
    play_count = serializers.IntegerField()
    published_at = serializers.DateTimeField(allow_null=True)

    def get_author(self, obj) -> str | None:
        return obj.author.username if obj.author_id else None


class ScenarioSerializer(ScenarioSummarySerializer):
    """A scenario as its page shows it: the current version's content, the questions asked on
    starting it and, for its author, who sees it and what moderators said."""

    version = serializers.SerializerMethodField()
    opening = serializers.SerializerMethodField()
    plot_essentials = serializers.SerializerMethodField()
    ai_instructions = serializers.SerializerMethodField()
    authors_note = serializers.SerializerMethodField()
    cards = serializers.SerializerMethodField()
    placeholders = serializers.SerializerMethodField(help_text="the questions answered when starting a story")
    visibility = serializers.CharField()
    hidden = serializers.BooleanField(help_text="a moderator hid it: only its author sees it")
    moderator_notice = serializers.CharField(help_text="what the moderators told its author")
    is_author = serializers.SerializerMethodField()
    updated_at = serializers.DateTimeField()

    def get_version(self, obj) -> int:
        return obj.current.number

    def get_opening(self, obj) -> str:
        return obj.current.opening

    def get_plot_essentials(self, obj) -> str:
        return obj.current.plot_essentials

    def get_ai_instructions(self, obj) -> str:
        return obj.current.ai_instructions

    def get_authors_note(self, obj) -> str:
        return obj.current.authors_note

    def get_cards(self, obj) -> list[dict]:
        return ScenarioCardOutSerializer(obj.current.cards, many=True).data

    def get_placeholders(self, obj) -> list[str]:
        return scenarios.placeholders_of(scenarios.content_of(obj.current))

    def get_is_author(self, obj) -> bool:
        return obj.author_id is not None and obj.author_id == self.context.get("user_id")

    def to_representation(self, obj):
        data = super().to_representation(obj)
        if not data["is_author"]:  # what moderators said is the author's business
            data["moderator_notice"] = ""
        return data


class ScenarioVersionSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    title = serializers.CharField()
    created_at = serializers.DateTimeField()


class LibraryQuerySerializer(serializers.Serializer):
    q = strict.TextField(
        max_length=200, required=False, allow_blank=True, help_text="words in title, description, tags"
    )
    tag = strict.TextField(max_length=SCENARIO_TAG_MAX, required=False, allow_blank=True)
    rating = strict.ChoiceField(choices=Rating.choices, required=False)
    sort = strict.ChoiceField(
        choices=["new", "played", "relevant"], required=False, help_text="relevant is the default with q, new without"
    )


class PlaySerializer(serializers.Serializer):
    answers = serializers.DictField(
        child=strict.TextField(max_length=scenarios.ANSWER_MAX, allow_blank=True),
        required=False,
        default=dict,
        help_text='each question the scenario asks with its answer: {"Your name?": "Mara"}',
    )

    def validate_answers(self, value):
        if len(value) > scenarios.PLACEHOLDERS_MAX:
            raise serializers.ValidationError(f"a scenario asks at most {scenarios.PLACEHOLDERS_MAX} questions")
        return value


class ReportSerializer(serializers.Serializer):
    reason = strict.ChoiceField(choices=ScenarioReport.Reason.choices)
    text = strict.TextField(max_length=1000, required=False, allow_blank=True, default="")


class ReportOutSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    reason = serializers.CharField()
    status = serializers.CharField()
    created_at = serializers.DateTimeField()
