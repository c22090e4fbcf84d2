"""Stories played together over REST (stories.party.members, play.party): the members of a story,
its invitations (by username, or a link the owner can revoke), a user's own invitations, joining
as a character, leaving and removing."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from config import paging
from config import serializer_fields as strict
from config.serializer_fields import valid
from play import live, party
from play.api_support import adventure_for as _adventure
from stories.models import Adventure
from stories.party import members, order, reports, secrets
from stories.party.models import VIEWER_ROLES, Membership, Party, Role, StoryReport, TurnMode
from stories.tree import lineage


class CharacterChoice(serializers.Serializer):
    card = strict.IntegerField(
        required=False, min_value=1, max_value=2**31 - 1, help_text="one of the story's character cards"
    )
    name = strict.TextField(required=False, max_length=100, help_text="or a new character's name")
    description = strict.TextField(required=False, allow_blank=True, max_length=2000)


class JoinSerializer(serializers.Serializer):
    character = CharacterChoice(required=False, help_text="a player's character; a watcher gives none")


class InviteCreateSerializer(serializers.Serializer):
    username = strict.TextField(required=False, max_length=150, help_text="invite this user; left out: a link")
    role = strict.ChoiceField(choices=Role.choices, required=False, default=Role.PLAYER)


class MemberChangeSerializer(serializers.Serializer):
    role = strict.ChoiceField(choices=Role.choices)
    character = strict.IntegerField(
        required=False, min_value=1, max_value=2**31 - 1, help_text="a player's character card"
    )


class _Character(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()


class MemberSerializer(serializers.Serializer):
    user_id = serializers.IntegerField()
    username = serializers.CharField()
    role = serializers.ChoiceField(choices=VIEWER_ROLES)
    character = _Character(allow_null=True)
    joined_at = serializers.DateTimeField(allow_null=True)
    here = serializers.BooleanField(required=False, help_text="the story is open live on their page now")


class StoryBriefSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    title = serializers.CharField()
    owner = serializers.CharField(help_text="the owner's username")


class UpSerializer(serializers.Serializer):
    user_id = serializers.IntegerField()
    name = serializers.CharField(help_text="the character whose turn it is")
    since = serializers.DateTimeField()
    skip_at = serializers.DateTimeField(help_text="when they are skipped if they do not play")


class MembersSerializer(serializers.Serializer):
    adventure = StoryBriefSerializer()
    you = MemberSerializer()
    players_max = serializers.IntegerField()
    turn_mode = serializers.ChoiceField(choices=TurnMode.choices)
    idle_skip_s = serializers.IntegerField()
    gather_s = serializers.IntegerField()
    gather = serializers.DictField(
        allow_null=True, help_text="gather: the open round, {waiting: [names], closes_at}; null in other modes"
    )
    up = UpSerializer(allow_null=True, help_text="round-robin: whose turn it is; null in free mode")
    members = MemberSerializer(many=True, help_text="the owner first, then the members as they joined")
    characters = serializers.ListField(
        child=serializers.CharField(), help_text="the characters a turn may be whispered to (`to` of a turn)"
    )


class PartyChangeSerializer(serializers.Serializer):
    turn_mode = strict.ChoiceField(choices=TurnMode.choices, required=False)
    idle_skip_s = strict.IntegerField(
        required=False,
        min_value=10,
        max_value=86_400,
        help_text="round-robin: seconds before an idle player is skipped",
    )
    gather_s = strict.IntegerField(
        required=False,
        min_value=15,
        max_value=3600,
        help_text="gather: seconds a round stays open after its first action before it is narrated",
    )


class JoinedSerializer(MemberSerializer):
    adventure = StoryBriefSerializer()


class InviteSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    role = serializers.ChoiceField(choices=Role.choices)
    username = serializers.CharField(allow_null=True, help_text="the user invited; null: a link")
    created_at = serializers.DateTimeField()
    token = serializers.CharField(required=False, help_text="a new link's token, shown once")
    url = serializers.CharField(required=False, help_text="a new link to share, shown once")


class InvitationSerializer(serializers.Serializer):
    id = serializers.IntegerField(allow_null=True, help_text="null for a link")
    role = serializers.ChoiceField(choices=Role.choices)
    adventure = StoryBriefSerializer()
    characters = _Character(many=True, help_text="the story's characters no one plays yet")


def _paged(request, queryset, shape) -> Response:
    """One page of ``queryset``, each row as ``shape`` says (config.paging's limit, offset and headers)."""
    paginator = paging.LimitOffsetHeaders()
    rows = paginator.paginate_queryset(queryset, request)
    return paginator.get_paginated_response([shape(row) for row in rows])


def _brief(adventure: Adventure) -> dict:
    return {"id": adventure.pk, "title": adventure.title, "owner": adventure.owner.username}


def _member(m: Membership) -> dict:
    character = {"id": m.character_id, "name": m.character.name} if m.character_id else None
    return {
        "user_id": m.user_id,
        "username": m.user.username,
        "role": m.role,
        "character": character,
        "joined_at": m.joined_at,
    }


def _joined(m: Membership) -> dict:
    return {**_member(m), "adventure": _brief(m.adventure)}


def _owner(adventure: Adventure) -> dict:
    persona = {"id": 0, "name": adventure.persona_name} if adventure.persona_name else None
    return {
        "user_id": adventure.owner_id,
        "username": adventure.owner.username,
        "role": "owner",
        "character": persona,
        "joined_at": None,
    }


def _invitation(invite) -> dict:
    characters = [{"id": c.pk, "name": c.name} for c in members.free_characters(invite.adventure)]
    return {
        "id": invite.pk if invite.user_id else None,
        "role": invite.role,
        "adventure": _brief(invite.adventure),
        "characters": characters,
    }


def _invite(invite) -> dict:
    return {
        "id": invite.pk,
        "role": invite.role,
        "username": invite.user.username if invite.user_id else None,
        "created_at": invite.created_at,
    }


def _members(adventure: Adventure, user_id: int) -> dict:
    everyone = [_owner(adventure), *(_member(m) for m in members.members_of(adventure))]
    party = Party.objects.filter(adventure=adventure).first() or Party(adventure=adventure)
    up = order.up(adventure, lineage.head(adventure), party=party)
    present = live.here(adventure.pk, [m["user_id"] for m in everyone])
    for m in everyone:
        m["here"] = m["user_id"] in present
    return {
        "adventure": _brief(adventure),
        "you": next(m for m in everyone if m["user_id"] == user_id),
        "players_max": members.PLAYERS_MAX,
        "turn_mode": party.turn_mode,
        "idle_skip_s": party.idle_skip_s,
        "gather_s": party.gather_s,
        "gather": _round(adventure, party),
        "up": vars(up) if up else None,
        "members": everyone,
        "characters": secrets.characters(adventure),  # whom a secret may be whispered to
    }


def _round(adventure: Adventure, party: Party) -> dict | None:
    if party.turn_mode != TurnMode.GATHER:
        return None
    now = order.gathered(adventure, lineage.head(adventure), party=party)
    return {"waiting": [name for _, name in now.waiting], "closes_at": now.closes_at, "written": len(now.actions)}


class MembersView(APIView):
    @extend_schema(responses=MembersSerializer, tags=["together"], summary="Who plays and watches, whose turn it is")
    def get(self, request, adventure_id):
        return Response(_members(_adventure(request, adventure_id, may="watch"), request.user.id))

    @extend_schema(
        request=PartyChangeSerializer,
        responses=MembersSerializer,
        tags=["together"],
        summary="How turns are taken",
        operation_id="adventures_turn_mode_update",
    )
    def patch(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        data = valid(PartyChangeSerializer, request)
        Party.objects.update_or_create(adventure=adventure, defaults=data)
        live.members_changed(adventure.pk, turns=True)
        return Response(_members(adventure, request.user.id))


class MemberDetailView(APIView):
    @extend_schema(
        request=MemberChangeSerializer, responses=MemberSerializer, tags=["together"], summary="Change a member's role"
    )
    def patch(self, request, adventure_id, user_id):
        adventure = _adventure(request, adventure_id)
        members.membership(adventure=adventure, user_id=user_id)  # another story's member is a 404 first
        data = valid(MemberChangeSerializer, request)
        member = members.member_change(
            adventure=adventure, user_id=user_id, role=data["role"], character_id=data.get("character")
        )
        live.members_changed(adventure.pk, changed=user_id)
        return Response(_member(member))

    @extend_schema(responses={204: None}, tags=["together"], summary="Remove a member, or leave")
    def delete(self, request, adventure_id, user_id):
        adventure = _adventure(request, adventure_id, may="watch")
        members.member_remove(adventure=adventure, user_id=user_id, by_user_id=request.user.id)
        live.members_changed(adventure.pk, removed=user_id)
        return Response(status=204)


class StoryInvitesView(APIView):
    @extend_schema(
        responses=InviteSerializer(many=True),
        parameters=paging.parameters(),
        tags=["together"],
        summary="This story's open invitations",
    )
    def get(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        return _paged(request, members.invites_of_story(adventure), _invite)

    @extend_schema(
        request=InviteCreateSerializer,
        responses={201: InviteSerializer},
        tags=["together"],
        summary="Invite a user, or make a link",
    )
    def post(self, request, adventure_id):
        adventure = _adventure(request, adventure_id)
        data = valid(InviteCreateSerializer, request)
        if data.get("username"):
            invite = members.invite_user(adventure=adventure, username=data["username"], role=data["role"])
            return Response(_invite(invite), status=201)
        invite, token = members.invite_link(adventure=adventure, role=data["role"])
        url = request.build_absolute_uri(f"/join/{token}/")
        return Response({**_invite(invite), "token": token, "url": url}, status=201)


class StoryInviteDetailView(APIView):
    @extend_schema(responses={204: None}, tags=["together"], summary="Revoke an invitation or a link")
    def delete(self, request, adventure_id, invite_id):
        members.invite_revoke(adventure=_adventure(request, adventure_id), invite_id=invite_id)
        return Response(status=204)


class MyInvitationsView(APIView):
    @extend_schema(
        responses=InvitationSerializer(many=True),
        parameters=paging.parameters(),
        tags=["together"],
        summary="Invitations for you",
    )
    def get(self, request):
        return _paged(request, members.invitations_of(user_id=request.user.id), _invitation)


class InvitationAcceptView(APIView):
    @extend_schema(
        request=JoinSerializer,
        responses={201: JoinedSerializer},
        tags=["together"],
        summary="Join a story you were invited to",
    )
    def post(self, request, invite_id):
        invite = members.invitation_for(user_id=request.user.id, invite_id=invite_id)
        data = valid(JoinSerializer, request)
        member = party.join(user_id=request.user.id, invite=invite, character=data.get("character"))
        live.members_changed(member.adventure_id, joined=request.user.id)
        return Response(_joined(members.membership(adventure=member.adventure, user_id=request.user.id)), status=201)


class InvitationDeclineView(APIView):
    @extend_schema(request=None, responses={204: None}, tags=["together"], summary="Decline an invitation")
    def post(self, request, invite_id):
        members.invitation_decline(user_id=request.user.id, invite_id=invite_id)
        return Response(status=204)


class JoinLinkView(APIView):
    @extend_schema(responses=InvitationSerializer, tags=["together"], summary="What a link invites to")
    def get(self, request, code):
        return Response(_invitation(members.invite_by_token(code)))

    @extend_schema(
        request=JoinSerializer, responses={201: JoinedSerializer}, tags=["together"], summary="Join by a link"
    )
    def post(self, request, code):
        invite = members.invite_by_token(code)
        data = valid(JoinSerializer, request)
        member = party.join(user_id=request.user.id, invite=invite, character=data.get("character"))
        live.members_changed(member.adventure_id, joined=request.user.id)
        return Response(_joined(members.membership(adventure=member.adventure, user_id=request.user.id)), status=201)


class JoinedView(APIView):
    @extend_schema(
        responses=JoinedSerializer(many=True),
        parameters=paging.parameters(),
        tags=["together"],
        summary="Stories you play or watch",
    )
    def get(self, request):
        rows = Membership.objects.filter(user_id=request.user.id, adventure__hidden=False).select_related(
            "adventure__owner", "character", "user"
        )
        return _paged(
            request, rows.order_by("-joined_at", "-id"), lambda m: {**_member(m), "adventure": _brief(m.adventure)}
        )


class StoryReportSerializer(serializers.Serializer):
    reason = strict.ChoiceField(choices=StoryReport.Reason.choices)
    text = strict.TextField(required=False, allow_blank=True, default="", max_length=2000, help_text="what is wrong")
    action = strict.IntegerField(
        required=False, min_value=1, max_value=2**31 - 1, help_text="a node of the story; none: the story itself"
    )


class StoryReportAnswer(serializers.Serializer):
    id = serializers.IntegerField()
    reason = serializers.CharField()
    status = serializers.CharField()


class StoryReportView(APIView):
    @extend_schema(
        request=StoryReportSerializer,
        responses={201: StoryReportAnswer},
        tags=["together"],
        summary="Report the story or a node of it to the moderators",
    )
    def post(self, request, adventure_id):
        adventure = _adventure(request, adventure_id, may="watch")
        data = valid(StoryReportSerializer, request)
        report = reports.story_report(
            adventure=adventure,
            reporter_id=request.user.id,
            reason=data["reason"],
            text=data["text"].strip(),
            action_id=data.get("action"),
        )
        return Response({"id": report.pk, "reason": report.reason, "status": report.status}, status=201)
