"""Stories played together, as a member does it: join by an invitation or a link as a character of
the story (one of its character cards no one plays, or a new one, made a card from the node played
and in the cast, so its memories are its own from the scenes it witnesses)."""

from __future__ import annotations

from django.db import transaction

from config.errors import InvalidRequest
from memory.story import canon
from stories.models import StoryCard
from stories.party import members
from stories.party.models import Invite, Membership, Role


def join(*, user_id: int, invite: Invite, character: dict | None) -> Membership:
    """``user_id`` joins ``invite``'s story; a player as ``character`` ({"card": id} or {"name",
    "description"}), a watcher with none. Nothing is made when the join is refused."""
    if invite.role == Role.WATCHER:
        if character:
            raise InvalidRequest("character: a watcher joins without one (the owner can make them a player)")
        return members.join(user_id=user_id, invite=invite, character_id=None)
    if not character:
        raise InvalidRequest("character: a player joins as a character: give {card: id} or {name, description}")
    with transaction.atomic():
        card_id = character.get("card")
        if card_id is None:
            card_id = _new_character(invite, character).pk
        return members.join(user_id=user_id, invite=invite, character_id=card_id)


def _new_character(invite: Invite, character: dict) -> StoryCard:
    name = (character.get("name") or "").strip()
    if not name:
        raise InvalidRequest("character: give the new character's name (or {card: id} of one in the story)")
    adventure = invite.adventure
    if StoryCard.objects.filter(adventure=adventure, name__iexact=name).exists():
        raise InvalidRequest(f"character: the story already has a card named {name!r}; choose it or another name")
    return canon.card_create(
        adventure=adventure,
        type=StoryCard.Type.CHARACTER,
        name=name,
        keys=[name],
        entry=(character.get("description") or "").strip(),
        in_cast=True,
    )
