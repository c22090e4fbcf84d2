"""Input and output shapes of the account API (signup, login, the player's AI settings, the
debug log). Limits are documented in the schema."""

from __future__ import annotations

from django.contrib.auth import get_user_model, password_validation
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers

from config import serializer_fields as strict
from stories.accounts import ai_settings
from stories.models import LONG_TEXT_MAX, AISettings, ProviderCall, Rating
from stories.prompt import sampling
from stories.providers.netguard import EndpointRefused, check_url_shape

User = get_user_model()


class SignupSerializer(serializers.Serializer):
    username = strict.PatternField(
        r"^[\w.@+-]{3,150}$", max_length=150, error_messages={"invalid": "3-150 letters, digits and @/./+/-/_ only"}
    )
    password = strict.TextField(write_only=True, max_length=128, trim_whitespace=False)
    email = strict.EmailField(required=False, allow_blank=True, max_length=254)

    def validate_username(self, value):
        if User.objects.filter(username__iexact=value).exists():
            raise serializers.ValidationError("that username is taken")
        return value

    def validate(self, attrs):
        try:
            password_validation.validate_password(attrs["password"], User(username=attrs["username"]))
        except DjangoValidationError as exc:
            raise serializers.ValidationError({"password": list(exc.messages)}) from None
        return attrs


class PasswordChangeSerializer(serializers.Serializer):
    old_password = strict.TextField(max_length=128, trim_whitespace=False, write_only=True)
    new_password = strict.TextField(max_length=128, trim_whitespace=False, write_only=True)

    def validate(self, attrs):
        try:
            password_validation.validate_password(attrs["new_password"], self.context["user"])
        except DjangoValidationError as exc:
            raise serializers.ValidationError({"new_password": list(exc.messages)}) from None
        return attrs


class LoginSerializer(serializers.Serializer):
    username = strict.TextField(max_length=150)
    password = strict.TextField(max_length=128, trim_whitespace=False, write_only=True)


class TokenSerializer(serializers.Serializer):
    token = strict.TextField()
    username = strict.TextField()


class MeSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = strict.TextField()
    email = strict.TextField()


class AISettingsSerializer(strict.StrictModelSerializer):
    api_key = strict.TextField(
        write_only=True,
        required=False,
        allow_blank=True,
        max_length=500,
        trim_whitespace=True,
        help_text="Write-only. Empty string removes the stored key; omit to keep it.",
    )
    endpoint_url = strict.TextField(
        max_length=500,
        allow_blank=True,
        required=False,
        help_text="OpenAI-compatible base URL, e.g. https://api.openai.com/v1",
    )
    has_api_key = serializers.BooleanField(read_only=True)
    api_key_last4 = strict.TextField(read_only=True)
    api_key_cleared = serializers.SerializerMethodField(
        help_text="True when this change moved the endpoint to another scheme, host or port without a new key: "
        "a key is sent only to the endpoint it was entered for, so the stored key was removed."
    )
    context_tokens = strict.IntegerField(min_value=256, max_value=2_000_000, required=False)
    max_output_tokens = strict.IntegerField(min_value=1, max_value=64_000, required=False)
    temperature = strict.FloatField(min_value=0.0, max_value=2.0, required=False)
    top_p = strict.FloatField(min_value=0.0, max_value=1.0, required=False, allow_null=True)
    top_k = strict.IntegerField(min_value=0, max_value=1000, required=False, allow_null=True)
    min_p = strict.FloatField(min_value=0.0, max_value=1.0, required=False, allow_null=True)
    frequency_penalty = strict.FloatField(min_value=-2.0, max_value=2.0, required=False, allow_null=True)
    presence_penalty = strict.FloatField(min_value=-2.0, max_value=2.0, required=False, allow_null=True)
    repetition_penalty = strict.FloatField(min_value=0.0, max_value=3.0, required=False, allow_null=True)
    stop = serializers.ListField(
        child=strict.TextField(min_length=1, max_length=sampling.STOP_LENGTH_MAX, trim_whitespace=False),
        max_length=sampling.STOP_MAX,
        required=False,
        help_text="Up to 4 strings that end the model's reply (not sent when empty).",
    )
    preset = strict.ChoiceField(
        choices=sampling.PRESET_NAMES,
        write_only=True,
        required=False,
        help_text="Set temperature and the sampling fields from a named preset (GET /api/settings/presets/); "
        "fields given in the same change win.",
    )
    reasoning_max_tokens = strict.IntegerField(min_value=0, max_value=200_000, required=False)
    memory_top_k = strict.IntegerField(min_value=0, max_value=50, required=False)
    memory_bank_capacity = strict.IntegerField(min_value=1, max_value=100_000, required=False)
    content_rating = strict.ChoiceField(
        choices=Rating.choices,
        required=False,
        help_text="the highest scenario rating the library shows you (everyone < teen < mature)",
    )

    persona_name = strict.TextField(
        max_length=100, allow_blank=True, required=False, help_text="your name in stories: {{user}} in a card"
    )
    persona_pronouns = strict.TextField(max_length=40, allow_blank=True, required=False)
    persona_description = strict.TextField(
        max_length=LONG_TEXT_MAX,
        allow_blank=True,
        required=False,
        help_text="who you are in stories; an adventure may have its own persona instead",
    )

    class Meta:
        model = AISettings
        # the settings a player changes are ai_settings.SETTINGS_FIELDS: one list, here and in the update
        fields = [
            "endpoint_url",
            "api_key",
            "has_api_key",
            "api_key_last4",
            "api_key_cleared",
            *(name for name in ai_settings.SETTINGS_FIELDS if name != "endpoint_url"),
            "preset",
            "updated_at",
        ]
        read_only_fields = ["updated_at"]

    def get_api_key_cleared(self, obj) -> bool:
        return bool(getattr(obj, "api_key_cleared", False))

    def validate(self, attrs):
        preset = attrs.pop("preset", None)
        if preset is not None:
            attrs = {**sampling.PRESETS[preset], **attrs}
        return attrs

    def validate_endpoint_url(self, value):
        if value:
            try:
                check_url_shape(value)
            except EndpointRefused as exc:
                raise serializers.ValidationError(str(exc)) from None
        return value


class TypedConnectionSerializer(serializers.Serializer):
    """What the Settings form holds before it is saved; a field not sent is the stored one."""

    endpoint_url = strict.TextField(max_length=500, required=False, allow_blank=True)
    api_key = strict.TextField(max_length=500, required=False, allow_blank=True, write_only=True)
    model = strict.TextField(max_length=200, required=False, allow_blank=True)

    def validate_endpoint_url(self, value):
        if value:
            try:
                check_url_shape(value)
            except EndpointRefused as exc:
                raise serializers.ValidationError(str(exc)) from None
        return value


class PresetSerializer(serializers.Serializer):
    name = strict.TextField()
    note = strict.TextField()
    values = serializers.DictField(help_text="the settings the preset sets (null: not sent)")


class PresetsSerializer(serializers.Serializer):
    presets = PresetSerializer(many=True, help_text="the named presets (a fixed, short list)")


class DemoModelSerializer(serializers.Serializer):
    available = serializers.BooleanField(help_text="the site has a demo model for players without their own")
    local = serializers.BooleanField(help_text="it is the small local model `make run` starts")
    state = serializers.ChoiceField(
        choices=["starting", "preparing", "loading", "ready", "failed"],
        allow_null=True,
        help_text="the local model's state (null for another demo model): preparing is its first-run build",
    )
    message = strict.TextField(help_text="one sentence for the player: when it plays")


class ModelListSerializer(serializers.Serializer):
    models = serializers.ListField(child=strict.TextField(), help_text="the ids the endpoint lists, sorted")


class TestConnectionResultSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    model = strict.TextField()
    latency_ms = serializers.IntegerField()
    reply = strict.TextField()


class ProviderCallSerializer(strict.StrictModelSerializer):
    class Meta:
        model = ProviderCall
        fields = [
            "id",
            "created_at",
            "purpose",
            "adventure",
            "endpoint_host",
            "model",
            "prompt_tokens",
            "completion_tokens",
            "cached_tokens",
            "latency_ms",
            "outcome",
            "error",
            "demo",
        ]
