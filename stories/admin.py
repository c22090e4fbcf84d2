"""Moderation in the Django admin. API keys are never shown: AISettings hides
the encrypted column, and moderators have no permission on AISettings at all."""

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin

from stories import moderation
from stories.models import Action, Adventure, AISettings, Branch, ProviderCall, StoryCard
from workers.tasks import enqueue_post_turn

User = get_user_model()
admin.site.site_header = "Everlore moderation"


def _each(modeladmin, request, queryset, change, message):
    for obj in queryset:
        change(obj)
        modeladmin.log_change(request, obj, message)
    modeladmin.message_user(request, f"{message}: {queryset.count()}", messages.SUCCESS)


admin.site.unregister(User)


@admin.register(User)
class PlayerAdmin(UserAdmin):
    list_display = ("username", "email", "is_active", "is_staff", "date_joined", "last_login")
    actions = ["suspend", "reinstate"]

    def get_readonly_fields(self, request, obj=None):
        if request.user.is_superuser:
            return super().get_readonly_fields(request, obj)
        # moderators may only suspend and reinstate
        return ("username", "password", "first_name", "last_name", "email", "is_staff", "is_superuser", "groups",
                "user_permissions", "last_login", "date_joined")

    @admin.action(description="Suspend: cannot log in or play; tokens stop working", permissions=["change"])
    def suspend(self, request, queryset):
        _each(self, request, queryset.exclude(pk=request.user.pk).exclude(is_superuser=True),
              lambda u: moderation.user_suspend(user_id=u.pk), "Suspended")

    @admin.action(description="Reinstate suspended users", permissions=["change"])
    def reinstate(self, request, queryset):
        _each(self, request, queryset, lambda u: moderation.user_suspend(user_id=u.pk, suspended=False), "Reinstated")


@admin.register(Adventure)
class AdventureAdmin(admin.ModelAdmin):
    list_display = ("id", "title", "owner", "hidden", "memory_bank_enabled", "updated_at")
    list_filter = ("hidden", "memory_bank_enabled", "auto_summarize")
    search_fields = ("title", "owner__username", "plot_essentials")
    readonly_fields = ("owner", "head_branch", "created_at", "updated_at")
    actions = ["hide", "unhide", "rerun_memory_pass"]

    @admin.action(description="Hide from everyone but staff", permissions=["change"])
    def hide(self, request, queryset):
        _each(self, request, queryset, lambda a: moderation.adventure_set_hidden(adventure_id=a.pk, hidden=True),
              "Hidden")

    @admin.action(description="Show again", permissions=["change"])
    def unhide(self, request, queryset):
        _each(self, request, queryset, lambda a: moderation.adventure_set_hidden(adventure_id=a.pk, hidden=False),
              "Shown again")

    @admin.action(description="Re-run the memory pass", permissions=["view"])
    def rerun_memory_pass(self, request, queryset):
        _each(self, request, queryset, lambda a: enqueue_post_turn(a.pk), "Memory pass queued")


@admin.register(Branch)
class BranchAdmin(admin.ModelAdmin):
    list_display = ("id", "adventure", "name", "parent", "fork_depth", "tip_depth", "internal")
    list_filter = ("internal",)
    search_fields = ("name", "adventure__title")
    readonly_fields = ("adventure", "parent", "fork_depth", "lineage", "tip_depth", "internal")


@admin.register(Action)
class ActionAdmin(admin.ModelAdmin):
    list_display = ("id", "adventure", "depth", "kind", "excerpt", "live", "hidden", "created_at")
    list_filter = ("hidden", "kind", "live")
    search_fields = ("text", "adventure__title", "adventure__owner__username")
    readonly_fields = ("adventure", "branch", "depth", "kind", "text", "live", "hidden", "created_at", "edited_at")
    actions = ["hide", "unhide"]

    @admin.display(description="text")
    def excerpt(self, obj):
        return obj.text[:80]

    @admin.action(description="Hide: out of the story, prompts and memories", permissions=["change"])
    def hide(self, request, queryset):
        _each(self, request, queryset, lambda a: moderation.action_set_hidden(action_id=a.pk, hidden=True), "Hidden")

    @admin.action(description="Show again", permissions=["change"])
    def unhide(self, request, queryset):
        _each(self, request, queryset, lambda a: moderation.action_set_hidden(action_id=a.pk, hidden=False),
              "Shown again")


@admin.register(StoryCard)
class StoryCardAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "type", "adventure")
    list_filter = ("type",)
    search_fields = ("name", "entry", "adventure__title")


@admin.register(AISettings)
class AISettingsAdmin(admin.ModelAdmin):
    """Superusers only (moderators have no permission here). The key itself is never shown."""

    list_display = ("user", "endpoint_url", "model", "has_api_key", "api_key_last4")
    exclude = ("api_key_encrypted",)
    readonly_fields = ("api_key_last4",)
    search_fields = ("user__username",)


@admin.register(ProviderCall)
class ProviderCallAdmin(admin.ModelAdmin):
    list_display = ("created_at", "user", "purpose", "endpoint_host", "model", "outcome", "latency_ms", "demo")
    list_filter = ("purpose", "outcome", "demo")
    search_fields = ("user__username", "model", "endpoint_host")

    def has_change_permission(self, request, obj=None):
        return False

    def has_add_permission(self, request):
        return False
