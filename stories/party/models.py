"""The tables of stories played together (imported by stories.models, so they are the stories app's)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class Role(models.TextChoices):
    PLAYER = "player"  # writes turns as their character
    WATCHER = "watcher"  # reads the story as it is played


VIEWER_ROLES = ["owner", *Role.values]  # who looks at a story: its owner or a member in their role


class TurnMode(models.TextChoices):
    FREE = "free"  # anyone plays; a turn sent while a reply is written waits its place in line
    ROUND_ROBIN = "round_robin"  # the players in order; an idle one is skipped after ``idle_skip_s``
    GATHER = "gather"  # each player writes within ``gather_s``, then one narration answers them all


class Party(models.Model):
    """How a story played together takes its turns (none: free, as a story played alone)."""

    adventure = models.OneToOneField("stories.Adventure", on_delete=models.CASCADE, related_name="party")
    turn_mode = models.CharField(max_length=12, choices=TurnMode.choices, default=TurnMode.FREE)
    idle_skip_s = models.PositiveIntegerField(default=300)  # round-robin: a player idle this long is skipped
    gather_s = models.PositiveIntegerField(default=120)  # gather: how long a round stays open after its first action

    def __str__(self) -> str:
        return f"{self.turn_mode} turns of {self.adventure_id}"


class Membership(models.Model):
    """A user who plays or watches another's adventure. The owner is no member: the adventure's
    ``owner`` is. A player's turns are written as ``character`` (a character card of the adventure)."""

    adventure = models.ForeignKey("stories.Adventure", on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.PLAYER)
    character = models.ForeignKey(
        "stories.StoryCard", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    joined_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["adventure", "user"], name="one_membership_per_user")]
        ordering = ["joined_at", "id"]

    def __str__(self) -> str:
        return f"{self.user_id} {self.role} of {self.adventure_id}"


class Invite(models.Model):
    """An invitation to an adventure: for one user (by username), or a link anyone signed in may
    follow (its token is kept as a hash; the owner sees it once and can revoke it)."""

    adventure = models.ForeignKey("stories.Adventure", on_delete=models.CASCADE, related_name="invites")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True, related_name="invitations"
    )
    token_hash = models.CharField(max_length=64, blank=True, default="", db_index=True)
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.PLAYER)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)  # a link revoked, a user's invitation declined

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(user__isnull=False) | ~Q(token_hash=""), name="invite_for_a_user_or_a_link"
            )
        ]

    def __str__(self) -> str:
        return f"invite to {self.adventure_id}"


class ReportStatus(models.TextChoices):
    """Where a report stands in the moderators' queue (a scenario's and a story's alike)."""

    OPEN = "open"
    DISMISSED = "dismissed"
    ACTIONED = "actioned"  # what it reports was hidden or unpublished


class StoryReport(models.Model):
    """A member's (or the owner's) report of a story played together, or of one of its nodes, for the
    moderators' queue; they see the node whoever it was told to (stories.admin)."""

    class Reason(models.TextChoices):
        HARASSMENT = "harassment", "harassment or hate"
        SEXUAL_MINORS = "minors", "sexual content involving minors"
        ILLEGAL = "illegal", "illegal content"
        SPAM = "spam", "spam or advertising"
        OTHER = "other", "something else"

    Status = ReportStatus

    adventure = models.ForeignKey("stories.Adventure", on_delete=models.CASCADE, related_name="reports")
    action = models.ForeignKey("stories.Action", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    reporter = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    reason = models.CharField(max_length=12, choices=Reason.choices)
    text = models.TextField(blank=True, default="")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    created_at = models.DateTimeField(auto_now_add=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["status", "created_at"])]
        constraints = [
            models.UniqueConstraint(
                fields=["adventure", "action", "reporter"],
                condition=Q(status="open"),
                name="one_open_story_report_per_reporter",
                nulls_distinct=False,
            )
        ]

    def __str__(self) -> str:
        return f"report of {self.adventure_id}"
