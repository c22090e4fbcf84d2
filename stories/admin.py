"""Moderation in the Django admin (the rules: config.admin_site). API keys are
never shown and AI settings are read-only for everyone: staff cannot redirect a
player's key."""

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.core.exceptions import PermissionDenied
from django.db.models import Case, Count, Q, Value, When
from rest_framework.authtoken.admin import TokenProxy

from config.admin_site import ModeratedAdmin, each, is_moderator_only
from stories import moderation
from stories.models import (
    Action,
    Adventure,
    AISettings,
    Branch,
    Invite,
    Membership,
    Party,
    ProviderCall,
    Scenario,
    ScenarioReport,
    StoryCard,
    StoryReport,
)

User = get_user_model()

admin.site.unregister(User)
# DRF's token page shows every player's API token and mints new ones: a way to act as anyone.
admin.site.unregister(TokenProxy)


@admin.register(User)
class PlayerAdmin(ModeratedAdmin, UserAdmin):
    list_display = ("username", "email", "is_active", "is_staff", "date_joined", "last_login")
    actions = ["suspend", "reinstate"]
    moderator_actions = ("suspend", "reinstate")

    def _suspendable(self, request, queryset):
        """Never oneself or a superuser; moderators reach only players who are not staff."""
        queryset = queryset.exclude(pk=request.user.pk).exclude(is_superuser=True)
        return queryset.exclude(is_staff=True) if is_moderator_only(request) else queryset

    @admin.action(description="Suspend: cannot log in or play; tokens stop working", permissions=["change"])
    def suspend(self, request, queryset):
        each(
            self,
            request,
            self._suspendable(request, queryset),
            lambda u: moderation.user_suspend(user_id=u.pk),
            "Suspended",
        )

    @admin.action(description="Reinstate suspended users", permissions=["change"])
    def reinstate(self, request, queryset):
        each(
            self,
            request,
            self._suspendable(request, queryset),
            lambda u: moderation.user_suspend(user_id=u.pk, suspended=False),
            "Reinstated",
        )

    def user_change_password(self, request, id, form_url=""):
        if is_moderator_only(request):
            raise PermissionDenied
        return super().user_change_password(request, id, form_url)


@admin.register(Adventure)
class AdventureAdmin(ModeratedAdmin):
    list_display = ("id", "title", "owner", "hidden", "memory_bank_enabled", "updated_at")
    list_filter = ("hidden", "memory_bank_enabled", "auto_summarize")
    search_fields = ("title", "owner__username", "plot_essentials")
    readonly_fields = ("owner", "head_branch", "created_at", "updated_at")
    actions = ["hide", "unhide", "rerun_memory_pass"]
    moderator_actions = ("hide", "unhide", "rerun_memory_pass")

    @admin.action(description="Hide from everyone but staff", permissions=["change"])
    def hide(self, request, queryset):
        each(
            self, request, queryset, lambda a: moderation.adventure_set_hidden(adventure_id=a.pk, hidden=True), "Hidden"
        )

    @admin.action(description="Show again", permissions=["change"])
    def unhide(self, request, queryset):
        each(
            self,
            request,
            queryset,
            lambda a: moderation.adventure_set_hidden(adventure_id=a.pk, hidden=False),
            "Shown again",
        )

    @admin.action(description="Re-run the memory pass", permissions=["view"])
    def rerun_memory_pass(self, request, queryset):
        each(self, request, queryset, lambda a: moderation.memory_pass_rerun(adventure_id=a.pk), "Memory pass queued")


@admin.register(Branch)
class BranchAdmin(ModeratedAdmin):
    list_display = ("id", "adventure", "name", "parent", "fork_depth", "tip_depth", "internal")
    list_filter = ("internal",)
    search_fields = ("name", "adventure__title")
    readonly_fields = ("adventure", "parent", "fork_depth", "lineage", "tip_depth", "internal")


@admin.register(Action)
class ActionAdmin(ModeratedAdmin):
    list_display = ("id", "adventure", "depth", "kind", "excerpt", "actor", "seen_by", "live", "hidden", "created_at")
    list_filter = ("hidden", "kind", "live")
    search_fields = ("text", "adventure__title", "adventure__owner__username")
    # a secret (stories.party.secrets) is shown to moderation whoever it was told to (seen_by: user ids)
    readonly_fields = ("adventure", "branch", "depth", "kind", "text", "live", "hidden", "created_at", "edited_at")
    readonly_fields += ("author", "actor", "seen_by", "heard_by")
    actions = ["hide", "unhide"]
    moderator_actions = ("hide", "unhide")

    @admin.display(description="text")
    def excerpt(self, obj):
        return obj.text[:80]

    @admin.action(description="Hide: out of the story, prompts and memories", permissions=["change"])
    def hide(self, request, queryset):
        each(self, request, queryset, lambda a: self._set_hidden(a, True), "Hidden")

    @admin.action(description="Show again", permissions=["change"])
    def unhide(self, request, queryset):
        each(self, request, queryset, lambda a: self._set_hidden(a, False), "Shown again")

    @staticmethod
    def _set_hidden(action, hidden):
        moderation.action_set_hidden(action_id=action.pk, hidden=hidden)


@admin.register(StoryCard)
class StoryCardAdmin(ModeratedAdmin):
    list_display = ("id", "name", "type", "in_cast", "adventure")
    list_filter = ("type",)
    search_fields = ("name", "entry", "adventure__title")
    readonly_fields = ("adventure",)


@admin.register(AISettings)
class AISettingsAdmin(ModeratedAdmin):
    """Read-only for everyone, superusers included (moderators cannot even see it):
    only the player changes their endpoint, model or key, through the checked API."""

    list_display = ("user", "endpoint_url", "model", "has_api_key", "api_key_last4")
    exclude = ("api_key_encrypted",)
    search_fields = ("user__username",)

    def has_change_permission(self, request, obj=None):
        return False

    def has_add_permission(self, request, *args):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(ProviderCall)
class ProviderCallAdmin(ModeratedAdmin):
    list_display = ("created_at", "user", "purpose", "endpoint_host", "model", "outcome", "latency_ms", "demo")
    list_filter = ("purpose", "outcome", "demo")
    search_fields = ("user__username", "model", "endpoint_host")

    def has_change_permission(self, request, obj=None):
        return False

    def has_add_permission(self, request, *args):
        return False


class ReadOnlyRows:
    """Rows the product writes (a scenario through its versions, a report from a player): nobody
    edits or adds them here; moderators act through the list's actions."""

    def has_change_permission(self, request, obj=None):
        return obj is None and super().has_change_permission(request, obj)

    def has_add_permission(self, request, *args):
        return False


@admin.register(Scenario)
class ScenarioAdmin(ReadOnlyRows, ModeratedAdmin):
    list_display = ("title", "author", "visibility", "hidden", "rating", "open_reports", "play_count", "updated_at")
    list_filter = ("visibility", "hidden", "rating")
    search_fields = ("title", "description", "author__username", "key")
    fields = (
        "title",
        "author",
        "key",
        "visibility",
        "hidden",
        "moderator_notice",
        "rating",
        "tags",
        "description",
        "opening",
        "plot_essentials",
        "ai_instructions",
        "authors_note",
        "cards",
        "play_count",
        "published_at",
    )
    readonly_fields = fields
    actions = ["unpublish", "hide", "restore"]
    moderator_actions = ("unpublish", "hide", "restore")

    def get_queryset(self, request):
        reports = Count("reports", filter=Q(reports__status=ScenarioReport.Status.OPEN))
        return super().get_queryset(request).select_related("author", "current").annotate(open_report_count=reports)

    @admin.display(description="open reports", ordering="open_report_count")
    def open_reports(self, obj):
        return obj.open_report_count

    @admin.display(description="opening")
    def opening(self, obj):
        return obj.current.opening if obj.current else ""

    @admin.display(description="plot essentials")
    def plot_essentials(self, obj):
        return obj.current.plot_essentials if obj.current else ""

    @admin.display(description="AI instructions")
    def ai_instructions(self, obj):
        return obj.current.ai_instructions if obj.current else ""

    @admin.display(description="author's note")
    def authors_note(self, obj):
        return obj.current.authors_note if obj.current else ""

    @admin.display(description="story cards")
    def cards(self, obj):
        return (
            "; ".join(f"{c.get('name')}: {c.get('entry', '')[:200]}" for c in obj.current.cards) if obj.current else ""
        )

    @admin.action(description="Unpublish: private again, the author told", permissions=["change"])
    def unpublish(self, request, queryset):
        each(self, request, queryset, lambda sc: moderation.scenario_unpublish(scenario_id=sc.pk), "Unpublished")

    @admin.action(description="Hide: only its author sees it, never shared", permissions=["change"])
    def hide(self, request, queryset):
        each(
            self,
            request,
            queryset,
            lambda sc: moderation.scenario_set_hidden(scenario_id=sc.pk, hidden=True),
            "Hidden",
        )

    @admin.action(description="Restore: shown again as it was", permissions=["change"])
    def restore(self, request, queryset):
        each(
            self,
            request,
            queryset,
            lambda sc: moderation.scenario_set_hidden(scenario_id=sc.pk, hidden=False),
            "Restored",
        )


@admin.register(ScenarioReport)
class ScenarioReportAdmin(ReadOnlyRows, ModeratedAdmin):
    """The report queue: open reports first, oldest first."""

    list_display = ("created_at", "scenario", "scenario_visibility", "reason", "excerpt", "reporter", "status")
    list_filter = ("status", "reason")
    search_fields = ("scenario__title", "text", "reporter__username")
    list_select_related = ("scenario", "reporter")
    fields = ("scenario", "reporter", "reason", "text", "status", "created_at", "resolved_at")
    readonly_fields = fields
    actions = ["dismiss", "unpublish_scenario", "hide_scenario"]
    moderator_actions = ("dismiss", "unpublish_scenario", "hide_scenario")

    def get_queryset(self, request):
        open_first = Case(When(status=ScenarioReport.Status.OPEN, then=Value(0)), default=Value(1))
        return super().get_queryset(request).alias(open_first=open_first).order_by("open_first", "created_at")

    @admin.display(description="scenario is")
    def scenario_visibility(self, obj):
        return "hidden" if obj.scenario.hidden else obj.scenario.visibility

    @admin.display(description="text")
    def excerpt(self, obj):
        return obj.text[:120]

    @admin.action(description="Dismiss: nothing to do", permissions=["change"])
    def dismiss(self, request, queryset):
        each(self, request, queryset, lambda r: moderation.report_dismiss(report_id=r.pk), "Dismissed")

    @admin.action(description="Unpublish the reported scenario (the author is told why)", permissions=["change"])
    def unpublish_scenario(self, request, queryset):
        each(
            self,
            request,
            queryset,
            lambda r: moderation.scenario_unpublish(scenario_id=r.scenario_id, why=_reported(r)),
            "Scenario unpublished",
        )

    @admin.action(description="Hide the reported scenario (the author is told why)", permissions=["change"])
    def hide_scenario(self, request, queryset):
        each(
            self,
            request,
            queryset,
            lambda r: moderation.scenario_set_hidden(scenario_id=r.scenario_id, hidden=True, why=_reported(r)),
            "Scenario hidden",
        )


def _reported(report: ScenarioReport) -> str:
    return f"reported as {report.get_reason_display()}"


@admin.register(StoryReport)
class StoryReportAdmin(ReadOnlyRows, ModeratedAdmin):
    """Reports from stories played together: open first, oldest first; the reported node is shown
    whoever it was told to."""

    list_display = ("created_at", "adventure", "reason", "reported", "excerpt", "reporter", "status")
    list_filter = ("status", "reason")
    search_fields = ("adventure__title", "text", "reporter__username", "action__text")
    list_select_related = ("adventure", "action", "reporter")
    fields = ("adventure", "action", "reported", "reporter", "reason", "text", "status", "created_at", "resolved_at")
    readonly_fields = fields
    actions = ["dismiss", "hide_node", "hide_story"]
    moderator_actions = ("dismiss", "hide_node", "hide_story")

    def get_queryset(self, request):
        open_first = Case(When(status=StoryReport.Status.OPEN, then=Value(0)), default=Value(1))
        return super().get_queryset(request).alias(open_first=open_first).order_by("open_first", "created_at")

    @admin.display(description="reported node")
    def reported(self, obj):
        return obj.action.text[:200] if obj.action_id else "(the whole story)"

    @admin.display(description="text")
    def excerpt(self, obj):
        return obj.text[:120]

    @admin.action(description="Dismiss: nothing to do", permissions=["change"])
    def dismiss(self, request, queryset):
        each(self, request, queryset, lambda r: moderation.story_report_settle(report=r, hide=None), "Dismissed")

    @admin.action(description="Hide the reported node: out of every member's view and memory", permissions=["change"])
    def hide_node(self, request, queryset):
        each(self, request, queryset, lambda r: moderation.story_report_settle(report=r, hide="node"), "Node hidden")

    @admin.action(description="Hide the whole story: its members lose it at once", permissions=["change"])
    def hide_story(self, request, queryset):
        each(self, request, queryset, lambda r: moderation.story_report_settle(report=r, hide="story"), "Story hidden")


@admin.register(Membership)
class MembershipAdmin(ReadOnlyRows, ModeratedAdmin):
    """Who plays or watches another's story (stories played together): read-only here; the owner
    removes a member, a member leaves; a moderator hides the story or suspends the account."""

    list_display = ("id", "adventure", "user", "role", "character", "joined_at")
    list_filter = ("role",)
    search_fields = ("adventure__title", "user__username", "character__name")
    readonly_fields = [f.name for f in Membership._meta.fields]


@admin.register(Invite)
class InviteAdmin(ReadOnlyRows, ModeratedAdmin):
    """A story's invitations, by username or by link (a link's token is never kept, only its hash)."""

    list_display = ("id", "adventure", "user", "role", "created_at", "revoked_at")
    list_filter = ("role",)
    search_fields = ("adventure__title", "user__username")
    readonly_fields = [f.name for f in Invite._meta.fields if f.name != "token_hash"]
    exclude = ("token_hash",)


@admin.register(Party)
class PartyAdmin(ReadOnlyRows, ModeratedAdmin):
    list_display = ("adventure", "turn_mode", "idle_skip_s")
    readonly_fields = [f.name for f in Party._meta.fields]
