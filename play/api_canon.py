"""The canon's HTTP edge: the versions of an adventure's texts (the plot essentials, the author's
note) and of its story cards, each hanging off the story node it was made at (memory.story.canon)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from config import paging
from config import serializer_fields as strict
from config.errors import NotFound
from config.serializer_fields import valid
from memory.story import canon
from play.api_support import adventure_for as _adventure
from play.serializers import CardSerializer


class _Placed(serializers.Serializer):
    """Where a version hangs and whether it stands (a text's or a card's)."""

    id = serializers.IntegerField()
    action = serializers.IntegerField(allow_null=True, help_text="the story node it hangs off; null: none")
    depth = serializers.IntegerField(
        allow_null=True, help_text="its node's depth: 0 before the story; null: its node was undone away"
    )
    on_path = serializers.BooleanField(help_text="true on the path being played")
    told = serializers.BooleanField(help_text="the version that stands (and is told) now")
    created_at = serializers.DateTimeField()


class CanonVersionSerializer(_Placed):
    text = strict.TextField()


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


class CardVersionSerializer(_Placed):
    fields = serializers.DictField(help_text="the card's fields in this version (as the cards' API answers them)")
    deleted = serializers.BooleanField(help_text="this version removes the card from its node on")


class CardHistoryView(APIView):
    @extend_schema(
        responses=CardVersionSerializer(many=True),
        parameters=paging.parameters(),
        tags=["cards"],
        summary="Every version of a story card, on every branch",
        description="Newest first: each change hangs off the story node it was made at and holds down the paths "
        "through it; a card absent from the branch played (made on another, or deleted here) is listed too. "
        "POST .../restore/ with a version brings it back at the node played.",
    )
    def get(self, request, adventure_id, card_id):
        adventure = _adventure(request, adventure_id)
        return paging.page(request, canon.card_history(adventure=adventure, card_id=card_id), CardVersionSerializer)


class _RestoreBody(serializers.Serializer):
    version = strict.IntegerField(
        min_value=1, max_value=2**63 - 1, help_text="the id of the version to bring back (from its history)"
    )


class CardRestoreView(APIView):
    @extend_schema(
        request=_RestoreBody,
        responses={200: CardSerializer},
        tags=["cards"],
        summary="Bring a card's version back",
        description="The version (any branch's, a deleted card's too) holds again from the node played down its paths.",
    )
    def post(self, request, adventure_id, card_id):
        adventure = _adventure(request, adventure_id)
        canon.card_of(adventure=adventure, card_id=card_id)  # another's card is a 404 whatever the body
        version = valid(_RestoreBody, request)["version"]
        card = canon.card_restore(adventure=adventure, card_id=card_id, version_id=version)
        return Response(CardSerializer(card).data)
