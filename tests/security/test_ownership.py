"""Object ownership everywhere: every route the URL resolver knows (API, web
pages, admin) and every MCP tool, called by bob with alice's ids and every
method, answers no 2xx, 404 on object routes, leaks none of alice's text, and
leaves the database as it was. A route or tool the sweep cannot classify fails it."""

import asyncio
import re

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.urls import URLPattern, get_resolver
from drf_spectacular.generators import SchemaGenerator

from memory.agents import agent_events, worlds
from memory.models import Agent, AgentMemory, Cursor, Memory, World, WorldToken
from stories.models import (
    Action,
    Adventure,
    AISettings,
    Branch,
    ImportJob,
    Invite,
    Membership,
    Scenario,
    ScenarioReport,
    ScenarioVersion,
    StoryCard,
)
from tests.support.mcp import session_calls

METHODS = ["get", "head", "options", "post", "put", "patch", "delete"]
SECRETS = ["Alice's secret", "A silver key.", "Alice hid the key.", "Alice's town", "meet at the old mill"]

# Routes without ids: bob only ever sees his own rows there; each is named so
# that a new one must be looked at before the sweep passes.
OWN_ROUTES = {
    "",
    "healthz",
    "healthz/live",
    "api/schema/",
    "api/docs/",
    "api/auth/signup/",
    "api/auth/login/",
    "api/auth/logout/",
    "api/auth/me/",
    "api/settings/",
    "api/settings/test/",
    "api/settings/presets/",
    "api/settings/models/",
    "api/settings/demo/",
    "api/debug/requests/",
    "api/adventures/",
    "api/adventures/import/",
    "api/adventures/import/character/",
    "api/adventures/import/story/",
    "api/adventures/joined/",
    "api/invites/",
    "api/imports/",
    "api/scenarios/",
    "api/scenarios/mine/",
    "api/scenarios/import/",
    "library/",
    "library/mine/",
    "library/new/",
    "api/worlds/",
    "api/worlds/import/",
    "api/admin/workers/",
    "accounts/login/",
    "accounts/logout/",
    "accounts/signup/",
    "play/",
    "settings/",
    "api/auth/password/",
    "accounts/password/",
    "accounts/password/changed/",
    "accounts/password/reset/",
    "accounts/password/reset/sent/",
    "accounts/password/reset/done/",
}
# Routes whose parameters are not ids of anyone's objects (a signed, one-time reset link).
NOT_OBJECT_ROUTES = {"accounts/password/reset/<uidb64>/<token>/"}
# Routes whose parameter is a link's secret anyone signed in may follow (an invitation link): the
# member sweep below walks them; here a wrong token is a 404 (test_members).
LINK_ROUTES = {"api/join/<str:code>/", "join/<str:code>/"}
KNOWN_MCP_TOOLS = ["forget", "recall", "record_event", "remember"]
HOSTILE = [
    b"[" * 1000 + b"]" * 1000,
    b'{"text": "a\\u0000b", "metadata": {"k\\u0000": 1}}',
    b'{"text": "\\ud800"}',
    b'{"text": "\xff"}',
]


def all_routes():
    """(route, parameter names) for every URL pattern the resolver serves."""
    out = []

    def walk(patterns, prefix):
        for p in patterns:
            if isinstance(p, URLPattern):
                route = prefix + str(p.pattern)
                out.append((route, re.findall(r"<(?:\w+:)?(\w+)>|\(\?P<(\w+)>", route)))
            else:
                walk(p.url_patterns, prefix + str(p.pattern))

    walk(get_resolver().url_patterns, "")
    return [(route, [a or b for a, b in params]) for route, params in out]


def snapshot():
    return (
        list(get_user_model().objects.order_by("id").values("id", "username", "is_active", "is_staff", "password")),
        list(Adventure.objects.order_by("id").values()),
        list(ImportJob.objects.order_by("id").values()),
        list(Branch.objects.order_by("id").values()),
        list(Action.objects.order_by("id").values()),
        list(StoryCard.objects.order_by("id").values()),
        list(AISettings.objects.order_by("id").values()),
        list(Memory.objects.order_by("id").values("id", "text", "pinned", "forgotten", "depth", "branch_id")),
        list(Cursor.objects.order_by("id").values()),
        list(World.objects.order_by("id").values()),
        list(WorldToken.objects.order_by("id").values("id", "revoked_at")),
        list(Agent.objects.order_by("id").values()),
        list(AgentMemory.objects.order_by("id").values("id", "content", "pinned")),
        list(Scenario.objects.order_by("id").values()),
        list(ScenarioVersion.objects.order_by("id").values()),
        list(ScenarioReport.objects.order_by("id").values()),
        list(Membership.objects.order_by("id").values()),
        list(Invite.objects.order_by("id").values()),
    )


def fill(route, values):
    """The concrete URL for ``route`` with ``values`` for its parameters."""
    if route.startswith("admin/"):
        route = re.sub(r"\^\(\?P<app_label>[\w|]+\)/\$", "stories/", route)
        route = route.replace("(?P<url>.*)$", "stories/adventure/nothing-here/")
        model = re.match(r"admin/(\w+)/(\w+)/<path:object_id>", route)
        if model:
            row = apps.get_model(model.group(1), model.group(2)).objects.order_by("pk").first()
            values = {**values, "object_id": row.pk if row else 1}
        elif route == "admin/auth/user/<id>/password/":
            values = {**values, "id": get_user_model().objects.get(username="alice").pk}
        elif "<path:content_type_id>" in route:
            from django.contrib.contenttypes.models import ContentType

            values = {
                **values,
                "content_type_id": ContentType.objects.get_for_model(Adventure).pk,
                "object_id": values["adventure_id"],
            }
    agent_memory = "/agents/<str:agent_id>/memories/<int:memory_id>/" in route

    def value(m):
        name = m.group(1)
        if name == "memory_id" and agent_memory:
            name = "agent_memory_id"
        assert name in values, f"the sweep has no id for <{name}> in {route}: add one to make_world"
        return str(values[name])

    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", value, route)


def body_for(ids):
    return {
        "text": "pwned",
        "mode": "do",
        "name": "pwned",
        "take_id": ids["action_id"],
        "title": "pwned",
        "content": "pwned",
        "type": "say",
        "actor": ids["agent_id"],
        "pinned": True,
    }


def assert_no_leak(response, what):
    text = response.content.decode(errors="replace")
    for secret in SECRETS:
        assert secret not in text, f"{what} shows alice's {secret!r}"


def call(client, method, url, body):
    if method in ("get", "head", "options"):
        return getattr(client, method)(url)
    return (
        getattr(client, method)(url, body, format="json")
        if hasattr(client, "credentials")
        else getattr(client, method)(url, body, content_type="application/json")
    )


@pytest.mark.django_db
@pytest.mark.slow  # a sweep or a bank at scale: make test runs it
def test_every_route_refuses_bob_with_alices_ids_and_nothing_changes(
    alices_world, bobs_world, alice, alice_api, bob, bob_api, client
):
    from django.test import Client
    from rest_framework.test import APIClient

    routes = all_routes()
    object_routes = [
        (r, p) for r, p in routes if p and not r.startswith("admin/") and r not in NOT_OBJECT_ROUTES | LINK_ROUTES
    ]
    admin_routes = [r for r, _ in routes if r.startswith("admin/")]
    unclassified = {r for r, p in routes if not p and not r.startswith("admin/")} - OWN_ROUTES
    assert not unclassified, f"new routes the sweep does not know: {sorted(unclassified)}"
    assert len(object_routes) >= 35 and len(admin_routes) >= 60

    # Every path in the OpenAPI schema is a route the sweep walks, and the reverse.
    schema = SchemaGenerator().get_schema(request=None, public=True)
    schema_paths = {re.sub(r"\{(\w+)\}", r"<\1>", p.lstrip("/")) for p in schema["paths"]}
    api_routes = {re.sub(r"<\w+:(\w+)>", r"<\1>", r) for r, _ in routes if r.startswith("api/")}
    assert schema_paths == api_routes - {"api/schema/", "api/docs/"}

    web_bob = client
    web_bob.force_login(bob)
    web_alice = Client()
    web_alice.force_login(alice)
    world_bob = APIClient()
    world_bob.credentials(HTTP_AUTHORIZATION=f"Bearer {bobs_world['raw_token']}")
    alice_ids = {k: v for k, v in alices_world.items() if k != "raw_token"}
    # bob's own outer objects with one of alice's inner ids, per inner parameter
    mixed = {
        name: {**bobs_world, name: alices_world[name]}
        for name in (
            "action_id",
            "branch_id",
            "card_id",
            "memory_id",
            "token_id",
            "agent_memory_id",
            "invite_id",
            "user_id",
        )
    }

    before = snapshot()
    tried = 0
    for route, params in object_routes:
        is_api = route.startswith("api/")
        callers = [("bob's API token", bob_api)] if is_api else [("bob's session", web_bob)]
        if route.startswith("api/worlds/"):
            callers.append(("bob's world token", world_bob))
        urls = [fill(route, alice_ids)]
        inner = params[-1] if params[-1] != "memory_id" or "/agents/" not in route else "agent_memory_id"
        if len(params) > 1 and inner in mixed:
            urls.append(fill(route, mixed[inner]))
        for url in urls:
            for who, caller in callers:
                for method in METHODS:
                    response = call(caller, method, url, body_for(alices_world))
                    tried += 1
                    what = f"{method.upper()} {url} as {who}"
                    assert not 200 <= response.status_code < 300, f"{what} -> {response.status_code}"
                    assert response.status_code < 500, f"{what} -> {response.status_code}"
                    if response.status_code == 405:
                        # Not allowed for anyone: alice gets the same answer, so it says nothing.
                        owner = alice_api if is_api else web_alice
                        assert call(owner, method, url, {}).status_code == 405, what
                    elif who == "bob's world token" and not route.startswith("api/worlds/<int:world_id>/"):
                        assert response.status_code in (401, 403), what
                    else:
                        assert response.status_code == 404, f"{what} -> {response.status_code}"
                        if is_api and method != "head":
                            assert response.json() == {"detail": "Not found.", "error": "not_found"}, (
                                f"{what} hints the object exists"
                            )
                    assert_no_leak(response, what)
                    if method in ("post", "put", "patch"):
                        # A hostile body changes nothing of that: the object is still not bob's.
                        for body in HOSTILE:
                            hostile = caller.generic(method.upper(), url, body, content_type="application/json")
                            tried += 1
                            assert hostile.status_code == response.status_code, (
                                f"{what} with {body[:20]!r} -> {hostile.status_code}"
                            )

    # The admin is for staff: every admin route sends bob to its login page.
    for route in admin_routes:
        if route in ("admin/login/", "admin/logout/"):
            continue
        url = fill(route, alice_ids)
        for method in ("get", "post"):
            response = getattr(web_bob, method)(url)
            tried += 1
            assert response.status_code == 302 and response["Location"].startswith("/admin/login/"), (
                f"{method.upper()} {url} as bob -> {response.status_code}"
            )

    for route in OWN_ROUTES:
        caller = bob_api if route.startswith("api/") else web_bob
        response = caller.get("/" + route)
        # /healthz answers 503 by design while no worker is running (as here)
        assert response.status_code < 500 or route.startswith("healthz"), route
        assert_no_leak(response, f"GET /{route} as bob")
    assert tried > 600
    assert snapshot() == before


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_every_mcp_tool_refuses_what_is_not_the_callers_world(mcp_server, alice, bob):
    alice_town = World.objects.create(owner=alice, name="Alice's town")
    agent_events.events_record(
        world=alice_town,
        events=[agent_events.Event(type="say", actor="ann", target="bo", text="meet at the old mill", nearby=["bo"])],
    )
    bob_town = World.objects.create(owner=bob, name="Bob's town")
    _, bob_raw = worlds.token_create(world=bob_town)
    alice_token, alice_raw = worlds.token_create(world=alice_town)
    calls = [
        ("recall", {"agent": "ann", "query": "old mill", "limit": 5}),
        ("recall", {"agent": "bo", "limit": 5}),
        ("record_event", {"type": "say", "actor": "ann", "text": "hello from bob's world", "nearby": ["bo"]}),
        ("remember", {"agent": "ann", "content": "a note in bob's world"}),
        # bob's world has an "ann" by now (the event above): alice's ann's memory is still not hers
        ("forget", {"agent": "ann", "memory_id": AgentMemory.objects.filter(world=alice_town).first().pk}),
    ]
    before = list(
        AgentMemory.objects.filter(world=alice_town).order_by("id").values("id", "content", "retrieval_count")
    )
    tools, *results = asyncio.run(session_calls(mcp_server, bob_raw, calls))
    assert tools == KNOWN_MCP_TOOLS, "a new MCP tool must be added to this sweep"
    assert {name for name, _ in calls} == set(tools)
    for (name, _), result in zip(calls, results):
        assert "old mill" not in str(result.structured_content) + str(result.content), f"{name} leaked"
    assert (
        list(AgentMemory.objects.filter(world=alice_town).order_by("id").values("id", "content", "retrieval_count"))
        == before
    )
    # bob's writes landed in bob's world only
    assert set(AgentMemory.objects.filter(world=bob_town).values_list("agent__external_id", flat=True)) == {"ann", "bo"}

    # Without a world token, with a user's API token, or with a revoked one: every tool is refused.
    from django.utils import timezone
    from rest_framework.authtoken.models import Token

    alice_token.revoked_at = timezone.now()
    alice_token.save()
    for raw in ("not-a-token", Token.objects.create(user=alice).key, alice_raw):
        _, *refused = asyncio.run(session_calls(mcp_server, raw, calls))
        assert all(r.is_error for r in refused), raw
    assert (
        list(AgentMemory.objects.filter(world=alice_town).order_by("id").values("id", "content", "retrieval_count"))
        == before
    )


@pytest.mark.django_db
def test_bob_sees_none_of_alices_adventures_or_settings(alices_world, bob_api):
    assert bob_api.get("/api/adventures/").json() == []
    assert bob_api.get("/api/settings/").json()["endpoint_url"] == ""
    assert bob_api.get("/api/debug/requests/").json() == []


@pytest.mark.django_db
def test_a_take_or_branch_of_another_adventure_is_refused(alices_world, alice_plays):
    other = alice_plays.post("/api/adventures/", {"title": "Other", "opening": "Elsewhere."}, format="json").json()
    opening = alice_plays.get(f"/api/adventures/{other['id']}/story/").json()["actions"][0]
    select = alice_plays.post(
        f"/api/adventures/{other['id']}/actions/{opening['id']}/takes/",
        {"take_id": alices_world["action_id"]},
        format="json",
    )
    assert select.status_code == 404 and "take_id" in select.json()["detail"]
    checkout = alice_plays.post(f"/api/adventures/{other['id']}/branches/{alices_world['branch_id']}/checkout/")
    assert checkout.status_code == 404


@pytest.mark.django_db
def test_anonymous_requests_are_refused(client):
    assert client.get("/api/adventures/").status_code in (401, 403)
    assert client.get("/api/settings/").status_code in (401, 403)


# What a watcher of alice's story may do there (every other route of the story is the owner's: 403).
WATCHER_MAY = {
    ("api/adventures/<int:adventure_id>/story/", "get"),
    ("api/adventures/<int:adventure_id>/members/", "get"),
    ("api/adventures/<int:adventure_id>/live/", "get"),  # the events are read on the real server (test_streaming)
    ("play/<int:adventure_id>/", "get"),  # a member's page of the story
    ("api/adventures/<int:adventure_id>/reports/", "post"),  # a report to the moderators
}


@pytest.mark.django_db
@pytest.mark.slow  # a sweep: make test runs it
def test_a_member_walking_every_route_of_the_story_does_only_what_a_watcher_may(alices_world, alice_api, client):
    """alice's watcher (her world's friend), by every method on every route of her story and of its
    objects: a 2xx only where a watcher reads, 403 saying the owner's elsewhere, nothing changed;
    the link's token by another user only shows what it invites to."""
    from django.test import Client

    from tests.conftest import api_client_for

    friend = get_user_model().objects.get(pk=alices_world["user_id"])
    member = api_client_for(friend)
    web_member = Client()
    web_member.force_login(friend)
    ids = {k: v for k, v in alices_world.items() if k not in ("raw_token", "code")}
    ids["user_id"] = Membership.objects.filter(adventure_id=ids["adventure_id"]).exclude(user=friend).first()
    ids["user_id"] = alice_api.user.pk if ids["user_id"] is None else ids["user_id"].user_id  # never himself
    routes = [r for r, p in all_routes() if r.startswith(("api/adventures/<int:adventure_id>/", "play/<int:"))]
    assert len(routes) >= 35
    before = snapshot()
    seen_ok = set()
    for route in routes:
        url = fill(route, ids)
        caller = member if route.startswith("api/") else web_member
        for method in METHODS:
            response = call(caller, method, url, body_for(alices_world))
            # a live stream (200) is left unread: its status says enough here, its slot lapses
            what = f"{method.upper()} {url} as alice's watcher"
            assert response.status_code < 500, f"{what} -> {response.status_code}"
            if method in ("head", "options") or response.status_code == 405:
                continue
            if (route, method) in WATCHER_MAY:  # let in (a report's body the sweep sends is not one: a 400)
                assert response.status_code in (200, 201, 400), f"{what} -> {response.status_code}"
                seen_ok.add((route, method))
            else:
                assert response.status_code == 403, f"{what} -> {response.status_code}"
                if route.startswith("api/"):
                    assert response.json()["error"] == "forbidden", what
    assert seen_ok == WATCHER_MAY
    assert snapshot() == before
    preview = client.get(f"/api/join/{alices_world['code']}/")
    assert preview.status_code in (401, 403)  # signed in only
