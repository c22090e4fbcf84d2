from rest_framework import serializers

from config import serializer_fields as strict
from memory.models import MEMORY_TEXT_MAX, Memory
from stories.models import LONG_TEXT_MAX


class MemorySerializer(strict.StrictModelSerializer):
    hand_written = serializers.BooleanField(read_only=True)
    embedded = serializers.SerializerMethodField()

    class Meta:
        model = Memory
        fields = ["id", "text", "branch", "depth", "source_start", "source_end", "hand_written", "pinned",
                  "forgotten", "stale", "edited", "offline", "embedded", "embedding_model", "use_count", "last_used_at",
                  "created_at"]

    def get_embedded(self, obj) -> bool:
        return obj.embedding_model != ""


class MemoryCreateSerializer(serializers.Serializer):
    text = strict.TextField(max_length=MEMORY_TEXT_MAX)


class MemoryPatchSerializer(serializers.Serializer):
    text = strict.TextField(max_length=MEMORY_TEXT_MAX, required=False)
    pinned = serializers.BooleanField(required=False)
    forgotten = serializers.BooleanField(required=False)


class SummarySerializer(serializers.Serializer):
    story_summary = strict.TextField(max_length=LONG_TEXT_MAX, allow_blank=True)
    auto_summarize = serializers.BooleanField(read_only=True)
    summary_depth = serializers.IntegerField(read_only=True)
    memory_depth = serializers.IntegerField(read_only=True)
    catching_up = serializers.BooleanField(read_only=True, help_text="the background pass is behind the story")


class RunQueuedSerializer(serializers.Serializer):
    queued = serializers.BooleanField()
