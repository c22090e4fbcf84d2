"""The canon's HTTP edge: the versions of an adventure's texts (the plot essentials, the author's
note), each hanging off the story node it was made at (memory.story.canon)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.views import APIView

from config import paging
from config import serializer_fields as strict
from config.errors import NotFound
from memory.story import canon
from play.api_support import adventure_for as _adventure


class CanonVersionSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    text = strict.TextField()
    action = serializers.IntegerField(allow_null=True, help_text="the story node it hangs off; null: none")
    depth = serializers.IntegerField(
        allow_null=True, help_text="its node's depth: 0 before the story; null: its node was undone away"
    )
    on_path = serializers.BooleanField(help_text="true on the path being played (the newest of these is told)")
    told = serializers.BooleanField(help_text="the version the model is told now")
    created_at = serializers.DateTimeField()


class CanonHistoryView(APIView):
    @extend_schema(
        responses=CanonVersionSerializer(many=True),
        parameters=paging.parameters(),
        tags=["adventures"],
        summary="Every version of the plot essentials or the author's note",
        description="Newest first: each edit hangs off the story node it was made at and is true down the paths "
        "through it; a version whose node was undone away stays here (PATCH the adventure with its text to bring "
        "it back at the node being played).",
    )
    def get(self, request, adventure_id, field):
        adventure = _adventure(request, adventure_id)
        if field not in canon.FIELDS:
            raise NotFound()
        return paging.page(request, canon.history(adventure=adventure, field=field), CanonVersionSerializer)
