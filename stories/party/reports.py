"""Reports from a story played together: a member (or its owner) reports the story or one of its
nodes they may read to the moderators' queue; moderators dismiss it, or hide the node or the story
(stories.moderation), which takes it out of every member's view and memory."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils import timezone

from config.errors import Conflict, NotFound
from stories import limits
from stories.models import Action, Adventure
from stories.party.models import StoryReport
from stories.tree import lineage


def story_report(
    *, adventure: Adventure, reporter_id: int, reason: str, text: str = "", action_id: int | None = None
) -> StoryReport:
    """``adventure`` comes from access_adventure for ``reporter_id`` (a member or the owner). NotFound for a
    node not in this story or not theirs to read; Conflict for a second open report of the same; the
    reports one player sends are rate limited (limits.report)."""
    action = None
    if action_id is not None:
        action = Action.objects.filter(
            lineage.seen_q(reporter_id), pk=action_id, adventure=adventure, hidden=False
        ).first()
        if action is None:
            raise NotFound(f"action: {action_id} is no node of this story you can read")
    limits.report(user_id=reporter_id)
    try:
        with transaction.atomic():
            return StoryReport.objects.create(
                adventure=adventure, action=action, reporter_id=reporter_id, reason=reason, text=text
            )
    except IntegrityError:
        raise Conflict("you have reported this already; the moderators will look at it") from None


def reports_settle(*, report_ids: list[int], status: str) -> int:
    """Open reports closed as ``status`` (dismissed, or actioned once a moderator hid what they report)."""
    return StoryReport.objects.filter(pk__in=report_ids, status=StoryReport.Status.OPEN).update(
        status=status, resolved_at=timezone.now()
    )
