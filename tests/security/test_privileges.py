"""Privilege boundaries in the admin: a moderator is a moderator. Every admin URL
the admin site knows is walked as a moderator, by every method, with forms that
try every escalation (passwords, staff, superuser, groups, permissions,
is_active, owners, tokens, AI settings); nothing changes in the database. What
moderators may do (docs/security.md's list) is run action by action and changes only
what it says. A new admin page or action the walk does not know fails it."""

import re

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.sessions.models import Session
from django.db import models
from django.urls import URLPattern, URLResolver, reverse

from memory.models import AgentMemory, Memory, World
from stories.accounts import ai_settings
from stories.models import Action, Adventure, AISettings, Invite, Membership
from tests.conftest import ALICE_KEY

pytestmark = pytest.mark.django_db
User = get_user_model()

# What moderators may do, per model: docs/security.md's list, nothing else.
MODERATOR_ACTIONS = {
    "auth.user": {"suspend", "reinstate"},
    "stories.adventure": {"hide", "unhide", "rerun_memory_pass"},
    "stories.action": {"hide", "unhide"},
    "stories.scenario": {"unpublish", "hide", "restore"},
    "stories.scenarioreport": {"dismiss", "unpublish_scenario", "hide_scenario"},
    "stories.storyreport": {"dismiss", "hide_node", "hide_story"},
    "memory.memory": {"forget", "restore", "pin", "unpin"},
    "memory.world": {"delete_agent_memories"},
    "memory.agentmemory": {"delete_selected"},
}
# Admin URL names the walk knows: per model, and the site's own.
MODEL_PAGES = {"changelist", "add", "change", "delete", "history", "password_change"}
SITE_PAGES = {
    "index",
    "login",
    "logout",
    "password_change",
    "password_change_done",
    "autocomplete",
    "jsi18n",
    "view_on_site",
    "app_list",
    None,
}
METHODS = ["get", "head", "options", "post", "put", "patch", "delete"]


@pytest.fixture
def superuser(django_user_model):
    return django_user_model.objects.create_superuser(username="root", password="root-pass-123")


@pytest.fixture
def mod_user(django_user_model):
    user = django_user_model.objects.create_user(username="mod", password="mod-pass-123", is_staff=True)
    user.groups.add(Group.objects.get(name="Moderators"))
    return user


@pytest.fixture
def mod(mod_user, client):
    client.force_login(mod_user)
    return client


def snapshot():
    """Every row of every table but sessions (logging in makes one)."""
    out = {}
    for model in apps.get_models():
        if model is Session:
            continue
        out[model._meta.label] = list(model.objects.order_by("pk").values())
    return out


def diff(before, after):
    """{table: [what changed, row by row]} for every table that changed."""
    out = {}
    for label in before:
        if before[label] == after[label]:
            continue
        old = {row["id"]: row for row in before[label]}
        new = {row["id"]: row for row in after[label]}
        rows = [f"{pk}: gone" for pk in old.keys() - new.keys()] + [f"{pk}: new" for pk in new.keys() - old.keys()]
        rows += [
            f"{pk}: " + ", ".join(k for k in old[pk] if old[pk][k] != new[pk][k])
            for pk in old.keys() & new.keys()
            if old[pk] != new[pk]
        ]
        out[label] = rows
    return out


def hostile_form(model, *, mod_user, on: bool):
    """A POST that tries to set every field of ``model`` to what a moderator would want."""
    data = {}
    for field in model._meta.get_fields():
        if not getattr(field, "concrete", False) or field.auto_created and not field.is_relation:
            continue
        name = field.name
        if isinstance(field, models.BooleanField):
            if on:
                data[name] = "on"
        elif isinstance(field, models.ManyToManyField):
            data[name] = [str(pk) for pk in field.related_model.objects.values_list("pk", flat=True)]
        elif isinstance(field, models.ForeignKey):
            target = (
                mod_user.pk
                if field.related_model is User
                else field.related_model.objects.order_by("-pk").values_list("pk", flat=True).first()
            )
            data[name] = str(target or "")
        elif isinstance(field, models.DateTimeField):
            data.update({name: "2030-01-01 00:00:00", f"{name}_0": "2030-01-01", f"{name}_1": "00:00:00"})
        elif isinstance(field, (models.IntegerField, models.FloatField)):
            data[name] = "7"
        elif isinstance(field, models.JSONField):
            data[name] = '{"pwned": true}'
        else:
            data[name] = "pwned-" + name
    # the password pages, the delete confirmation, and Django's "save" buttons
    data.update(
        {
            "password": "pwned-pass-987",
            "password1": "pwned-pass-987",
            "password2": "pwned-pass-987",
            "usable_password": "true",
            "set_usable_password": "true",
            "post": "yes",
            "_save": "Save",
            "old_password": "mod-pass-123",
            "new_password1": "pwned-pass-987",
            "new_password2": "pwned-pass-987",
        }
    )
    return data


def admin_routes():
    """(name, pattern, model or None) for every URL the admin site serves."""
    out = []

    def walk(patterns, prefix, model):
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern), model)
            elif isinstance(p, URLPattern):
                out.append((p.name, prefix + str(p.pattern), model))

    for model, model_admin in admin.site._registry.items():
        walk(model_admin.urls, f"{model._meta.app_label}/{model._meta.model_name}/", model)
    site_only = [p for p in admin.site.get_urls() if not isinstance(p, URLResolver)]
    walk(site_only, "", None)
    return out


def url_for(pattern, model, *, obj_pk):
    url = pattern
    url = re.sub(r"<path:object_id>|<id>", str(obj_pk), url)
    url = url.replace("<path:content_type_id>", "1")
    url = re.sub(r"\^\(\?P<app_label>[\w|]+\)/\$", "stories/", url)
    url = url.replace("(?P<url>.*)$", "nothing-here/")
    url = url.replace("^", "").replace("$", "")
    return "/admin/" + url


@pytest.fixture
def everything(alices_world, bobs_world, superuser, mod_user, alice, django_user_model):
    """One of everything, and the players the moderator would most like to become."""
    staff = django_user_model.objects.create_user(username="staffer", password="staff-pass-123", is_staff=True)
    return {**alices_world, "superuser": superuser, "staff": staff}


@pytest.mark.slow  # a sweep or a bank at scale: make test runs it
def test_a_moderator_walking_every_admin_page_by_every_method_changes_nothing(everything, mod, mod_user, alice):
    routes = admin_routes()
    names = set()
    for name, pattern, model in routes:
        kind = name.split("_", 2)[-1] if model is not None and name else name
        if model is not None:
            assert kind in MODEL_PAGES or name is None, f"an admin page the walk does not know: {name} ({pattern})"
        else:
            assert name in SITE_PAGES, f"an admin page the walk does not know: {name} ({pattern})"
        names.add(name)
    # Every action on every model is either the moderators' or known to be refused to them.
    for model, model_admin in admin.site._registry.items():
        label = model._meta.label_lower
        declared = set(model_admin.actions or []) | {"delete_selected"}
        unknown = declared - MODERATOR_ACTIONS.get(label, set()) - {"delete_selected"}
        assert not unknown, f"{label} has admin actions the walk does not know: {unknown}"

    before = snapshot()
    tried = 0
    for name, pattern, model in routes:
        if name in ("logout", "login"):
            continue
        targets = [None]
        if model is User:
            targets = [everything["superuser"].pk, alice.pk, everything["staff"].pk]
        elif model is not None:
            targets = list(model.objects.order_by("pk").values_list("pk", flat=True)[:1]) or [1]
        for pk in targets:
            url = url_for(pattern, model, obj_pk=pk)
            if model is AgentMemory and name and name.endswith("_delete"):
                continue  # a moderator may delete an agent memory: tested with the actions below
            for method in METHODS:
                for on in (True, False) if method == "post" else (True,):
                    data = hostile_form(model or User, mod_user=mod_user, on=on)
                    if method in ("get", "head", "options"):
                        response = getattr(mod, method)(url)
                    elif method == "post":
                        response = mod.post(url, data)
                    else:
                        response = getattr(mod, method)(url, data, content_type="application/x-www-form-urlencoded")
                    tried += 1
                    assert response.status_code < 500, f"{method.upper()} {url} -> {response.status_code}"
        # the list page's actions: every action that is not the moderators' is refused
        if name and name.endswith("_changelist") and model is not None:
            model_admin = admin.site._registry[model]
            allowed = MODERATOR_ACTIONS.get(model._meta.label_lower, set())
            every = set(model_admin.actions or []) | {"delete_selected"}
            for action in sorted(every - allowed):
                pks = [str(pk) for pk in model.objects.values_list("pk", flat=True)]
                response = mod.post(
                    url_for(pattern, model, obj_pk=0), {"action": action, "_selected_action": pks, "post": "yes"}
                )
                tried += 1
                assert response.status_code < 500
    assert tried > 500
    changed = diff(before, snapshot())
    # Their own password is theirs to change (the site's own password page), nobody else's.
    if changed.get("auth.User") == [f"{mod_user.pk}: password"]:
        del changed["auth.User"]
    assert not changed, f"a moderator changed: {changed}"
    # and the escalations the issue saw, one by one
    everything["superuser"].refresh_from_db()
    assert everything["superuser"].check_password("root-pass-123") and everything["superuser"].is_active
    assert not User.objects.filter(username="mod", is_superuser=True).exists()
    assert World.objects.get(pk=everything["world_id"]).owner == alice


def test_the_password_page_is_closed_to_moderators_and_the_superuser_keeps_their_password(everything, mod, client):
    from rest_framework.test import APIClient

    root = everything["superuser"]
    page = reverse("admin:auth_user_password_change", args=[root.pk])
    assert mod.get(page).status_code == 403
    assert mod.post(page, {"password1": "Taken-over-987", "password2": "Taken-over-987"}).status_code == 403
    login = APIClient().post("/api/auth/login/", {"username": "root", "password": "Taken-over-987"}, format="json")
    assert login.status_code == 401


def test_a_moderator_cannot_deactivate_a_superuser_through_the_user_form(everything, mod):
    root = everything["superuser"]
    response = mod.post(reverse("admin:auth_user_change", args=[root.pk]), {"username": "root"})
    assert response.status_code == 403
    root.refresh_from_db()
    assert root.is_active and root.is_superuser


def test_a_moderator_cannot_take_a_world(everything, mod, mod_user, alice_plays):
    world_id = everything["world_id"]
    response = mod.post(
        reverse("admin:memory_world_change", args=[world_id]),
        {"name": "mine", "owner": mod_user.pk, "agent_capacity": 10},
    )
    assert response.status_code == 403
    assert World.objects.get(pk=world_id).owner_id == alice_plays.user.pk
    assert alice_plays.get(f"/api/worlds/{world_id}/").status_code == 200


def test_moderator_actions_change_exactly_what_the_readme_says(everything, mod, mod_user, alice, bob):
    staff, root = everything["staff"], everything["superuser"]
    users = reverse("admin:auth_user_changelist")
    everyone = [str(u.pk) for u in (alice, bob, staff, root, mod_user)]
    mod.post(users, {"action": "suspend", "_selected_action": everyone})
    named = User.objects.filter(username__in=["alice", "bob", "staffer", "root", "mod"])
    assert dict(named.values_list("username", "is_active")) == {
        "alice": False,
        "bob": False,
        "staffer": True,
        "root": True,
        "mod": True,
    }
    User.objects.filter(username="staffer").update(is_active=False)
    mod.post(users, {"action": "reinstate", "_selected_action": everyone})
    assert dict(named.values_list("username", "is_active")) == {
        "alice": True,
        "bob": True,
        "staffer": False,
        "root": True,
        "mod": True,
    }, "staff are not the moderators'"

    before = snapshot()
    aid = everything["adventure_id"]
    mod.post(reverse("admin:stories_adventure_changelist"), {"action": "hide", "_selected_action": [aid]})
    assert Adventure.objects.get(pk=aid).hidden
    mod.post(reverse("admin:stories_adventure_changelist"), {"action": "unhide", "_selected_action": [aid]})
    action = Action.objects.filter(adventure_id=aid).order_by("-depth").first()
    mod.post(reverse("admin:stories_action_changelist"), {"action": "hide", "_selected_action": [action.pk]})
    assert Action.objects.get(pk=action.pk).hidden
    mod.post(reverse("admin:stories_action_changelist"), {"action": "unhide", "_selected_action": [action.pk]})
    memory = Memory.objects.get(pk=everything["memory_id"])
    for name, field, value in [
        ("forget", "forgotten", True),
        ("restore", "forgotten", False),
        ("pin", "pinned", True),
        ("unpin", "pinned", False),
    ]:
        mod.post(reverse("admin:memory_memory_changelist"), {"action": name, "_selected_action": [memory.pk]})
        assert getattr(Memory.objects.get(pk=memory.pk), field) is value, name
    assert (
        mod.post(
            reverse("admin:stories_adventure_changelist"), {"action": "rerun_memory_pass", "_selected_action": [aid]}
        ).status_code
        == 302
    )
    changed = set(diff(before, snapshot()))
    # the hide/show of an action rewrites that branch's memories (withdrawn and written again); the log records all
    assert changed <= {"admin.LogEntry", "stories.Adventure", "stories.Action", "memory.Memory", "memory.Cursor"}
    assert Adventure.objects.get(pk=aid).hidden is False and Action.objects.get(pk=action.pk).hidden is False

    one = AgentMemory.objects.filter(world_id=everything["world_id"]).first()
    bobs = AgentMemory.objects.exclude(world_id=everything["world_id"]).count()
    mod.post(
        reverse("admin:memory_agentmemory_changelist"),
        {"action": "delete_selected", "_selected_action": [one.pk], "post": "yes"},
    )
    assert not AgentMemory.objects.filter(pk=one.pk).exists()
    AgentMemory.objects.create(
        agent=one.agent, world_id=everything["world_id"], kind="note", content="more", occurred_at=one.occurred_at
    )
    mod.post(
        reverse("admin:memory_world_changelist"),
        {"action": "delete_agent_memories", "_selected_action": [everything["world_id"]]},
    )
    assert not AgentMemory.objects.filter(world_id=everything["world_id"]).exists()
    assert AgentMemory.objects.count() == bobs, "only the chosen world's memories go"


def test_nobody_edits_ai_settings_in_the_admin_not_even_a_superuser(everything, client, alice, fake_llm):
    root = everything["superuser"]
    client.force_login(root)
    settings_row = AISettings.objects.get(user=alice)
    page = reverse("admin:stories_aisettings_change", args=[settings_row.pk])
    assert client.get(page).status_code == 200, "superusers may look (the key is never shown)"
    assert ALICE_KEY not in client.get(page).content.decode()
    client.post(
        page, {"user": alice.pk, "endpoint_url": "http://169.254.169.254/v1", "model": "stolen", "_save": "Save"}
    )
    settings_row.refresh_from_db()
    assert settings_row.endpoint_url == fake_llm.url and settings_row.model == "fake-model"
    assert client.get(reverse("admin:stories_aisettings_add")).status_code == 403
    assert (
        client.post(reverse("admin:stories_aisettings_delete", args=[settings_row.pk]), {"post": "yes"}).status_code
        == 403
    )
    assert AISettings.objects.filter(pk=settings_row.pk).exists()
    # and no admin page shows or mints a player's API token
    assert client.get("/admin/authtoken/tokenproxy/").status_code == 404
    assert ai_settings.connection_for_background(user_id=alice.pk, purpose="summary").endpoint_url == fake_llm.url


def test_every_admin_form_a_superuser_can_open_either_saves_or_answers_a_form_error(everything, superuser):
    """Six add forms answered 500: their required owner field was read-only, so no save could succeed."""
    from django.test import Client

    root = Client()
    root.force_login(superuser)
    before = snapshot()
    opened = refused = 0
    for model, model_admin in admin.site._registry.items():
        info = model._meta.app_label, model._meta.model_name
        add = f"/admin/{info[0]}/{info[1]}/add/"
        page = root.get(add)
        assert page.status_code in (200, 403), f"{add} -> {page.status_code}"
        if page.status_code == 403:
            refused += 1
            assert root.post(add, {}).status_code == 403, f"{add}: a refused form must refuse its POST too"
            continue
        opened += 1
        empty = root.post(add, {})
        assert empty.status_code == 200 and empty.context["adminform"].form.errors, (
            f"{add}: an empty form must answer with its errors, not {empty.status_code}"
        )
        pk = model.objects.order_by("pk").values_list("pk", flat=True).first()
        if pk is not None:
            change = f"/admin/{info[0]}/{info[1]}/{pk}/change/"
            assert root.get(change).status_code in (200, 403), change
            response = root.post(change, {})
            assert response.status_code in (200, 302, 403), f"{change} -> {response.status_code}"
    assert opened >= 2 and refused >= 6, (opened, refused)  # users and groups open; the product's rows do not
    assert [len(rows) for rows in snapshot()] == [len(rows) for rows in before], "an empty form stored a row"


def test_a_moderator_sees_who_plays_each_story_and_its_invitations_but_never_a_links_token(everything, mod):
    from django.urls import reverse

    listed = mod.get(reverse("admin:stories_membership_changelist"))
    assert listed.status_code == 200 and "ann-friend" in listed.content.decode()
    invites = mod.get(reverse("admin:stories_invite_changelist"))
    assert invites.status_code == 200 and "ann-invitee" in invites.content.decode()
    link = Invite.objects.exclude(token_hash="").filter(adventure_id=everything["adventure_id"]).get()
    page = mod.get(reverse("admin:stories_invite_change", args=[link.pk])).content.decode()
    assert everything["code"] not in page and link.token_hash not in page
    assert mod.post(reverse("admin:stories_membership_changelist"), {"action": "delete_selected"}).status_code in (
        200,
        302,
    )
    assert Membership.objects.filter(adventure_id=everything["adventure_id"]).exists(), "read-only: nothing removed"
