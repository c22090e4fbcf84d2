"""The adventure API: adventures (list, create, change, delete, export,
import) and their story cards. Every adventure id goes through
access_adventure (another user's id is a 404)."""

from __future__ import annotations

import json
import re

from django.db import transaction
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from config import paging
from config import serializer_fields as strict
from config.errors import InvalidRequest
from config.input_guard import StrictJSONParser
from config.serializer_fields import valid as _valid
from memory.story import canon
from play import changes, imports
from play import serializers as s
from play.api_claims import CardCanonSerializer, cards_context
from play.api_support import adventure_for as _adventure
from stories import adventures, cards
from stories.library import aidungeon, character_cards, lorebooks, story_files
from stories.models import Adventure, ImportJob, StoryCard
from stories.tree import writes


class AdventureListView(APIView):
    @extend_schema(responses=s.AdventureSerializer(many=True), parameters=paging.parameters(), tags=["adventures"])
    def get(self, request):
        qs = (
            Adventure.objects.filter(owner=request.user, hidden=False)
            .select_related("head_branch")
            .order_by("-updated_at", "-id")
        )
        return paging.page(request, qs, s.AdventureSerializer)

    @extend_schema(request=s.AdventureSerializer, responses={201: s.AdventureSerializer}, tags=["adventures"])
    def post(self, request):
        adventure = changes.adventure_create(owner_id=request.user.id, **_valid(s.AdventureSerializer, request))
        return Response(s.AdventureSerializer(adventure).data, status=201)


class AdventureDetailView(APIView):
    @extend_schema(responses=s.AdventureSerializer, tags=["adventures"])
    def get(self, request, adventure_id):
        return Response(s.AdventureSerializer(_adventure(request, adventure_id)).data)

    @extend_schema(request=s.AdventureUpdateSerializer, responses=s.AdventureSerializer, tags=["adventures"])
    def patch(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        adventure = changes.adventure_update(
            adventure=adventure, **_valid(s.AdventureUpdateSerializer, request, partial=True)
        )
        return Response(s.AdventureSerializer(adventure).data)

    @extend_schema(responses={204: None}, tags=["adventures"])
    def delete(self, request, adventure_id):
        writes.adventure_delete(adventure_id=_adventure(request, adventure_id).pk)
        return Response(status=204)


class AdventureExportView(APIView):
    @extend_schema(
        responses={200: inline_serializer("AdventureExport", {"format": strict.TextField()})}, tags=["adventures"]
    )
    def get(self, request, adventure_id):
        return Response(changes.adventure_export(adventure=_adventure(request, adventure_id)))


class ImportJobSerializer(serializers.Serializer):
    """An import job as the player sees it (play.imports.job_state)."""

    id = serializers.IntegerField()
    status = serializers.ChoiceField(
        choices=["queued", "running", "retrying", "done", "failed"],
        help_text=(
            "queued: waiting for a worker; running: being imported (see progress); retrying: the worker importing "
            "it stopped and it is sent again shortly (see note); done: adventure_id is the new adventure; failed: "
            "error is the answer the document earned (nothing was stored)"
        ),
    )
    title = serializers.CharField()
    rows = serializers.IntegerField(help_text="branches, actions, cards and memories the document holds")
    progress = inline_serializer(
        "ImportProgress",
        {
            "stage": serializers.ChoiceField(choices=["checking", "story", "memories", "summary", "done"]),
            "done": serializers.IntegerField(),
            "total": serializers.IntegerField(),
        },
        allow_null=True,
    )
    note = serializers.CharField(allow_blank=True, help_text="what is happening to it, when a status needs a word")
    adventure_id = serializers.IntegerField(allow_null=True)
    error = inline_serializer(
        "ImportError", {"detail": serializers.CharField(), "error": serializers.CharField()}, allow_null=True
    )
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


class _JobRows(serializers.BaseSerializer):
    """A page of jobs, each as ``ImportJobSerializer`` shows it."""

    def to_representation(self, job):
        return ImportJobSerializer(imports.job_state(job)).data


def _job_answer(job, status=200) -> Response:
    body = imports.job_state(job)
    headers = {"Location": f"/api/imports/{job.pk}/"} if status == 202 else None
    return Response(ImportJobSerializer(body).data, status=status, headers=headers)


_REPORT = inline_serializer(
    "ImportReportLine",
    {"place": strict.TextField(help_text="where in the file"), "what": strict.TextField()},
    many=True,
)
_UPLOAD = inline_serializer("CardFileUpload", {"file": serializers.FileField(help_text="a PNG or JSON file")})
_UPLOAD_STORY = inline_serializer(
    "StoryFileUpload", {"file": serializers.FileField(help_text="a .story or .json file")}
)


class AdventureImportView(APIView):
    @extend_schema(
        request=inline_serializer(
            "AdventureImport",
            {
                "format": strict.ChoiceField(
                    choices=[adventures.EXPORT_FORMAT], help_text="an export of this site, as GET .../export/ gives"
                )
            },
        ),
        responses={202: ImportJobSerializer},
        tags=["adventures"],
        description=(
            "Import an export as a new adventure. Answers 202 with a job: done already for a small "
            "document (an invalid one is a 400 at once), queued for a worker otherwise; poll "
            "GET /api/imports/{id}/ (its Location) until it is done or failed."
        ),
    )
    def post(self, request):
        return _job_answer(imports.import_start(owner_id=request.user.id, data=request.data), status=202)


class StoryFileImportView(APIView):
    parser_classes = [StrictJSONParser, MultiPartParser]

    @extend_schema(
        request={"application/json": OpenApiTypes.OBJECT, "multipart/form-data": _UPLOAD_STORY},
        responses={202: inline_serializer("StoryFileImport", {"job": ImportJobSerializer(), "report": _REPORT})},
        tags=["adventures"],
        summary="Import a story from NovelAI or KoboldAI",
        description="A NovelAI .story file or a KoboldAI story (JSON or an uploaded file) as a new adventure: "
        "its text the story, its memory the plot essentials, its author's note, its lorebook or world info the "
        "story cards. Imported as an export of this site is (the same job: poll GET /api/imports/{id}/); "
        "`report` says what was carried where and what has no place here.",
    )
    def post(self, request):
        document, report = story_files.story_document(lorebooks.read_document(request))
        job = imports.import_start(owner_id=request.user.id, data=document)
        return Response(
            {"job": ImportJobSerializer(imports.job_state(job)).data, "report": report},
            status=202,
            headers={"Location": f"/api/imports/{job.pk}/"},
        )


class ImportListView(APIView):
    @extend_schema(responses=ImportJobSerializer(many=True), parameters=paging.parameters(), tags=["adventures"])
    def get(self, request):
        jobs = ImportJob.objects.defer("document").filter(owner_id=request.user.id).order_by("-created_at", "-id")
        return paging.page(request, jobs, _JobRows)


class ImportDetailView(APIView):
    @extend_schema(responses=ImportJobSerializer, tags=["adventures"])
    def get(self, request, job_id):
        return _job_answer(imports.access_job(user_id=request.user.id, job_id=job_id))


# ---------------------------------------------------------------------------- cards


class _CardListQuery(serializers.Serializer):
    every = serializers.BooleanField(  # a query's text: "true"
        required=False, default=False, help_text="true: the cards of every branch too (present says which are here)"
    )


class CardListView(APIView):
    @extend_schema(
        responses=CardCanonSerializer(many=True), parameters=[*paging.parameters(), _CardListQuery], tags=["cards"]
    )
    def get(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        every = _CardListQuery(data={"every": request.query_params.get("every", "false")})
        every.is_valid(raise_exception=True)
        rows = (StoryCard.every if every.validated_data["every"] else StoryCard.objects).filter(adventure=adventure)
        context = cards_context(adventure, list(rows.values_list("pk", flat=True)))
        return paging.page(request, rows.order_by("id"), CardCanonSerializer, context=context)

    @extend_schema(request=s.CardInputSerializer, responses={201: s.CardSerializer}, tags=["cards"])
    def post(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        card = canon.card_create(adventure=adventure, **_valid(s.CardInputSerializer, request))
        return Response(s.CardSerializer(card).data, status=201)


def _card(adventure: Adventure, card_id: int) -> StoryCard:
    return cards.access_card(adventure=adventure, card_id=card_id)


class CardDetailView(APIView):
    @extend_schema(responses=s.CardSerializer, tags=["cards"])
    def get(self, request, adventure_id, card_id):
        return Response(s.CardSerializer(_card(_adventure(request, adventure_id), card_id)).data)

    @extend_schema(request=s.CardInputSerializer, responses=s.CardSerializer, tags=["cards"])
    def patch(self, request, adventure_id, card_id):
        card = _card(_adventure(request, adventure_id), card_id)
        card = canon.card_update(card=card, **_valid(s.CardInputSerializer, request, partial=True))
        return Response(s.CardSerializer(card).data)

    @extend_schema(responses={204: None}, tags=["cards"])
    def delete(self, request, adventure_id, card_id):
        canon.card_delete(card=_card(_adventure(request, adventure_id), card_id))
        return Response(status=204)


class CardImportView(APIView):
    @extend_schema(request=s.AIDungeonCardsSerializer, responses={201: s.CardSerializer(many=True)}, tags=["cards"])
    def post(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        with transaction.atomic():
            created = aidungeon.import_aidungeon(adventure=adventure, data=request.data)
            canon.cards_created(adventure=adventure, made=created)
        return Response(s.CardSerializer(created, many=True).data, status=201)


class BookImportView(APIView):
    parser_classes = [StrictJSONParser, MultiPartParser]

    @extend_schema(
        request={"application/json": OpenApiTypes.OBJECT, "multipart/form-data": _UPLOAD},
        responses={201: inline_serializer("BookImport", {"cards": s.CardSerializer(many=True), "report": _REPORT})},
        tags=["cards"],
        summary="Import a lorebook as story cards",
        description="A SillyTavern lorebook (World Info), a NovelAI lorebook, a character card's book (JSON or "
        "PNG) or AI Dungeon's story cards, as JSON or an uploaded file. All or nothing; always-on entries go "
        "to the plot essentials; `report` says what was carried where and what has no equivalent here.",
    )
    def post(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        data = lorebooks.read_document(request)
        with transaction.atomic():
            made, report = lorebooks.import_cards(
                adventure=adventure,
                data=data,
                plot_writer=lambda plot: changes.adventure_update(adventure=adventure, plot_essentials=plot),
            )
            canon.cards_created(adventure=adventure, made=made)
        return Response({"cards": s.CardSerializer(made, many=True).data, "report": report}, status=201)


class _CharacterImportQuery(serializers.Serializer):
    persona_name = strict.TextField(
        max_length=100,
        required=False,
        allow_blank=True,
        help_text="your name in this story: what the card's {{user}} becomes (else your persona's name; a card "
        "that names you with neither answers 400 persona_needed)",
    )
    greeting = serializers.IntegerField(  # a query's text: "2"
        min_value=0,
        max_value=1000,
        required=False,
        default=0,
        help_text="the greeting the story opens with: 0 the card's first message, 1 and on its alternate greetings",
    )
    preview = serializers.BooleanField(  # a query's text: "true"
        required=False,
        default=False,
        help_text="true: start nothing; answer the card's name, its greetings (to choose one) and whether your "
        "name is needed",
    )


class CharacterImportView(APIView):
    parser_classes = [StrictJSONParser, MultiPartParser]

    @extend_schema(
        parameters=[_CharacterImportQuery],
        request={"application/json": OpenApiTypes.OBJECT, "multipart/form-data": _UPLOAD},
        responses={
            201: inline_serializer("CharacterImport", {"adventure": s.AdventureSerializer(), "report": _REPORT}),
            200: inline_serializer(
                "CharacterPreview",
                {
                    "name": strict.TextField(),
                    "greetings": serializers.ListField(child=strict.TextField(), help_text="0: its first message"),
                    "persona_needed": serializers.BooleanField(help_text="the card names you: send persona_name"),
                },
            ),
        },
        tags=["adventures"],
        summary="Start an adventure from a character card",
        description="A SillyTavern character card (V1, V2 or V3; JSON, or a PNG carrying it): the greeting "
        "chosen (`greeting`) is the opening, the description and scenario the plot essentials, the character a "
        "card of the cast (with its example dialogue), its book the story cards. `report` says what was carried "
        "where and what was not. With `preview=true` nothing is started: 200 with the card's greetings.",
    )
    def post(self, request):
        query = _valid(_CharacterImportQuery, request, query=True)
        persona = query.get("persona_name")
        data = lorebooks.read_document(request)
        if query["preview"]:
            return Response(character_cards.card_preview(owner_id=request.user.id, data=data, persona_name=persona))
        adventure, report = character_cards.adventure_from_card(
            owner_id=request.user.id, data=data, persona_name=persona, greeting=query["greeting"]
        )
        return Response({"adventure": s.AdventureSerializer(adventure).data, "report": report}, status=201)


class _CardExportQuery(serializers.Serializer):
    type = strict.ChoiceField(choices=["ai-dungeon", "sillytavern"], required=False, default="ai-dungeon")


class CardExportView(APIView):
    @extend_schema(
        parameters=[_CardExportQuery],
        responses={
            200: {
                "oneOf": [
                    {
                        "type": "array",
                        "description": "type=ai-dungeon: AI Dungeon's story cards",
                        "items": {
                            "type": "object",
                            "properties": {"keys": {"type": "string"}, "value": {"type": "string"}},
                        },
                    },
                    {
                        "type": "object",
                        "description": "type=sillytavern: a SillyTavern lorebook (World Info)",
                        "properties": {"name": {"type": "string"}, "entries": {"type": "object"}},
                        "required": ["entries"],
                    },
                ]
            }
        },
        tags=["cards"],
        summary="Export the cards (AI Dungeon story cards, or a SillyTavern lorebook)",
    )
    def get(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        if _valid(_CardExportQuery, request, query=True)["type"] == "sillytavern":
            return Response(lorebooks.export_sillytavern(adventure=adventure))
        return Response(aidungeon.export_aidungeon(adventure=adventure))


class _CharacterExportQuery(serializers.Serializer):
    # not "format": DRF reads that one as a renderer to answer with
    file = strict.ChoiceField(choices=["png", "json"], required=False, default="png", help_text="the file's kind")
    spec = strict.ChoiceField(
        choices=["v3", "v2"], required=False, default="v3", help_text="json: the card's version (a PNG carries both)"
    )


class CharacterExportView(APIView):
    @extend_schema(
        parameters=[_CharacterExportQuery],
        responses={
            (200, "image/png"): OpenApiTypes.BINARY,
            (200, "application/json"): OpenApiTypes.OBJECT,
        },
        tags=["cards"],
        summary="Export a character as a SillyTavern character card",
        description="A character card of this adventure as a SillyTavern card: a PNG carrying it as SillyTavern "
        "writes one (V2 in its `chara` chunk, V3 in `ccv3`), or JSON (`spec` v3 or v2). Its entry is the "
        "description, its example dialogue the card's, the adventure's other cards its character book.",
    )
    def get(self, request, adventure_id, card_id):
        adventure = _adventure(request, adventure_id)
        card = _card(adventure, card_id)
        query = _valid(_CharacterExportQuery, request, query=True)
        if card.type != StoryCard.Type.CHARACTER:
            raise InvalidRequest("only a character card leaves as a character card (this card's type is not character)")
        name = re.sub(r"[^\w.-]+", "_", card.name).strip("_") or "character"
        if query["file"] == "json":
            doc = character_cards.character_card(adventure=adventure, card=card, spec=query["spec"])
            response = HttpResponse(json.dumps(doc, ensure_ascii=False), content_type="application/json")
            response["Content-Disposition"] = f'attachment; filename="{name}.json"'
            return response
        response = HttpResponse(character_cards.character_png(adventure=adventure, card=card), content_type="image/png")
        response["Content-Disposition"] = f'attachment; filename="{name}.png"'
        return response
