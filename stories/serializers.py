"""The one shape of a story node in answers, shared by the story's and memory's edges."""

from __future__ import annotations

from rest_framework import serializers

from config import serializer_fields as strict
from stories.models import Action
from stories.party import secrets


class ActionSerializer(strict.StrictModelSerializer):
    take_count = serializers.SerializerMethodField()
    told_to = serializers.SerializerMethodField(
        help_text='a secret (shown only to those it was told to): "told privately" or "whispered to Mira"; '
        "blank: told to everyone"
    )

    class Meta:
        model = Action
        fields = [
            "id",
            "branch",
            "depth",
            "kind",
            "text",
            "live",
            "created_at",
            "edited_at",
            "take_count",
            "actor",
            "told_to",
        ]
        read_only_fields = ["actor"]  # a member's turn: the character it acts as (stories.party); else ""

    def get_told_to(self, obj) -> str:
        return secrets.told_to(obj)

    def get_take_count(self, obj) -> int:
        return self.context.get("take_counts", {}).get((obj.branch_id, obj.depth), 1)
