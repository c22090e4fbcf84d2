"""The memory bank and story summary API: parse, call memory.story.memories, serialize."""

from __future__ import annotations

from django.db.models import Case, Value, When
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from config import paging
from config.errors import InvalidRequest
from config.serializer_fields import valid as _valid
from memory.story import marks, memories
from memory.story import serializers as s
from stories.adventures import access_adventure
from stories.models import Adventure
from stories.serializers import ActionSerializer


def _adventure(request, adventure_id):
    """The request user's adventure (another user's id is a 404)."""
    return access_adventure(user_id=request.user.id, adventure_id=adventure_id)


CHARACTER_PARAMETER = OpenApiParameter(
    "character", int, description="a character card's id: that character's memories (default: the adventure's own)"
)


def _character(adventure, raw):
    """The character card a request names (``?character=`` or a body field), or None."""
    if raw in (None, ""):
        return None
    try:
        card_id = int(raw)
    except (TypeError, ValueError):
        raise InvalidRequest("character must be a character card's id (an integer)") from None
    return memories.access_character(adventure=adventure, card_id=card_id)


class MemoryListView(APIView):
    @extend_schema(
        responses=s.MemorySerializer(many=True), parameters=[CHARACTER_PARAMETER, *paging.parameters()], tags=["memory"]
    )
    def get(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        character = _character(adventure, request.query_params.get("character"))
        return paging.page(request, memories.bank_list(adventure=adventure, character=character), s.MemorySerializer)

    @extend_schema(request=s.MemoryCreateSerializer, responses={201: s.MemorySerializer}, tags=["memory"])
    def post(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        data = _valid(s.MemoryCreateSerializer, request)
        memory = memories.memory_write(
            adventure=adventure, text=data["text"].strip(), character=_character(adventure, data.get("character"))
        )
        return Response(s.MemorySerializer(memory).data, status=201)


class CastView(APIView):
    @extend_schema(responses=s.CastMemberSerializer(many=True), tags=["memory"])
    def get(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        return Response(s.CastMemberSerializer(memories.cast_list(adventure=adventure), many=True).data)


class MemoryDetailView(APIView):
    @extend_schema(responses=s.MemorySerializer, tags=["memory"])
    def get(self, request, adventure_id, memory_id):
        memory = memories.access_memory(adventure=_adventure(request, adventure_id), memory_id=memory_id)
        return Response(s.MemorySerializer(memory).data)

    @extend_schema(request=s.MemoryPatchSerializer, responses=s.MemorySerializer, tags=["memory"])
    def patch(self, request, adventure_id, memory_id):
        adventure = _adventure(request, adventure_id)
        memory = memories.access_memory(adventure=adventure, memory_id=memory_id)
        data = _valid(s.MemoryPatchSerializer, request)
        if "text" in data:
            data["text"] = data["text"].strip()
        memory = memories.memory_update(memory=memory, **data)
        return Response(s.MemorySerializer(memory).data)

    @extend_schema(responses={204: None}, tags=["memory"])
    def delete(self, request, adventure_id, memory_id):
        memories.memory_delete(
            memory=memories.access_memory(adventure=_adventure(request, adventure_id), memory_id=memory_id)
        )
        return Response(status=204)


class MemorySourceView(APIView):
    @extend_schema(responses=ActionSerializer(many=True), tags=["memory"])
    def get(self, request, adventure_id, memory_id):
        memory = memories.access_memory(adventure=_adventure(request, adventure_id), memory_id=memory_id)
        return Response(ActionSerializer(memories.memory_source(memory=memory), many=True).data)


class MemoryRegenerateView(APIView):
    @extend_schema(request=None, responses=s.MemorySerializer, tags=["memory"])
    def post(self, request, adventure_id, memory_id):
        adventure = _adventure(request, adventure_id)
        memory = memories.access_memory(adventure=adventure, memory_id=memory_id)
        memory = memories.memory_regenerate(adventure=adventure, memory=memory)
        return Response(s.MemorySerializer(memory).data)


class MemoryRunView(APIView):
    @extend_schema(request=None, responses={202: s.RunQueuedSerializer}, tags=["memory"])
    def post(self, request, adventure_id):
        memories.memory_pass_request(adventure=_adventure(request, adventure_id))
        return Response(s.RunQueuedSerializer({"queued": True}).data, status=202)


def _summary(adventure) -> dict:
    """The summary and how far the pass has come; ``catching_up`` by the pass's own rule (marks.MEMORIES_DUE)."""
    row = (
        marks.with_marks(Adventure.objects.filter(pk=adventure.pk))
        .annotate(catching_up=Case(When(marks.MEMORIES_DUE, then=Value(True)), default=Value(False)))
        .values("summ", "mem", "catching_up")
        .get()
    )
    return {
        "story_summary": adventure.story_summary,
        "auto_summarize": adventure.auto_summarize,
        "summary_depth": row["summ"],
        "memory_depth": row["mem"],
        "catching_up": row["catching_up"],
    }


class SummaryView(APIView):
    @extend_schema(responses=s.SummarySerializer, tags=["memory"])
    def get(self, request, adventure_id):
        return Response(s.SummarySerializer(_summary(_adventure(request, adventure_id))).data)

    @extend_schema(request=s.SummarySerializer, responses=s.SummarySerializer, tags=["memory"])
    def put(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        text = _valid(s.SummarySerializer, request)["story_summary"].strip()
        return Response(s.SummarySerializer(_summary(memories.summary_set(adventure=adventure, text=text))).data)


class SummaryRegenerateView(APIView):
    @extend_schema(request=None, responses=s.SummarySerializer, tags=["memory"])
    def post(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        return Response(s.SummarySerializer(_summary(memories.summary_regenerate(adventure=adventure))).data)
