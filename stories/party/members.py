"""Who may do what in a story played together: the owner, its members (players and watchers), its
invitations (by username, or a link that can be revoked), joining as a character, leaving and
being removed. stories.adventures.access_adventure asks here for every request of a member."""

from __future__ import annotations

import functools
import hashlib
import secrets

from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, OuterRef, Q, Subquery
from django.dispatch import Signal
from django.utils import timezone

from config.errors import Conflict, Forbidden, InvalidRequest, NotFound
from stories.models import Adventure, StoryCard
from stories.party.models import Invite, Membership, Party, Role

# Sent when who may see a story changed outside the story's own routes (a moderator suspended a member
# or hid the story): the live pages of the story ask again at once (play.live).
access_changed = Signal()

MAY = ("own", "play", "watch")  # what a request asks of an adventure (access_adventure)
PLAYERS_MAX = 8  # the owner included
WATCHERS_MAX = 24
OPEN_INVITES_MAX = 20  # invitations not yet taken or revoked, per adventure
TOKEN_BYTES = 24

_SAYS = {
    "own": "only the story's owner can do this",
    "play": "watchers read the story; only its players and its owner can do this",
}


def with_viewer(adventures, *, user_id: int):
    """``adventures`` narrowed to those ``user_id`` owns or is a member of, each with the member's
    role and character name (one query: the subqueries ride along)."""
    mine = Membership.objects.filter(adventure_id=OuterRef("pk"), user_id=user_id)
    return adventures.annotate(
        member_role=Subquery(mine.values("role")[:1]),
        member_actor=Subquery(mine.values("character__name")[:1]),
        together=Exists(Membership.objects.filter(adventure_id=OuterRef("pk"))),
        turn_mode=Subquery(Party.objects.filter(adventure_id=OuterRef("pk")).values("turn_mode")[:1]),
    ).filter(Q(owner_id=user_id) | Q(member_role__isnull=False))


def as_viewer(adventure: Adventure, *, user_id: int, may: str) -> Adventure:
    """``adventure`` marked with who asks; Forbidden when a member's role does not allow ``may``."""
    if adventure.owner_id == user_id:
        adventure.viewer, adventure.actor = "owner", ""
        return adventure
    role = getattr(adventure, "member_role", None)
    if may == "own" or (may == "play" and role != Role.PLAYER):
        raise Forbidden(_SAYS[may])
    adventure.viewer, adventure.actor = role, adventure.member_actor or ""
    return adventure


def may_follow(*, adventure_id: int, user_id: int) -> bool:
    """Whether ``user_id`` (active) may still follow the story live: its owner or a member, the story
    not hidden. One query as written (1,000 open pages ask it every minute, and on every members
    event: the ORM's compile of it was most of its cost)."""
    with connection.cursor() as db:
        db.execute(_may_follow_sql(), [user_id, adventure_id])
        return db.fetchone() is not None


@functools.cache
def _may_follow_sql() -> str:
    return f"""
SELECT 1 FROM {Adventure._meta.db_table} a JOIN {get_user_model()._meta.db_table} u ON u.id = %s AND u.is_active
WHERE a.id = %s AND NOT a.hidden AND (a.owner_id = u.id OR EXISTS (
  SELECT 1 FROM {Membership._meta.db_table} m WHERE m.adventure_id = a.id AND m.user_id = u.id))
"""


def refuse(*, adventure_id: int, user_id: int, may: str) -> None:
    """An owner-only request by a member: Forbidden, saying who may (a non-member's is NotFound)."""
    if may == "own" and Membership.objects.filter(adventure_id=adventure_id, user_id=user_id).exists():
        raise Forbidden(_SAYS["own"])


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


# ---------------------------------------------------------------------------- invitations


def _open_invites(adventure: Adventure):
    return Invite.objects.filter(adventure=adventure, revoked_at__isnull=True)


def _room_for_invites(adventure: Adventure) -> None:
    if _open_invites(adventure).count() >= OPEN_INVITES_MAX:
        raise Conflict(f"a story has at most {OPEN_INVITES_MAX} open invitations; revoke one first")


def invite_user(*, adventure: Adventure, username: str, role: str) -> Invite:
    """An invitation for the user named ``username`` (they see it in their invitations); asked again,
    the same invitation with the role given."""
    invitee = get_user_model().objects.filter(username__iexact=username.strip(), is_active=True).first()
    if invitee is None:
        raise InvalidRequest(f"no player is named {username.strip()!r}; check the spelling of their username")
    if invitee.pk == adventure.owner_id:
        raise InvalidRequest("you own this story: invite someone else")
    if Membership.objects.filter(adventure=adventure, user=invitee).exists():
        raise Conflict(f"{invitee.username} is already a member of this story")
    with transaction.atomic():
        invite = _open_invites(adventure).filter(user=invitee).select_for_update().first()
        if invite is None:
            _room_for_invites(adventure)
            return Invite.objects.create(adventure=adventure, user=invitee, role=role)
        invite.role = role
        invite.save(update_fields=["role"])
        return invite


def invite_link(*, adventure: Adventure, role: str) -> tuple[Invite, str]:
    """A link anyone signed in may follow to join as ``role``: the invitation and its token (shown
    once; only its hash is kept)."""
    _room_for_invites(adventure)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    return Invite.objects.create(adventure=adventure, token_hash=hash_token(token), role=role), token


def invite_revoke(*, adventure: Adventure, invite_id: int) -> None:
    """The invitation stops working at once (a member who joined by it stays: remove them)."""
    if not _open_invites(adventure).filter(pk=invite_id).update(revoked_at=timezone.now()):
        raise NotFound()


def invites_of_story(adventure: Adventure):
    return _open_invites(adventure).select_related("user")


def invitations_of(*, user_id: int):
    """The invitations addressed to ``user_id``, open, to stories still up."""
    return (
        Invite.objects.filter(user_id=user_id, revoked_at__isnull=True, adventure__hidden=False)
        .exclude(adventure__memberships__user_id=user_id)
        .select_related("adventure__owner")
    )


def invitation_for(*, user_id: int, invite_id: int) -> Invite:
    invite = invitations_of(user_id=user_id).filter(pk=invite_id).first()
    if invite is None:
        raise NotFound()
    return invite


def invite_by_token(token: str) -> Invite:
    """The open link invitation ``token`` names; a revoked or unknown one is NotFound."""
    if not 16 <= len(token) <= 64:
        raise NotFound()
    invite = (
        Invite.objects.filter(token_hash=hash_token(token), revoked_at__isnull=True, adventure__hidden=False)
        .select_related("adventure__owner")
        .first()
    )
    if invite is None:
        raise NotFound()
    return invite


def invitation_decline(*, user_id: int, invite_id: int) -> None:
    invitation_for(user_id=user_id, invite_id=invite_id)
    Invite.objects.filter(pk=invite_id).update(revoked_at=timezone.now())


# ---------------------------------------------------------------------------- members


def free_characters(adventure: Adventure) -> list[StoryCard]:
    """The adventure's character cards no member plays, on the path played."""
    taken = Membership.objects.filter(adventure=adventure, character__isnull=False).values("character_id")
    return list(StoryCard.objects.filter(adventure=adventure, type=StoryCard.Type.CHARACTER).exclude(pk__in=taken))


def _players(adventure: Adventure) -> int:
    return 1 + Membership.objects.filter(adventure=adventure, role=Role.PLAYER).count()


def _room_for(adventure: Adventure, role: str) -> None:
    if role == Role.PLAYER and _players(adventure) >= PLAYERS_MAX:
        raise Conflict(f"a story has at most {PLAYERS_MAX} players (its owner included); join as a watcher")
    if role == Role.WATCHER and Membership.objects.filter(adventure=adventure, role=Role.WATCHER).count() >= (
        WATCHERS_MAX
    ):
        raise Conflict(f"a story has at most {WATCHERS_MAX} watchers")


def _playable(adventure: Adventure, card_id: int | None, *, user_id: int) -> StoryCard:
    if card_id is None:
        raise InvalidRequest("a player joins as a character: name one of the story's characters or a new one")
    card = StoryCard.objects.filter(adventure=adventure, type=StoryCard.Type.CHARACTER, pk=card_id).first()
    if card is None:
        raise InvalidRequest("character: not one of this story's character cards")
    if Membership.objects.filter(adventure=adventure, character=card).exclude(user_id=user_id).exists():
        raise Conflict(f"another player plays {card.name}; choose another character")
    return card


def join(*, user_id: int, invite: Invite, character_id: int | None) -> Membership:
    """``user_id`` joins ``invite``'s story in its role (a player as the character ``character_id``);
    an invitation for one user is used up, a link stays until revoked. Under the adventure's row
    lock, so two joining at once never make a ninth player or share a character."""
    with transaction.atomic():
        adventure = Adventure.objects.select_for_update().get(pk=invite.adventure_id)
        if adventure.owner_id == user_id:
            raise InvalidRequest("you own this story")
        if Membership.objects.filter(adventure=adventure, user_id=user_id).exists():
            raise Conflict("you are already a member of this story")
        _room_for(adventure, invite.role)
        card = _playable(adventure, character_id, user_id=user_id) if invite.role == Role.PLAYER else None
        if invite.user_id is not None:
            Invite.objects.filter(pk=invite.pk).update(revoked_at=timezone.now())
        try:
            with transaction.atomic():
                return Membership.objects.create(adventure=adventure, user_id=user_id, role=invite.role, character=card)
        except IntegrityError:
            raise Conflict("you are already a member of this story") from None


def members_of(adventure: Adventure) -> list[Membership]:
    return list(Membership.objects.filter(adventure=adventure).select_related("user", "character"))


def membership(*, adventure: Adventure, user_id: int) -> Membership:
    found = Membership.objects.filter(adventure=adventure, user_id=user_id).select_related("user", "character")
    member = found.first()
    if member is None:
        raise NotFound()
    return member


def member_change(*, adventure: Adventure, user_id: int, role: str, character_id: int | None) -> Membership:
    """The owner makes a member a player (as a character) or a watcher."""
    with transaction.atomic():
        Adventure.objects.select_for_update().filter(pk=adventure.pk).first()
        member = membership(adventure=adventure, user_id=user_id)
        if role != member.role:
            _room_for(adventure, role)
        if role == Role.PLAYER:
            member.character = _playable(adventure, character_id or member.character_id, user_id=user_id)
        member.role = role
        member.save(update_fields=["role", "character"])
        return member


def member_remove(*, adventure: Adventure, user_id: int, by_user_id: int) -> None:
    """The owner removes a member, or a member leaves; they lose the story at once (every request
    asks access_adventure). Their turns and their character stay in the story."""
    if by_user_id not in (adventure.owner_id, user_id):
        raise Forbidden("only the story's owner removes a member; a member can leave")
    if not Membership.objects.filter(adventure=adventure, user_id=user_id).delete()[0]:
        raise NotFound()
