"""How a story node is told: the one rendering of a player's act. To the model and in the exports
it is the second person ("> You draw your sword", '> You say "Halt!"'); in memories and scene
readings the third, with the protagonist's name ("Mira chose to draw her sword.")."""

from __future__ import annotations

import re

from stories.models import Action


def told(action: Action) -> str:
    """The node as the model reads it (and the exports write it)."""
    text = action.text.strip()
    if action.kind == Action.Kind.DO:
        return "> " + (text if text.lower().startswith("you ") else f"You {text}")
    if action.kind == Action.Kind.SAY:
        return f'> You say "{text.strip(chr(34))}"'
    return text


def told_of(action: Action, *, name: str) -> str:
    """The node as a memory tells it, on one line: the player's act as ``name``'s ("Mira chose to
    ..."), the narration as written (its "you" is the memory writer's to turn into ``name``)."""
    text = action.text.replace("\n", " ").strip()
    if action.kind == Action.Kind.DO:
        text = re.sub(r"^(you|i)\s+", "", text, flags=re.I).rstrip(".!?")
        return f"{name} chose to {text[:1].lower()}{text[1:]}."
    if action.kind == Action.Kind.SAY:
        return f'{name} said, "{text.strip(chr(34))}"'
    return text


def is_players(action: Action) -> bool:
    """Whether the node is the player's own act (an export marks it)."""
    return action.kind in (Action.Kind.DO, Action.Kind.SAY)
