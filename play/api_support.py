"""What every API view of the story room shares: the owner-checked adventure."""

from __future__ import annotations

from stories import adventures
from stories.models import Adventure


def adventure_for(request, adventure_id, *, for_play: bool = False) -> Adventure:
    """The request user's adventure; another user's id is a 404. ``for_play``: with the owner's AI settings."""
    return adventures.access_adventure(user_id=request.user.id, adventure_id=adventure_id, for_play=for_play)
