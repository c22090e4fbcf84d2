"""Whose turn it is in a story played together: in round-robin the players take turns in order (the
owner first, then the players as they joined); one who lets ``idle_skip_s`` pass after the last
turn is skipped. In gather mode each player writes once a round, and one narration answers the
round when every player has written or ``gather_s`` after its first action. Worked out from the
story itself (who wrote the players' nodes since the last narration, and when), so nothing is kept
that could drift from it."""

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
    recent = lineage.recent(branch, count=LOOK_BACK, viewer=lineage.EVERY)  # a secret turn is a turn too
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


@dataclass(frozen=True)
class Round:
    """A gather round: the players' nodes since the last narration, who is still to write (user id,
    name), and when it closes (None before its first action)."""

    actions: list
    waiting: list[tuple[int, str]]
    closes_at: object

    @property
    def complete(self) -> bool:
        return bool(self.actions) and not self.waiting

    def closed(self) -> bool:
        return self.complete or (self.closes_at is not None and timezone.now() >= self.closes_at)


def gathered(adventure: Adventure, branch: Branch, *, party: Party) -> Round:
    """The open gather round on ``branch`` (secrets count: a whisper is the player's part of a round)."""
    recent = lineage.recent(branch, count=LOOK_BACK, viewer=lineage.EVERY)
    since = []
    for node in reversed(recent):
        if node.is_model_output or node.kind == Action.Kind.START:
            break
        since.insert(0, node)
    wrote = {a.author_id or adventure.owner_id for a in since}
    waiting = [(uid, name) for uid, name in players(adventure) if uid not in wrote]
    closes_at = since[0].created_at + timedelta(seconds=party.gather_s) if since else None
    return Round(actions=since, waiting=waiting, closes_at=closes_at)


def gather_check(adventure: Adventure, branch: Branch, *, user_id: int, writing: bool) -> Round | None:
    """The open round of a story in gather mode (None in another mode). Conflict when ``user_id``
    already wrote in it (``writing``), or asks for the narration (a continue) of a round still open
    that is not the owner's to close."""
    party = Party.objects.filter(adventure=adventure).first()
    if party is None or party.turn_mode != TurnMode.GATHER:
        return None
    now = gathered(adventure, branch, party=party)
    if writing and user_id not in {uid for uid, _ in now.waiting}:
        raise Conflict("you have written this round; the narration answers it when everyone has", code="written")
    if not writing and not now.actions:
        raise Conflict("no one has written this round yet: write your action first", code="nothing_gathered")
    if not writing and not now.closed() and user_id != adventure.owner_id:
        names = ", ".join(name for _, name in now.waiting)
        raise Conflict(
            f"the round is open until everyone has written or it closes; waiting for {names}", code="gathering"
        )
    return now
