"""The world API: owners manage worlds and tokens with their account; agents use
a world token (``Authorization: Bearer wt_...``), which reaches only its world."""

from __future__ import annotations

from django.contrib.postgres.search import SearchQuery
from django.db.models import Count, Q
from django.http import StreamingHttpResponse
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.response import Response
from rest_framework.views import APIView

from config import paging, search_text
from config import serializer_fields as strict
from config.errors import InvalidRequest, NotFound
from config.serializer_fields import valid as _valid
from memory.agents import agent_events, agent_recall_asked, world_export, worlds
from memory.agents import agent_serializers as s
from memory.agents.agent_auth import WorldTokenAuthentication
from memory.models import Agent, AgentMemory, World, WorldToken
from stories import limits
from stories.accounts.auth import TokenAuthentication

MEMORY_PAGE_MAX = 200


class WorldView(APIView):
    """Base: accepts world tokens as well as the owner's own credentials."""

    authentication_classes = [WorldTokenAuthentication, TokenAuthentication, SessionAuthentication]

    def world(self, request, world_id) -> World:
        token = request.auth if isinstance(request.auth, WorldToken) else None
        return worlds.access_world(user_id=request.user.id, token=token, world_id=world_id)

    def token(self, request) -> WorldToken | None:
        return request.auth if isinstance(request.auth, WorldToken) else None

    def owner_only(self, request):
        if isinstance(request.auth, WorldToken):
            raise NotFound()  # tokens cannot manage worlds or tokens


class WorldListView(WorldView):
    @extend_schema(responses=s.WorldSerializer(many=True), parameters=paging.parameters(), tags=["worlds"])
    def get(self, request):
        self.owner_only(request)
        return paging.page(request, World.objects.filter(owner=request.user).order_by("id"), s.WorldSerializer)

    @extend_schema(request=s.WorldSerializer, responses={201: s.WorldSerializer}, tags=["worlds"])
    def post(self, request):
        self.owner_only(request)
        data = _valid(s.WorldSerializer, request)
        world = worlds.world_create(owner_id=request.user.id, **data)
        return Response(s.WorldSerializer(world).data, status=201)


class WorldDetailView(WorldView):
    @extend_schema(responses=s.WorldSerializer, tags=["worlds"])
    def get(self, request, world_id):
        return Response(s.WorldSerializer(self.world(request, world_id)).data)

    @extend_schema(request=s.WorldSerializer, responses=s.WorldSerializer, tags=["worlds"])
    def patch(self, request, world_id):
        self.owner_only(request)
        world = self.world(request, world_id)
        world = worlds.world_update(world=world, **_valid(s.WorldSerializer, request, partial=True))
        return Response(s.WorldSerializer(world).data)

    @extend_schema(responses={204: None}, tags=["worlds"])
    def delete(self, request, world_id):
        self.owner_only(request)
        worlds.world_delete(world=self.world(request, world_id))
        return Response(status=204)


class TokenListView(WorldView):
    @extend_schema(responses=s.WorldTokenSerializer(many=True), parameters=paging.parameters(), tags=["worlds"])
    def get(self, request, world_id):
        self.owner_only(request)
        world = self.world(request, world_id)
        return paging.page(request, world.tokens.order_by("id"), s.WorldTokenSerializer)

    @extend_schema(request=s.NewTokenSerializer, responses={201: s.CreatedTokenSerializer}, tags=["worlds"])
    def post(self, request, world_id):
        self.owner_only(request)
        world = self.world(request, world_id)
        token, raw = worlds.token_create(world=world, name=_valid(s.NewTokenSerializer, request)["name"])
        return Response({**s.WorldTokenSerializer(token).data, "token": raw}, status=201)


class TokenDetailView(WorldView):
    @extend_schema(responses={204: None}, tags=["worlds"], description="Revoke the token (it stops working at once).")
    def delete(self, request, world_id, token_id):
        self.owner_only(request)
        worlds.token_revoke(world=self.world(request, world_id), token_id=token_id)
        return Response(status=204)


class EventsView(WorldView):
    @extend_schema(
        request=s.EventBatchSerializer,
        responses={
            201: inline_serializer(
                "EventsRecorded", {"memories": serializers.IntegerField(), "agents": serializers.ListField()}
            )
        },
        tags=["worlds"],
        description='One event, or {"events": [...]} for a batch. Unknown agents are created on first use. '
        "All or nothing: one bad event writes nothing.",
    )
    def post(self, request, world_id):
        world = self.world(request, world_id)
        if isinstance(request.data, dict) and "events" in request.data:
            events = _valid(s.EventBatchSerializer, request)["events"]
        else:
            events = [_valid(s.EventSerializer, request)]
        agent_events.events_allowance(world=world, token=self.token(request), count=len(events))
        created = agent_events.events_record(world=world, events=[agent_events.Event(**e) for e in events])
        touched = sorted({m.agent_id for m in created})
        names = sorted(Agent.objects.filter(pk__in=touched).values_list("external_id", flat=True))
        return Response({"memories": len(created), "agents": names}, status=201)


class AgentListView(WorldView):
    @extend_schema(responses=s.AgentSerializer(many=True), parameters=paging.parameters(), tags=["worlds"])
    def get(self, request, world_id):
        world = self.world(request, world_id)
        qs = Agent.objects.filter(world=world).annotate(memory_count=Count("memories")).order_by("external_id")
        return paging.page(request, qs, s.AgentSerializer)


class AgentDetailView(WorldView):
    @extend_schema(responses={204: None}, tags=["worlds"], description="Delete the agent with all its memories.")
    def delete(self, request, world_id, agent_id):
        world = self.world(request, world_id)
        worlds.agent_delete(agent=worlds.access_agent(world=world, external_id=agent_id))
        return Response(status=204)


class RecallView(WorldView):
    @extend_schema(
        request=s.RecallInputSerializer,
        responses={
            200: inline_serializer(
                "Recall", {"memories": serializers.ListField(child=serializers.DictField()), "text": strict.TextField()}
            )
        },
        tags=["worlds"],
    )
    def post(self, request, world_id, agent_id):
        world = self.world(request, world_id)
        agent = worlds.access_agent(world=world, external_id=agent_id)
        data = _valid(s.RecallInputSerializer, request)
        return Response(agent_recall_asked.recall_asked(world=world, agent=agent, data=data))


class _MemoryQuery(paging.query_serializer(default=50, maximum=MEMORY_PAGE_MAX)):
    q = strict.TextField(max_length=200, required=False, allow_blank=True, help_text="full-text search")
    kind = serializers.ChoiceField(choices=AgentMemory.Kind.choices, required=False)


class AgentMemoryListView(WorldView):
    @extend_schema(
        parameters=[_MemoryQuery],
        responses=s.AgentMemorySerializer(many=True),
        tags=["worlds"],
    )
    def get(self, request, world_id, agent_id):
        world = self.world(request, world_id)
        agent = worlds.access_agent(world=world, external_id=agent_id)
        params = _valid(_MemoryQuery, request, query=True)
        qs = AgentMemory.objects.filter(agent=agent).prefetch_related("keys")
        if params.get("q"):
            text = search_text.websearch(params["q"])
            words = Q(search=SearchQuery(text, config="english", search_type="websearch")) if text else Q(pk__in=[])
            qs = qs.filter(words | Q(content__icontains=params["q"]))
        if params.get("kind"):
            qs = qs.filter(kind=params["kind"])
        return paging.page(
            request, qs.order_by("-occurred_at", "-id"), s.AgentMemorySerializer, default=50, maximum=MEMORY_PAGE_MAX
        )

    @extend_schema(
        request=s.RememberSerializer,
        responses={201: s.AgentMemorySerializer},
        tags=["worlds"],
        description="The agent writes a memory of its own (a note).",
    )
    def post(self, request, world_id, agent_id):
        world = self.world(request, world_id)
        agent = worlds.access_agent(world=world, external_id=agent_id)
        data = _valid(s.RememberSerializer, request)
        agent_events.events_allowance(world=world, token=self.token(request), count=1)
        memory = agent_events.remember(world=world, agent=agent, **data)
        return Response(s.AgentMemorySerializer(memory).data, status=201)


class AgentMemoryDetailView(WorldView):
    def _memory(self, request, world_id, agent_id, memory_id) -> AgentMemory:
        world = self.world(request, world_id)
        agent = worlds.access_agent(world=world, external_id=agent_id)
        return worlds.access_agent_memory(agent=agent, memory_id=memory_id)

    @extend_schema(request=s.AgentMemoryPatchSerializer, responses=s.AgentMemorySerializer, tags=["worlds"])
    def patch(self, request, world_id, agent_id, memory_id):
        memory = self._memory(request, world_id, agent_id, memory_id)
        memory = worlds.agent_memory_update(memory=memory, **_valid(s.AgentMemoryPatchSerializer, request))
        return Response(s.AgentMemorySerializer(memory).data)

    @extend_schema(responses={204: None}, tags=["worlds"])
    def delete(self, request, world_id, agent_id, memory_id):
        worlds.agent_memory_delete(memory=self._memory(request, world_id, agent_id, memory_id))
        return Response(status=204)


EXPORT_CHUNK = 2_000  # memories read per round trip while an export streams


class WorldExportView(WorldView):
    @extend_schema(
        responses={200: inline_serializer("WorldExport", {"world": serializers.DictField()})},
        tags=["worlds"],
        description="The whole world as JSON, streamed: memory stays bounded whatever the world's size.",
    )
    def get(self, request, world_id):
        world = self.world(request, world_id)
        response = StreamingHttpResponse(
            world_export.world_export_chunks(world=world, chunk=EXPORT_CHUNK), content_type="application/json"
        )
        response["Content-Disposition"] = f'attachment; filename="world-{world.pk}.json"'
        return response


class WorldImportView(WorldView):
    @extend_schema(
        request=s.WorldImportSerializer,
        responses={
            201: inline_serializer(
                "WorldImported",
                {
                    "world": s.WorldSerializer(),
                    "agents": serializers.IntegerField(),
                    "memories": serializers.IntegerField(),
                    "keys": serializers.IntegerField(),
                },
            )
        },
        tags=["worlds"],
        description="A world's export read back into a new world of yours: its agents, their memories (links, "
        "pins, retrieval history) and fact keys; the agents' passes embed them. At most "
        f"{s.WORLD_IMPORT_MEMORIES_MAX:,} memories an import, and the account's imports an hour.",
    )
    def post(self, request):
        self.owner_only(request)
        limits.adventure_import(user_id=request.user.id)
        try:
            data = _valid(s.WorldImportSerializer, request)
        except serializers.ValidationError as exc:  # one sentence naming each place to fix
            raise InvalidRequest(f"world import: {strict.error_sentence(exc.detail)}") from None
        world, counts = world_export.world_import(owner_id=request.user.id, document=data)
        return Response({"world": s.WorldSerializer(world).data, **counts}, status=201)
