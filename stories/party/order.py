"""Whose turn it is in a story played together: in round-robin the players take turns in order (the
owner first, then the players as they joined); one who lets ``idle_skip_s`` pass after the last
turn is skipped. Worked out from the story itself (who wrote the last player's node, and when the
story last moved), so nothing is kept that could drift from it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone

from config.errors import Conflict
from stories.models import Action, Adventure, Branch
from stories.party.models import Membership, Party, Role, TurnMode
from stories.tree import lineage

LOOK_BACK = 40  # nodes of the path read for the last player's node


@dataclass(frozen=True)
class Up:
    user_id: int
    name: str  # the character they play (the owner's persona, or their username)
    since: object  # when their turn began (the story's last node)
    skip_at: object  # when they are skipped if they do not play


def players(adventure: Adventure) -> list[tuple[int, str]]:
    """(user id, character name) of each player, in turn order."""
    owner_name = adventure.persona_name or adventure.owner.username
    rows = (
        Membership.objects.filter(adventure=adventure, role=Role.PLAYER)
        .select_related("character", "user")
        .order_by("joined_at", "id")
    )
    return [
        (adventure.owner_id, owner_name),
        *((m.user_id, m.character.name if m.character_id else m.user.username) for m in rows),
    ]


def up(adventure: Adventure, branch: Branch, *, party: Party | None = None) -> Up | None:
    """Who is up in round-robin on ``branch``; None in free mode."""
    party = party or Party.objects.filter(adventure=adventure).first()
    if party is None or party.turn_mode != TurnMode.ROUND_ROBIN:
        return None
    order = players(adventure)
    recent = lineage.recent(branch, count=LOOK_BACK)
    last_player = next((a for a in reversed(recent) if a.kind in (Action.Kind.DO, Action.Kind.SAY)), None)
    after = -1
    if last_player is not None:
        author = last_player.author_id or adventure.owner_id
        after = next((i for i, (uid, _) in enumerate(order) if uid == author), -1)
    since = recent[-1].created_at if recent else adventure.created_at
    idle = max(1, party.idle_skip_s)
    skipped = int(max(0.0, (timezone.now() - since).total_seconds()) // idle)
    user_id, name = order[(after + 1 + skipped) % len(order)]
    began = since + timedelta(seconds=idle * skipped)
    return Up(user_id=user_id, name=name, since=began, skip_at=began + timedelta(seconds=idle))


def turn_check(adventure: Adventure, branch: Branch, *, user_id: int) -> None:
    """Conflict naming who is up when it is not ``user_id``'s turn (round-robin only)."""
    if getattr(adventure, "turn_mode", None) != TurnMode.ROUND_ROBIN:
        return
    now_up = up(adventure, branch)
    if now_up is not None and now_up.user_id != user_id:
        raise Conflict(f"it is {now_up.name}'s turn; yours comes in order", code="not_your_turn")
