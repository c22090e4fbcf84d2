from django.contrib import admin

from config.admin_site import ModeratedAdmin, each
from memory.agents import worlds
from memory.models import (
    Agent,
    AgentMemory,
    AgentMemoryKey,
    CardClaim,
    CardProposal,
    Cursor,
    Memory,
    PassRun,
    World,
    WorldToken,
)
from memory.story import memories


@admin.register(Memory)
class MemoryAdmin(ModeratedAdmin):
    list_display = (
        "id",
        "adventure",
        "character",
        "excerpt",
        "source_start",
        "source_end",
        "pinned",
        "forgotten",
        "stale",
        "use_count",
        "embedding_model",
    )
    list_filter = ("pinned", "forgotten", "stale", "offline", "kind")
    search_fields = ("text", "adventure__title", "character__name")
    exclude = ("embedding",)
    # whose memory it is (a card of its own adventure) is set by the pass, never moved by hand
    readonly_fields = (
        "adventure",
        "branch",
        "depth",
        "source_start",
        "source_end",
        "character",
        "kind",
        "importance",
        "embedding_model",
        "use_count",
        "last_used_at",
    )
    list_select_related = ("adventure", "character")
    actions = ["forget", "restore", "pin", "unpin"]
    moderator_actions = ("forget", "restore", "pin", "unpin")

    @admin.display(description="text")
    def excerpt(self, obj):
        return obj.text[:80]

    def _set(self, request, queryset, message, **fields):
        each(self, request, queryset, lambda m: memories.memory_update(memory=m, **fields), message)

    @admin.action(description="Forget (kept, restorable)", permissions=["change"])
    def forget(self, request, queryset):
        self._set(request, queryset, "Forgotten", forgotten=True)

    @admin.action(description="Restore", permissions=["change"])
    def restore(self, request, queryset):
        self._set(request, queryset, "Restored", forgotten=False)

    @admin.action(description="Pin", permissions=["change"])
    def pin(self, request, queryset):
        self._set(request, queryset, "Pinned", pinned=True)

    @admin.action(description="Unpin", permissions=["change"])
    def unpin(self, request, queryset):
        self._set(request, queryset, "Unpinned", pinned=False)


@admin.register(CardClaim)
class CardClaimAdmin(ModeratedAdmin):
    """What the story changed on a card (read by the pass, reviewed by the player): read-only here; a
    moderator's hide of its evidence passage takes it off every path."""

    list_display = ("id", "adventure", "card", "slot", "value", "state", "offline", "edited", "created_at")
    list_filter = ("slot", "state", "offline", "edited")
    search_fields = ("value", "text", "card__name", "adventure__title")
    readonly_fields = [f.name for f in CardClaim._meta.fields]


@admin.register(CardProposal)
class CardProposalAdmin(ModeratedAdmin):
    list_display = ("id", "adventure", "name", "type", "state", "created_at")
    list_filter = ("state", "type")
    search_fields = ("name", "adventure__title")
    readonly_fields = [f.name for f in CardProposal._meta.fields]


@admin.register(Cursor)
class CursorAdmin(ModeratedAdmin):
    list_display = ("adventure", "memory_depth", "summary_depth", "failures", "last_error_at")
    readonly_fields = [f.name for f in Cursor._meta.fields]


@admin.register(PassRun)
class PassRunAdmin(ModeratedAdmin):
    list_display = ("started_at", "adventure", "worker", "outcome", "memories_created", "finished_at")
    list_filter = ("outcome",)
    readonly_fields = [f.name for f in PassRun._meta.fields]


@admin.register(World)
class WorldAdmin(ModeratedAdmin):
    list_display = ("id", "name", "owner", "agent_capacity", "created_at")
    search_fields = ("name", "owner__username")
    readonly_fields = ("owner", "created_at")
    actions = ["delete_agent_memories"]
    moderator_actions = ("delete_agent_memories",)

    @admin.action(description="Delete every agent memory of these worlds", permissions=["change"])
    def delete_agent_memories(self, request, queryset):
        each(self, request, queryset, lambda w: worlds.world_memories_delete(world=w), "Agent memories deleted")


@admin.register(WorldToken)
class WorldTokenAdmin(ModeratedAdmin):
    list_display = ("prefix", "world", "name", "created_at", "last_used_at", "revoked_at")
    exclude = ("key_hash",)
    readonly_fields = ("world", "prefix", "created_at", "last_used_at")


@admin.register(Agent)
class AgentAdmin(ModeratedAdmin):
    list_display = ("id", "external_id", "display_name", "world", "created_at")
    search_fields = ("external_id", "display_name", "world__name")
    readonly_fields = ("world",)


class AgentMemoryKeyInline(admin.TabularInline):
    """A memory's fact keys, as the agent's pass made them (read-only: they follow the memory's text)."""

    model = AgentMemoryKey
    fields = ("text", "embedding_model")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(AgentMemory)
class AgentMemoryAdmin(ModeratedAdmin):
    inlines = [AgentMemoryKeyInline]
    list_display = ("id", "agent", "kind", "partner", "location", "excerpt", "pinned", "retrieval_count", "occurred_at")
    list_filter = ("kind", "pinned")
    search_fields = ("content", "agent__external_id", "partner", "location")
    exclude = ("embedding",)
    readonly_fields = (
        "agent",
        "world",
        "embedding_model",
        "consolidated_into",
        "retrieval_count",
        "last_retrieved_at",
        "keys_made",
    )
    moderator_actions = ("delete_selected",)

    def save_model(self, request, obj, form, change):
        if change and "content" in form.changed_data:
            # new text: its vector and fact keys are made anew, as for an edit over the API
            fields = {name: form.cleaned_data[name] for name in form.changed_data}
            worlds.agent_memory_update(memory=AgentMemory.objects.get(pk=obj.pk), **fields)
        else:
            super().save_model(request, obj, form, change)

    @admin.display(description="content")
    def excerpt(self, obj):
        return obj.content[:80]
