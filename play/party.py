"""Stories played together, as a member does it: join by an invitation or a link as a character of
the story (one of its character cards no one plays, or a new one, made a card from the node played
and in the cast, so its memories are its own from the scenes it witnesses). And a gather round
closed in the background when its time passed with no page open to ask for its narration."""

from __future__ import annotations

import asyncio
import logging

from django.db import transaction

from config.errors import DomainError, InvalidRequest
from memory.story import canon
from play import turns
from stories.adventures import access_adventure
from stories.models import Adventure, StoryCard
from stories.party import members, order
from stories.party.models import Invite, Membership, Party, Role, TurnMode
from stories.tree import lineage
from stories.tree.generation import generation_release

log = logging.getLogger(__name__)
ROUNDS_LOOKED_AT = 500  # gather stories the sweep looks at a run


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


def rounds_due() -> list[int]:
    """The stories in gather mode whose open round's time has passed with no narration yet."""
    due = []
    parties = Party.objects.filter(turn_mode=TurnMode.GATHER, adventure__hidden=False).select_related("adventure")
    for party in parties.order_by("id")[:ROUNDS_LOOKED_AT]:
        now = order.gathered(party.adventure, lineage.head(party.adventure), party=party)
        if now.actions and now.closed():
            due.append(party.adventure_id)
    return due


def round_close(*, adventure_id: int) -> bool:
    """The narration of a gather round whose time passed, as a page asks for it, written in the
    background with the owner's model and key (never the demo model) and streamed to the members'
    pages. False when there is nothing to close (narrated meanwhile, a reply being written, a refusal)."""
    owner_id = Adventure.objects.filter(pk=adventure_id).values_list("owner_id", flat=True).first()
    if owner_id is None:
        return False
    try:
        adventure = access_adventure(user_id=owner_id, adventure_id=adventure_id, for_play=True, may="play")
        party = Party.objects.get(adventure=adventure)
        if not order.gathered(adventure, lineage.head(adventure), party=party).closed():
            return False
        prepared = turns.begin_play(user_id=owner_id, adventure=adventure, mode="continue", text="")
    except (DomainError, turns.TurnFailed, Party.DoesNotExist) as exc:
        log.info("gather round of adventure %s not closed: %s", adventure_id, exc)
        return False
    if prepared.conn.demo:  # background work never spends the demo model: the pages close it
        generation_release(adventure_id=adventure_id, token=prepared.token)
        return False
    try:
        asyncio.run(_narrated(turns.Reply(prepared, stream=True)))
    except turns.TurnFailed as exc:
        log.info("gather round of adventure %s: its narration failed: %s", adventure_id, exc)
        return False
    return True


async def _narrated(reply: turns.Reply):
    async for _ in reply.deltas():
        pass
    return await reply.finish()
