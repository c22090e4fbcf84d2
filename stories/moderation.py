"""What moderators do to players' content. Hidden content reaches nobody but
staff: it leaves the story (lineage.story), prompts and memories."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from config import jobs
from stories import tree
from stories.models import Action, Adventure


def action_set_hidden(*, action_id: int, hidden: bool) -> Action:
    """Hide (or show again) one take, through the tree (the adventure locked first, like every tree
    write; Conflict while a reply is written). When it is the live take, the memory of the block
    that holds it, on every branch that reads it, is written again by the next pass (without it, or
    with it again); every other memory, and all the player set by hand, stays."""
    adventure_id = Action.objects.values_list("adventure_id", flat=True).get(pk=action_id)
    return tree.hide(adventure_id=adventure_id, action_id=action_id, hidden=hidden)


def memory_pass_rerun(*, adventure_id: int) -> None:
    """Staff asked for the adventure's memory pass again (it runs in the background)."""
    jobs.memory_pass_after_commit(adventure_id=adventure_id)


def adventure_set_hidden(*, adventure_id: int, hidden: bool) -> None:
    Adventure.objects.filter(pk=adventure_id).update(hidden=hidden)


def user_suspend(*, user_id: int, suspended: bool = True) -> None:
    """A suspended user cannot log in or play; sessions end on their next
    request and API and world tokens are refused at once."""
    get_user_model().objects.filter(pk=user_id).update(is_active=not suspended)
