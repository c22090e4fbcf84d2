from rest_framework import serializers

from config import serializer_fields as strict
from config.errors import InvalidRequest
from memory.agents import agent_events, agent_recall, fact_keys
from memory.models import AGENT_MEMORY_TEXT_MAX, Agent, AgentMemory, World, WorldToken

BUILTIN_TYPES = ("say", "interact", "observe")


class WorldSerializer(strict.StrictModelSerializer):
    agent_capacity = strict.IntegerField(min_value=10, max_value=1_000_000, required=False)

    class Meta:
        model = World
        fields = ["id", "name", "agent_capacity", "created_at"]


class WorldTokenSerializer(strict.StrictModelSerializer):
    class Meta:
        model = WorldToken
        fields = ["id", "name", "prefix", "created_at", "last_used_at", "revoked_at"]


class NewTokenSerializer(serializers.Serializer):
    name = strict.TextField(max_length=100, allow_blank=True, required=False, default="")


class CreatedTokenSerializer(WorldTokenSerializer):
    token = strict.TextField(help_text="Shown once; store it now.")

    class Meta(WorldTokenSerializer.Meta):
        fields = WorldTokenSerializer.Meta.fields + ["token"]


class EventSerializer(serializers.Serializer):
    type = strict.PatternField(
        r"^[a-z][a-z0-9_]{0,39}$", help_text="say, interact, observe, or a custom type (needs a template)"
    )
    actor = strict.TextField(max_length=100)
    target = strict.TextField(max_length=100, required=False, allow_blank=True, default="")
    location = strict.TextField(max_length=200, required=False, allow_blank=True, default="")
    text = strict.TextField(max_length=agent_events.EVENT_TEXT_MAX)
    nearby = serializers.ListField(
        child=strict.TextField(max_length=100), max_length=agent_events.NEARBY_MAX, required=False, default=list
    )
    time = strict.DateTimeField(required=False, allow_null=True, default=None)
    importance = strict.FloatField(min_value=0, max_value=1, required=False, allow_null=True, default=None)
    template = strict.TextField(
        max_length=500,
        required=False,
        allow_blank=True,
        default="",
        help_text="for custom types: text with {actor}, {target}, {location}, {text} or {type} "
        "(nothing else inside braces; {{ and }} for literal braces)",
    )
    metadata = serializers.DictField(required=False, default=dict)

    def validate_template(self, value):
        try:
            return agent_events.template_check(value)
        except InvalidRequest as exc:
            raise serializers.ValidationError(str(exc).removeprefix("template: ")) from None

    def validate(self, attrs):
        if attrs["type"] not in BUILTIN_TYPES and not attrs["template"]:
            raise serializers.ValidationError({"template": f"a custom type ({attrs['type']}) needs a template"})
        return attrs


class EventBatchSerializer(serializers.Serializer):
    events = serializers.ListField(child=EventSerializer(), min_length=1, max_length=agent_events.BATCH_MAX)


class RecallInputSerializer(serializers.Serializer):
    partner = strict.TextField(max_length=100, required=False, allow_blank=True, default="")
    location = strict.TextField(max_length=200, required=False, allow_blank=True, default="")
    query = strict.TextField(max_length=2000, required=False, allow_blank=True, default="")
    since = strict.DateTimeField(required=False, allow_null=True, default=None)
    kinds = serializers.ListField(
        child=strict.ChoiceField(choices=AgentMemory.Kind.choices), required=False, min_length=1
    )
    limit = strict.IntegerField(min_value=1, max_value=agent_recall.RECALL_LIMIT_MAX, required=False, default=3)
    token_budget = strict.IntegerField(
        min_value=16,
        max_value=100_000,
        required=False,
        allow_null=True,
        default=None,
        help_text="tokens of memories at most; default AGENT_RECALL_TOKEN_BUDGET (800)",
    )
    cooldown_seconds = strict.IntegerField(
        min_value=0,
        max_value=86_400,
        required=False,
        allow_null=True,
        default=None,
        help_text="default: the world setting",
    )


class AgentMemorySerializer(strict.StrictModelSerializer):
    keys = serializers.SerializerMethodField(
        help_text="the facts the memory states, as recall matches them (memory.agents.fact_keys); made by the "
        "agent's background pass, anew when the content changes"
    )

    class Meta:
        model = AgentMemory
        fields = [
            "id",
            "kind",
            "partner",
            "location",
            "content",
            "metadata",
            "importance",
            "pinned",
            "occurred_at",
            "created_at",
            "last_retrieved_at",
            "retrieval_count",
            "consolidated_into",
            "keys",
            "keys_made",
        ]
        read_only_fields = ["keys_made"]

    def get_keys(self, memory) -> list[str]:
        return [key.text for key in sorted(memory.keys.all(), key=lambda k: k.pk)]


class AgentMemoryPatchSerializer(serializers.Serializer):
    content = strict.TextField(max_length=AGENT_MEMORY_TEXT_MAX, required=False)
    pinned = strict.BooleanField(required=False)
    importance = strict.FloatField(min_value=0, max_value=1, required=False)


class RememberSerializer(serializers.Serializer):
    content = strict.TextField(max_length=AGENT_MEMORY_TEXT_MAX)
    partner = strict.TextField(max_length=100, required=False, allow_blank=True, default="")
    location = strict.TextField(max_length=200, required=False, allow_blank=True, default="")
    importance = strict.FloatField(min_value=0, max_value=1, required=False, default=0.7)
    pinned = strict.BooleanField(required=False, default=False)


class AgentSerializer(strict.StrictModelSerializer):
    memories = serializers.IntegerField(read_only=True, source="memory_count")

    class Meta:
        model = Agent
        fields = ["id", "external_id", "display_name", "created_at", "memories"]


# ---------------------------------------------------------------------------- a world's import (its export, read back)

# memories one import may bring, imported while the request waits (as an adventure import's rows)
WORLD_IMPORT_MEMORIES_MAX = 2_000
WORLD_IMPORT_AGENTS_MAX = 2_000


class ImportedWorldSerializer(serializers.Serializer):
    id = strict.IntegerField(
        min_value=1, max_value=2**63 - 1, required=False, help_text="the exported world's id (not kept)"
    )
    name = strict.TextField(max_length=200)
    agent_capacity = strict.IntegerField(min_value=10, max_value=1_000_000, required=False)


class ImportedMemorySerializer(serializers.Serializer):
    id = strict.IntegerField(
        min_value=1, max_value=2**63 - 1, help_text="the memory's id in the document (consolidated_into names it)"
    )
    kind = strict.ChoiceField(choices=AgentMemory.Kind.choices)
    actor = strict.TextField(max_length=100, required=False, allow_blank=True, default="")
    partner = strict.TextField(max_length=100, required=False, allow_blank=True, default="")
    location = strict.TextField(max_length=200, required=False, allow_blank=True, default="")
    content = strict.TextField(max_length=AGENT_MEMORY_TEXT_MAX)
    metadata = serializers.DictField(required=False, default=dict)
    importance = strict.FloatField(min_value=0, max_value=1, required=False, default=0.5)
    pinned = strict.BooleanField(required=False, default=False)
    occurred_at = strict.DateTimeField()
    created_at = strict.DateTimeField(required=False, allow_null=True, help_text="not kept: the import's time")
    last_retrieved_at = strict.DateTimeField(required=False, allow_null=True, default=None)
    retrieval_count = strict.IntegerField(min_value=0, max_value=2**31 - 1, required=False, default=0)
    consolidated_into = strict.IntegerField(
        min_value=1, max_value=2**63 - 1, required=False, allow_null=True, default=None
    )
    keys = serializers.ListField(
        child=strict.TextField(max_length=fact_keys.KEY_CHARS_MAX),
        max_length=fact_keys.KEYS_MAX,
        required=False,
        default=list,
    )
    keys_made = strict.ChoiceField(choices=["", "offline", "model"], required=False, default="")

    def validate_occurred_at(self, value):
        from django.utils import timezone

        if value > timezone.now() + agent_events.FUTURE_SLACK:
            raise serializers.ValidationError("this time is in the far future")
        return value


class ImportedAgentSerializer(serializers.Serializer):
    external_id = strict.TextField(max_length=100)
    display_name = strict.TextField(max_length=200, required=False, allow_blank=True, default="")
    memories = serializers.ListField(
        child=ImportedMemorySerializer(), max_length=WORLD_IMPORT_MEMORIES_MAX, required=False, default=list
    )


class WorldImportSerializer(serializers.Serializer):
    """A world's export (GET /api/worlds/<id>/export/), read back into a new world of the caller's."""

    world = ImportedWorldSerializer()
    agents = serializers.ListField(child=ImportedAgentSerializer(), max_length=WORLD_IMPORT_AGENTS_MAX)

    def validate(self, attrs):
        names = [a["external_id"] for a in attrs["agents"]]
        if len(set(names)) != len(names):
            raise serializers.ValidationError({"agents": "two agents have the same external_id"})
        memories = [m for a in attrs["agents"] for m in a["memories"]]
        if len(memories) > WORLD_IMPORT_MEMORIES_MAX:
            raise serializers.ValidationError(
                {"agents": f"{len(memories):,} memories; one import takes at most {WORLD_IMPORT_MEMORIES_MAX:,}"}
            )
        ids = [m["id"] for m in memories]
        if len(set(ids)) != len(ids):
            raise serializers.ValidationError({"agents": "two memories have the same id"})
        for agent in attrs["agents"]:
            own = {m["id"] for m in agent["memories"]}
            for m in agent["memories"]:
                if m["consolidated_into"] is not None and (
                    m["consolidated_into"] not in own or m["consolidated_into"] == m["id"]
                ):
                    raise serializers.ValidationError(
                        {
                            "agents": f"memory {m['id']} of {agent['external_id']}: consolidated_into names no "
                            "other memory of the same agent"
                        }
                    )
        return attrs
