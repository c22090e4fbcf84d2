from rest_framework import serializers

from config import serializer_fields as strict
from memory.models import MEMORY_TEXT_MAX, Memory
from stories.models import LONG_TEXT_MAX


class MemorySerializer(strict.StrictModelSerializer):
    hand_written = serializers.BooleanField(read_only=True)
    embedded = serializers.SerializerMethodField()

    class Meta:
        model = Memory
        fields = [
            "id",
            "text",
            "character",
            "kind",
            "importance",
            "branch",
            "depth",
            "source_start",
            "source_end",
            "hand_written",
            "pinned",
            "forgotten",
            "stale",
            "edited",
            "offline",
            "embedded",
            "embedding_model",
            "use_count",
            "last_used_at",
            "created_at",
        ]
        extra_kwargs = {
            "character": {"help_text": "the character card whose memory this is; null: the adventure's own"},
            "kind": {"help_text": "a character's memory: say, heard, interaction, witnessed or note"},
        }

    def get_embedded(self, obj) -> bool:
        return obj.embedding_model != ""


class MemoryCreateSerializer(serializers.Serializer):
    text = strict.TextField(max_length=MEMORY_TEXT_MAX)
    character = strict.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=strict.ID_MAX,
        help_text="a character card's id: the memory is that character's",
    )


class CastMemberSerializer(serializers.Serializer):
    character = serializers.IntegerField(allow_null=True, help_text="the card's id; null for the protagonist")
    name = serializers.CharField()
    protagonist = serializers.BooleanField(help_text="the protagonist's memory is the adventure's own bank")
    in_cast = serializers.BooleanField(help_text="keeps memories of the scenes it is in (set on the card)")
    memories = serializers.IntegerField(help_text="memories held on the current path, forgotten ones left out")


class MemoryPatchSerializer(serializers.Serializer):
    text = strict.TextField(max_length=MEMORY_TEXT_MAX, required=False)
    pinned = strict.BooleanField(required=False)
    forgotten = strict.BooleanField(required=False)


class SummarySerializer(serializers.Serializer):
    story_summary = strict.TextField(max_length=LONG_TEXT_MAX, allow_blank=True)
    auto_summarize = serializers.BooleanField(read_only=True)
    summary_depth = serializers.IntegerField(read_only=True)
    memory_depth = serializers.IntegerField(read_only=True)
    catching_up = serializers.BooleanField(read_only=True, help_text="the background pass is behind the story")


class RunQueuedSerializer(serializers.Serializer):
    queued = serializers.BooleanField()
