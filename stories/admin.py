"""Moderation in the Django admin (the rules: config.admin_site). API keys are
never shown and AI settings are read-only for everyone: staff cannot redirect a
player's key."""

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.core.exceptions import PermissionDenied
from rest_framework.authtoken.admin import TokenProxy

from config.admin_site import ModeratedAdmin, each, is_moderator_only
from stories import moderation
from stories.models import Action, Adventure, AISettings, Branch, ProviderCall, StoryCard

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
    list_display = ("id", "adventure", "depth", "kind", "excerpt", "live", "hidden", "created_at")
    list_filter = ("hidden", "kind", "live")
    search_fields = ("text", "adventure__title", "adventure__owner__username")
    readonly_fields = ("adventure", "branch", "depth", "kind", "text", "live", "hidden", "created_at", "edited_at")
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
