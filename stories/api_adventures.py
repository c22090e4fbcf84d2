"""The adventure API: adventures (list, create, change, delete, export,
import) and their story cards. Every adventure id goes through
access_adventure (another user's id is a 404)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers

from config import serializer_fields as strict
from rest_framework.response import Response
from rest_framework.views import APIView

from config import paging
from stories import adventures, cards, limits, play
from stories import serializers as s
from stories.api_support import adventure_for as _adventure
from stories.api_support import valid as _valid
from stories.models import Adventure, StoryCard


class AdventureListView(APIView):
    @extend_schema(responses=s.AdventureSerializer(many=True), parameters=paging.parameters(), tags=["adventures"])
    def get(self, request):
        qs = (Adventure.objects.filter(owner=request.user, hidden=False).select_related("head_branch")
              .order_by("-updated_at", "-id"))
        return paging.page(request, qs, s.AdventureSerializer)

    @extend_schema(request=s.AdventureSerializer, responses={201: s.AdventureSerializer}, tags=["adventures"])
    def post(self, request):
        adventure = play.adventure_create(owner_id=request.user.id, **_valid(s.AdventureSerializer, request))
        return Response(s.AdventureSerializer(adventure).data, status=201)


class AdventureDetailView(APIView):
    @extend_schema(responses=s.AdventureSerializer, tags=["adventures"])
    def get(self, request, adventure_id):
        return Response(s.AdventureSerializer(_adventure(request, adventure_id)).data)

    @extend_schema(request=s.AdventureUpdateSerializer, responses=s.AdventureSerializer, tags=["adventures"])
    def patch(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        adventure = play.adventure_update(adventure=adventure,
                                          **_valid(s.AdventureUpdateSerializer, request, partial=True))
        return Response(s.AdventureSerializer(adventure).data)

    @extend_schema(responses={204: None}, tags=["adventures"])
    def delete(self, request, adventure_id):
        adventures.adventure_delete(adventure=_adventure(request, adventure_id))
        return Response(status=204)


class AdventureExportView(APIView):
    @extend_schema(responses={200: inline_serializer("AdventureExport", {"format": strict.TextField()})},
                   tags=["adventures"])
    def get(self, request, adventure_id):
        return Response(play.adventure_export(adventure=_adventure(request, adventure_id)))


class AdventureImportView(APIView):
    @extend_schema(request=inline_serializer("AdventureImport", {"format": serializers.ChoiceField(
                       choices=[adventures.EXPORT_FORMAT], help_text="an export of this site, as GET .../export/ gives")}),
                   responses={201: s.AdventureSerializer}, tags=["adventures"])
    def post(self, request):
        limits.adventure_import(user_id=request.user.id)
        adventure = play.adventure_import(owner_id=request.user.id, data=request.data)
        return Response(s.AdventureSerializer(adventure).data, status=201)


# ---------------------------------------------------------------------------- cards


class CardListView(APIView):
    @extend_schema(responses=s.CardSerializer(many=True), parameters=paging.parameters(), tags=["cards"])
    def get(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        return paging.page(request, StoryCard.objects.filter(adventure=adventure).order_by("id"), s.CardSerializer)

    @extend_schema(request=s.CardInputSerializer, responses={201: s.CardSerializer}, tags=["cards"])
    def post(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        card = cards.card_create(adventure=adventure, **_valid(s.CardInputSerializer, request))
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
        card = cards.card_update(card=card, **_valid(s.CardInputSerializer, request, partial=True))
        return Response(s.CardSerializer(card).data)

    @extend_schema(responses={204: None}, tags=["cards"])
    def delete(self, request, adventure_id, card_id):
        cards.card_delete(card=_card(_adventure(request, adventure_id), card_id))
        return Response(status=204)


class CardImportView(APIView):
    @extend_schema(request=s.AIDungeonCardsSerializer,
                   responses={201: s.CardSerializer(many=True)}, tags=["cards"])
    def post(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        created = cards.import_aidungeon(adventure=adventure, data=request.data)
        return Response(s.CardSerializer(created, many=True).data, status=201)


class CardExportView(APIView):
    @extend_schema(responses={200: inline_serializer("AIDungeonCard", {"keys": strict.TextField(),
                                                                         "value": strict.TextField()}, many=True)},
                   tags=["cards"])
    def get(self, request, adventure_id):
        return Response(cards.export_aidungeon(adventure=_adventure(request, adventure_id)))
