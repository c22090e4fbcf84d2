"""The admin site and the one rule every admin page follows.

Moderators (staff in the "Moderators" group, or any staff who is not a
superuser) do exactly what docs/security.md lists, through the list pages' actions:
hide and show adventures and actions, suspend and reinstate players who are not
staff, forget, restore and pin memories, re-run a memory pass, delete a world's
agent memories, unpublish, hide and restore scenarios and dismiss their reports. Every change form, add form and password page is closed to
them: forms are read-only, so no field (password, staff, superuser, groups,
permissions, is_active, owner, tokens) can be edited by a moderator.

Superusers keep Django's admin, except that nobody, a superuser included,
edits a player's AI settings (endpoint, model, key) or moves ownership, and
no one gets an add form that could not save: a model whose required field is
read-only here (an adventure's owner, a branch's adventure, a world token's
world) is made by the product (play, the API), never by a blank admin form.

The login page shares the site's login throttle (stories.accounts.auth provides it when ready).
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.forms import AdminAuthenticationForm

from config.errors import DomainError


def is_moderator_only(request) -> bool:
    """Staff without superuser rights: what moderators are."""
    return not request.user.is_superuser


class ModeratedAdmin(admin.ModelAdmin):
    """The base of every ModelAdmin of the site: moderators see forms read-only
    and change rows only through the actions their permissions allow."""

    # Actions moderators may run on this model (superusers may run every action).
    moderator_actions: tuple[str, ...] = ()

    def has_change_permission(self, request, obj=None):
        # obj None asks "may they run actions on the list"; an object asks "may they edit its form".
        if obj is not None and is_moderator_only(request):
            return False
        return super().has_change_permission(request, obj)

    def has_add_permission(self, request, *args):
        if is_moderator_only(request) or not self.add_form_can_save(request):
            return False
        return super().has_add_permission(request, *args)

    def add_form_can_save(self, request) -> bool:
        """False when a field every row needs is read-only: the form could only fail."""
        readonly = set(self.get_readonly_fields(request))
        for field in self.model._meta.concrete_fields:
            needed = not (
                field.null
                or field.blank
                or field.has_default()
                or field.primary_key
                or getattr(field, "auto_now", False)
                or getattr(field, "auto_now_add", False)
            )
            if needed and field.name in readonly:
                return False
        return True

    def has_delete_permission(self, request, obj=None):
        if is_moderator_only(request) and "delete_selected" not in self.moderator_actions:
            return False
        return super().has_delete_permission(request, obj)

    def get_actions(self, request):
        actions = super().get_actions(request)
        if is_moderator_only(request):
            actions = {name: a for name, a in actions.items() if name in self.moderator_actions}
        return actions


def each(modeladmin, request, queryset, change, message):
    """Run ``change`` on every selected row, logging each in the admin log. A row the domain
    refuses (a reply is being written for its story, say) is left as it was and named in a
    warning with the reason; the others are changed."""
    done, refused = 0, []
    for obj in queryset:
        try:
            change(obj)
        except DomainError as error:
            refused.append(f"{obj} ({error.message})")
            continue
        modeladmin.log_change(request, obj, message)
        done += 1
    if done:
        modeladmin.message_user(request, f"{message}: {done}", messages.SUCCESS)
    if refused:
        modeladmin.message_user(request, "not changed: " + "; ".join(refused), messages.WARNING)


def provide_login_throttle(*, form_mixin: type, throttled_response) -> None:
    """The site's login throttle, provided by the app that keeps it (stories.accounts.auth, when ready):
    ``form_mixin`` refuses a throttled login with the error code "throttled", and
    ``throttled_response(response)`` makes that page a 429 with Retry-After."""
    EverloreAdminSite.login_form = type("ThrottledAdminLoginForm", (form_mixin, AdminAuthenticationForm), {})
    EverloreAdminSite.throttled_response = staticmethod(throttled_response)


class EverloreAdminSite(admin.AdminSite):
    site_header = "Everlore moderation"
    login_form = AdminAuthenticationForm
    throttled_response = None  # provide_login_throttle sets it

    def login(self, request, extra_context=None):
        response = super().login(request, extra_context)
        form = (getattr(response, "context_data", None) or {}).get("form")
        if self.throttled_response and form is not None and form.has_error("__all__", "throttled"):
            return self.throttled_response(response)
        return response
