"""Secrets in a story played together. A player acts privately (told to the narrator alone) or
whispers to named characters; the node is stored with ``seen_by`` (the user ids who may read it: its
author and the players of the characters it is told to; the owner only as one of them) and
``heard_by`` (the characters in earshot: the actor and those named), and the narrator's answer with
the same. Every read of a story for a person filters by them (stories.tree.lineage.seen_q); memory,
the summary and the claims are built from the shared story, and a secret is remembered only for
those it was told to (memory.story.secrets)."""

from __future__ import annotations

from config.errors import InvalidRequest
from stories.models import Action, Adventure, StoryCard
from stories.party import order
from stories.tree.sql import Teller

TO_MAX = 8  # characters one whisper names


def teller_for(*, adventure: Adventure, user_id: int, actor: str, private: bool, to: list[str]) -> Teller:
    """Who tells a turn of ``user_id`` (``actor``: their character; blank for the owner) and, when the
    turn is ``private`` or whispered ``to`` characters, who may read it and who hears it. InvalidRequest
    names a character not in the story."""
    author = None if user_id == adventure.owner_id else user_id
    if not private and not to:
        return Teller(author_id=author, actor=actor)
    by_name = {name.casefold(): (uid, name) for uid, name in _characters(adventure)}
    own_name = next((name for uid, name in by_name.values() if uid == user_id), actor)
    seen, heard = [user_id], [own_name]
    for asked in to[:TO_MAX]:
        found = by_name.get(asked.strip().casefold())
        if found is None:
            raise InvalidRequest(
                f"to: no character named {asked.strip()[:100]!r} is in this story; whisper to a character of its cast "
                "or a player's character"
            )
        uid, name = found
        if uid is not None and uid not in seen:
            seen.append(uid)
        if name not in heard:
            heard.append(name)
    return Teller(author_id=author, actor=actor, seen_by=seen, heard_by=heard)


def _characters(adventure: Adventure) -> list[tuple[int | None, str]]:
    """(the user who plays it or None, name) of every character a secret may be told to: the players'
    (the owner's first), then the cast's."""
    found = order.players(adventure)
    names = {name.casefold() for _, name in found}
    for card in StoryCard.objects.filter(adventure=adventure, type=StoryCard.Type.CHARACTER).order_by("id"):
        if card.name.casefold() not in names:
            found.append((None, card.name))
            names.add(card.name.casefold())
    return found


def characters(adventure: Adventure) -> list[str]:
    """The names a player may whisper to, the players' characters first."""
    return [name for _, name in _characters(adventure)]


def may_read(node: Action, user_id: int) -> bool:
    """Whether ``user_id`` may read ``node``: a node told to everyone, or a secret told to them."""
    return node.seen_by is None or user_id in node.seen_by


def told_to(node: Action) -> str:
    """How a secret reads to those it was told to: "told privately" or "whispered to Mira"; blank for
    a node told to everyone."""
    if node.seen_by is None:
        return ""
    others = (node.heard_by or [])[1:]
    return "whispered to " + ", ".join(others) if others else "told privately"
