"""What moderators do to players' content. Hidden content reaches nobody but
staff: it leaves the story (lineage.story), prompts and memories."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from config import jobs
from stories.models import Action, Adventure, Membership, Scenario, ScenarioReport
from stories.party import members, reports
from stories.party.models import StoryReport
from stories.tree import writes


def action_set_hidden(*, action_id: int, hidden: bool) -> Action:
    """Hide (or show again) one take, through the tree (the adventure locked first, like every tree
    write; Conflict while a reply is written). When it is the live take, the memory of the block
    that holds it, on every branch that reads it, is written again by the next pass (without it, or
    with it again); every other memory, and all the player set by hand, stays."""
    adventure_id = Action.objects.values_list("adventure_id", flat=True).get(pk=action_id)
    return writes.hide(adventure_id=adventure_id, action_id=action_id, hidden=hidden)


def memory_pass_rerun(*, adventure_id: int) -> None:
    """Staff asked for the adventure's memory pass again (it runs in the background)."""
    jobs.memory_pass_after_commit(adventure_id=adventure_id)


def adventure_set_hidden(*, adventure_id: int, hidden: bool) -> None:
    Adventure.objects.filter(pk=adventure_id).update(hidden=hidden)
    members.access_changed.send(sender=Adventure, adventure_id=adventure_id)  # its members' live pages end


def user_suspend(*, user_id: int, suspended: bool = True) -> None:
    """A suspended user cannot log in or play; sessions end on their next
    request and API and world tokens are refused at once, and the live pages of
    the stories they play together end."""
    get_user_model().objects.filter(pk=user_id).update(is_active=not suspended)
    together = Membership.objects.filter(Q(user_id=user_id) | Q(adventure__owner_id=user_id))
    for adventure_id in together.values_list("adventure_id", flat=True).distinct()[:1000]:
        members.access_changed.send(sender=Adventure, adventure_id=adventure_id)


UNPUBLISHED_NOTICE = (
    "A moderator unpublished this scenario{why}. It is private now: change what the rules do not allow, "
    "then you may publish it again."
)
HIDDEN_NOTICE = "A moderator hid this scenario{why}: only you see it, and it cannot be shared or published."


def scenario_unpublish(*, scenario_id: int, why: str = "") -> None:
    """Out of the library and its share link (private again), the author told why on their
    scenario; its open reports are settled. Adventures started from it keep their copies."""
    with transaction.atomic():
        Scenario.objects.filter(pk=scenario_id).update(
            visibility=Scenario.Visibility.PRIVATE, moderator_notice=UNPUBLISHED_NOTICE.format(why=_why(why))
        )
        _reports_settle(scenario_id, ScenarioReport.Status.ACTIONED)


def scenario_set_hidden(*, scenario_id: int, hidden: bool, why: str = "") -> None:
    """Hidden: seen by its author only (never in the library or through a link), whatever its
    visibility; its open reports are settled. Shown again: as it was before, the notice gone."""
    with transaction.atomic():
        notice = HIDDEN_NOTICE.format(why=_why(why)) if hidden else ""
        Scenario.objects.filter(pk=scenario_id).update(hidden=hidden, moderator_notice=notice)
        if hidden:
            _reports_settle(scenario_id, ScenarioReport.Status.ACTIONED)


def report_dismiss(*, report_id: int) -> None:
    ScenarioReport.objects.filter(pk=report_id, status=ScenarioReport.Status.OPEN).update(
        status=ScenarioReport.Status.DISMISSED, resolved_at=timezone.now()
    )


def _reports_settle(scenario_id: int, status: str) -> None:
    ScenarioReport.objects.filter(scenario_id=scenario_id, status=ScenarioReport.Status.OPEN).update(
        status=status, resolved_at=timezone.now()
    )


def _why(why: str) -> str:
    return f" ({why})" if why else ""


def story_report_settle(*, report: StoryReport, hide: str | None) -> None:
    """A report of a story played together settled: dismissed (``hide`` None), or its node hidden
    ("node"; a report of the whole story hides the story) or its story hidden ("story")."""
    if hide == "node" and report.action_id:
        action_set_hidden(action_id=report.action_id, hidden=True)
    elif hide is not None:
        adventure_set_hidden(adventure_id=report.adventure_id, hidden=True)
    status = StoryReport.Status.DISMISSED if hide is None else StoryReport.Status.ACTIONED
    reports.reports_settle(report_ids=[report.pk], status=status)
