"""What the story changed on the cards, as the player reviews it (memory.story.claims and proposals):
the claims of each card in the cards' answers, the review list, accept / reject / edit of a claim,
and the new cards the story proposes."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from config import paging
from config import serializer_fields as strict
from config.serializer_fields import valid
from memory.models import CardClaim
from memory.story import claims, proposals
from play.api_support import adventure_for as _adventure
from play.serializers import CardSerializer
from stories.models import StoryCard
from stories.tree import lineage


class ClaimSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    card = serializers.IntegerField(help_text="the card it is about")
    slot = serializers.ChoiceField(choices=claims.SLOTS)
    topic = serializers.CharField(help_text="the item held or the other party (holdings, relations, alias); else empty")
    value = serializers.CharField(help_text='what it says now, e.g. "dead", "gone to Greywater"')
    text = serializers.CharField(help_text="the sentence of the story it was read from (or the player's wording)")
    evidence = serializers.IntegerField(allow_null=True, help_text="the action it was read from")
    since = serializers.IntegerField(help_text="the depth of its evidence")
    state = serializers.ChoiceField(choices=CardClaim.State.choices)
    standing = serializers.BooleanField(help_text="the newest of its card, slot and topic on this branch")
    edited = serializers.BooleanField(help_text="the player's wording: no reading replaces it")
    offline = serializers.BooleanField(help_text="read by the offline reader (no model)")


class _Brief(serializers.Serializer):
    id = serializers.IntegerField()
    depth = serializers.IntegerField(allow_null=True, help_text="its node's depth (0: before the story; null: undone)")
    deleted = serializers.BooleanField()
    on_path = serializers.BooleanField()
    told = serializers.BooleanField()


class CardCanonSerializer(CardSerializer):
    """A card with what the story changed on it on this branch and its versions in brief."""

    claims = serializers.SerializerMethodField()
    history = serializers.SerializerMethodField()

    class Meta(CardSerializer.Meta):
        fields = [*CardSerializer.Meta.fields, "claims", "history"]

    @extend_schema(exclude=True)
    def get_claims(self, card) -> list[dict]:
        return self.context.get("claims", {}).get(card.pk, [])

    @extend_schema(exclude=True)
    def get_history(self, card) -> list[dict]:
        return self.context.get("history", {}).get(card.pk, [])


def cards_context(adventure, card_ids: list[int]) -> dict:
    """The claims and histories of these cards on the branch played (two queries and one)."""
    branch = lineage.head(adventure)
    return {"claims": claims.claims_of_cards(branch, card_ids), "history": claims.card_histories(branch, card_ids)}


class _Proposed(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    type = serializers.ChoiceField(choices=StoryCard.Type.choices, help_text="guessed")
    keys = serializers.ListField(child=serializers.CharField())
    evidence = serializers.ListField(child=serializers.IntegerField(), help_text="actions naming it, oldest first")


class _Changes(serializers.Serializer):
    claims = ClaimSerializer(many=True)
    proposed_cards = _Proposed(many=True)


class ChangesView(APIView):
    @extend_schema(
        responses=_Changes,
        tags=["cards"],
        summary="What the story changed on the cards, on this branch",
        description="Claims (newest first, each with its card's name and evidence) and the new cards the story "
        "asks for (a name acting or spoken to in three blocks that has no card). Accept, reject or edit each.",
    )
    def get(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        branch = lineage.head(adventure)
        return Response({"claims": claims.changes(branch), "proposed_cards": proposals.proposed(branch)})


def _claim_answer(adventure, claim) -> Response:
    branch = lineage.head(adventure)
    found = claims.claims_of_cards(branch, [claim.card_id]).get(claim.card_id, [])
    row = next((c for c in found if c["id"] == claim.pk), None)
    if row is None:  # not on this branch (its evidence is elsewhere): as it stands in the table
        claim.refresh_from_db()
        row = claims.claim_dict(claim, standing=False) if claim.action_id else None
    return Response(row)


class ClaimAcceptView(APIView):
    @extend_schema(
        request=None,
        responses={200: ClaimSerializer},
        tags=["cards"],
        summary="Merge a claim into its card's text",
        description="The card's text gains the line (a card version from the node played); the claim is accepted.",
    )
    def post(self, request, adventure_id, claim_id):
        adventure = _adventure(request, adventure_id)
        return _claim_answer(adventure, claims.claim_accept(adventure=adventure, claim_id=claim_id))


class ClaimRejectView(APIView):
    @extend_schema(
        request=None,
        responses={200: ClaimSerializer},
        tags=["cards"],
        summary="Reject a claim",
        description="Never told, and never proposed again from the same evidence.",
    )
    def post(self, request, adventure_id, claim_id):
        adventure = _adventure(request, adventure_id)
        return _claim_answer(adventure, claims.claim_reject(adventure=adventure, claim_id=claim_id))


class _ClaimEdit(serializers.Serializer):
    value = strict.TextField(max_length=200, required=False, help_text="what it says now")
    text = strict.TextField(max_length=400, required=False, help_text="the sentence told beside it")

    def validate(self, attrs):
        if not attrs:
            raise serializers.ValidationError("send value, text or both")
        for name in ("value", "text"):
            if name in attrs and not attrs[name].strip():
                raise serializers.ValidationError({name: "must not be blank"})
        return attrs


class ClaimDetailView(APIView):
    @extend_schema(
        request=_ClaimEdit,
        responses={200: ClaimSerializer},
        tags=["cards"],
        summary="Word a claim yourself",
        description="The claim becomes yours (edited) and is told; no reading of the story replaces it.",
    )
    def patch(self, request, adventure_id, claim_id):
        adventure = _adventure(request, adventure_id)
        claims.claim_of(adventure, claim_id)  # another's claim is a 404 whatever the body
        body = valid(_ClaimEdit, request)
        return _claim_answer(adventure, claims.claim_edit(adventure=adventure, claim_id=claim_id, **body))


class _Accept(serializers.Serializer):
    type = strict.ChoiceField(choices=StoryCard.Type.choices, required=False, help_text="its type, if not the guess")


class ProposalAcceptView(APIView):
    @extend_schema(
        request=_Accept,
        responses={201: CardSerializer},
        tags=["cards"],
        summary="Make a proposed card",
        description="A card from the node played (a character joins the cast), with what the story already "
        "changed on it read from its evidence.",
    )
    def post(self, request, adventure_id, proposal_id):
        adventure = _adventure(request, adventure_id)
        proposals.proposal_of(adventure, proposal_id)
        body = valid(_Accept, request)
        card = proposals.proposal_accept(adventure=adventure, proposal_id=proposal_id, type=body.get("type"))
        return Response(CardSerializer(card).data, status=201)


class ProposedCardsView(APIView):
    @extend_schema(
        responses=_Proposed(many=True),
        parameters=paging.parameters(),
        tags=["cards"],
        summary="The new cards the story asks for, on this branch",
        description="A name acting or spoken to in three blocks of this branch that no card (nor alias) has, "
        "with its evidence. POST .../{id}/accept/ makes it a card; .../reject/ never proposes it again.",
    )
    def get(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        return paging.page(request, proposals.proposed(lineage.head(adventure)), _Proposed)


class ProposalRejectView(APIView):
    @extend_schema(request=None, responses={204: None}, tags=["cards"], summary="Never propose this name again")
    def post(self, request, adventure_id, proposal_id):
        adventure = _adventure(request, adventure_id)
        proposals.proposal_reject(adventure=adventure, proposal_id=proposal_id)
        return Response(status=204)
