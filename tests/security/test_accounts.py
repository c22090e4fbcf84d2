"""Accounts: suspension is one check everywhere (sessions, API tokens, world
tokens over REST and MCP); every login surface (API, web, admin) shares one
throttle, counted by the real client address behind trusted proxies only;
credentials that are missing or wrong answer 401 with WWW-Authenticate; players
change and reset their passwords, which ends their other sessions and tokens."""

import asyncio
import re

import pytest
from django.contrib.auth.models import Group
from django.core import mail
from django.test import Client
from rest_framework.test import APIClient

from memory.models import AgentMemory
from stories import moderation
from tests.conftest import api_client_for
from tests.security.test_ownership import all_routes, fill
from tests.support.mcp import session_calls

pytestmark = pytest.mark.django_db
METHODS = ["get", "post", "put", "patch", "delete"]


def test_a_suspended_owner_is_refused_on_every_route_with_every_credential(alices_world, alice, alice_plays):
    token = alices_world["raw_token"]
    world_client = APIClient()
    world_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    session = Client()
    session.force_login(alice)
    assert world_client.get(f"/api/worlds/{alices_world['world_id']}/agents/").status_code == 200
    moderation.user_suspend(user_id=alice.pk)
    before = AgentMemory.objects.count()
    ids = {k: v for k, v in alices_world.items() if k != "raw_token"}
    tried = 0
    for route, _ in all_routes():
        if not route.startswith("api/") or route in ("api/schema/", "api/docs/", "api/auth/login/", "api/auth/signup/"):
            continue
        url = fill(route, ids)
        callers = [("her API token", alice_plays), ("her session", session)]
        if route.startswith("api/worlds/"):
            callers.append(("her world's token", world_client))
        for who, caller in callers:
            for method in METHODS:
                response = (
                    getattr(caller, method)(url, {}, content_type="application/json")
                    if method != "get"
                    else caller.get(url)
                )
                tried += 1
                assert response.status_code in (401, 403), (
                    f"{method.upper()} {url} with {who} -> {response.status_code}"
                )
    assert tried > 200
    assert AgentMemory.objects.count() == before
    for page in ("/play/", "/settings/", f"/play/{alices_world['adventure_id']}/"):
        assert session.get(page).status_code == 302, page
    # and logging in again is refused
    login = APIClient().post("/api/auth/login/", {"username": "alice", "password": "alice-pass-123"}, format="json")
    assert login.status_code == 401


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_suspended_owners_world_token_is_refused_by_every_mcp_tool(mcp_server, alice):
    from memory.agents import agent_events, worlds
    from memory.models import World

    town = World.objects.create(owner=alice, name="Town")
    agent_events.events_record(
        world=town, events=[agent_events.Event(type="say", actor="ann", text="hello", nearby=["bo"])]
    )
    _, raw = worlds.token_create(world=town)
    calls = [
        ("recall", {"agent": "bo", "query": "hello"}),
        ("record_event", {"type": "say", "actor": "ann", "text": "again"}),
        ("remember", {"agent": "ann", "content": "a note"}),
        (
            "forget",
            {"agent": "ann", "memory_id": AgentMemory.objects.filter(world=town, agent__external_id="ann").first().pk},
        ),
    ]
    tools, *results = asyncio.run(session_calls(mcp_server, raw, calls))
    assert {name for name, _ in calls} == set(tools), "every tool is swept"
    assert not any(r.is_error for r in results)
    moderation.user_suspend(user_id=alice.pk)
    before = AgentMemory.objects.filter(world=town).count()
    _, *refused = asyncio.run(session_calls(mcp_server, raw, calls))
    for (name, _), result in zip(calls, refused):
        assert result.is_error and "suspended" in result.content[0].text, name
    assert AgentMemory.objects.filter(world=town).count() == before
    moderation.user_suspend(user_id=alice.pk, suspended=False)
    _, *back = asyncio.run(session_calls(mcp_server, raw, calls[:1]))
    assert not back[0].is_error, "reinstated: the token works again"


def test_every_login_surface_shares_one_throttle(alice, settings, django_user_model):
    settings.LOGIN_FAILURES_MAX = 4
    admin_user = django_user_model.objects.create_user(username="staffer", password="staff-pass-123", is_staff=True)
    admin_user.groups.add(Group.objects.get(name="Moderators"))
    api, web, admin = APIClient(), Client(), Client()
    # failures on three surfaces add up
    assert api.post("/api/auth/login/", {"username": "staffer", "password": "x"}, format="json").status_code == 401
    assert web.post("/accounts/login/", {"username": "staffer", "password": "x"}).status_code == 200
    for _ in range(2):
        assert admin.post("/admin/login/", {"username": "staffer", "password": "x"}).status_code == 200
    # now even the right password is refused, on every surface
    page = admin.post("/admin/login/", {"username": "staffer", "password": "staff-pass-123"})
    assert page.status_code == 429 and int(page["Retry-After"]) > 0 and b"Too many failed logins" in page.content
    assert "_auth_user_id" not in admin.session
    assert (
        api.post("/api/auth/login/", {"username": "staffer", "password": "staff-pass-123"}, format="json").status_code
        == 429
    )
    assert web.post("/accounts/login/", {"username": "staffer", "password": "staff-pass-123"}).status_code == 429
    # another account from the same address is not locked
    assert (
        api.post("/api/auth/login/", {"username": "alice", "password": "alice-pass-123"}, format="json").status_code
        == 200
    )


def test_the_client_address_comes_from_trusted_proxies_only(alice, settings):
    settings.LOGIN_FAILURES_MAX = 2
    settings.TRUSTED_PROXIES = ["10.0.0.0/8"]

    def login(password, *, peer, forwarded=None):
        headers = {"REMOTE_ADDR": peer}
        if forwarded:
            headers["HTTP_X_FORWARDED_FOR"] = forwarded
        return (
            APIClient()
            .post("/api/auth/login/", {"username": "alice", "password": password}, format="json", **headers)
            .status_code
        )

    # behind the proxy, an attacker at 203.0.113.9 locks out only themselves
    assert [login("x", peer="10.0.0.2", forwarded="203.0.113.9") for _ in range(2)] == [401, 401]
    assert login("alice-pass-123", peer="10.0.0.2", forwarded="203.0.113.9") == 429
    assert login("alice-pass-123", peer="10.0.0.2", forwarded="198.51.100.7") == 200, "alice, elsewhere, logs in"
    # a spoofed hop to the left of the real client changes nothing
    assert login("alice-pass-123", peer="10.0.0.2", forwarded="1.2.3.4, 203.0.113.9") == 429
    # a client that is not a trusted proxy cannot pick its address with the header
    assert [login("x", peer="192.0.2.50", forwarded=f"192.0.2.{n}") for n in range(2)] == [401, 401]
    assert login("alice-pass-123", peer="192.0.2.50", forwarded="192.0.2.99") == 429


def test_missing_or_wrong_credentials_answer_401_with_www_authenticate(alices_world):
    anonymous = APIClient()
    for url in ("/api/adventures/", "/api/settings/", "/api/auth/me/"):
        response = anonymous.get(url)
        assert response.status_code == 401 and response["WWW-Authenticate"] == "Token", url
    wrong = APIClient()
    wrong.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    response = wrong.get("/api/adventures/")
    assert response.status_code == 401 and response["WWW-Authenticate"] == "Token"
    bad_world = APIClient()
    bad_world.credentials(HTTP_AUTHORIZATION="Bearer wt_not-a-real-token")
    response = bad_world.get(f"/api/worlds/{alices_world['world_id']}/agents/")
    assert response.status_code == 401 and response["WWW-Authenticate"] == "Bearer"


def test_signups_are_limited_per_address(settings):
    settings.SIGNUPS_PER_HOUR = 2
    api = APIClient()
    codes = [
        api.post(
            "/api/auth/signup/", {"username": f"new{n}", "password": "Long-enough-pass-1"}, format="json"
        ).status_code
        for n in range(3)
    ]
    assert codes == [201, 201, 429]
    page = Client().post(
        "/accounts/signup/", {"username": "new9", "password1": "Long-enough-pass-1", "password2": "Long-enough-pass-1"}
    )
    assert page.status_code == 429
    from django.contrib.auth import get_user_model

    assert not get_user_model().objects.filter(username__in=["new2", "new9"]).exists()


def test_past_the_signup_limit_a_taken_and_a_free_name_answer_alike(alice, settings):
    """Else the two answers tell which usernames exist."""
    settings.SIGNUPS_PER_HOUR = 1
    api = APIClient()
    assert (
        api.post(
            "/api/auth/signup/", {"username": "first", "password": "Long-enough-pass-1"}, format="json"
        ).status_code
        == 201
    )
    answers = {}
    for name in ("alice", "ALICE", "nobody-has-this", "x"):  # taken, taken in another case, free, malformed
        response = APIClient().post(
            "/api/auth/signup/", {"username": name, "password": "Long-enough-pass-1"}, format="json"
        )
        answers[name] = (response.status_code, response.json(), response.get("Retry-After") is not None)
    assert len({str(a) for a in answers.values()}) == 1, answers
    assert answers["alice"][0] == 429 and answers["alice"][2]
    pages = {
        name: Client().post(
            "/accounts/signup/",
            {"username": name, "password1": "Long-enough-pass-1", "password2": "Long-enough-pass-1"},
        )
        for name in ("alice", "nobody-has-this")
    }
    assert {p.status_code for p in pages.values()} == {429}
    assert all(b"taken" not in p.content and b"already exists" not in p.content for p in pages.values())


def test_changing_the_password_ends_other_sessions_and_tokens(alice):
    phone, laptop = Client(), Client()
    phone.force_login(alice)
    laptop.login(username="alice", password="alice-pass-123")
    script = api_client_for(alice)
    assert script.get("/api/auth/me/").status_code == 200
    wrong = laptop.post(
        "/api/auth/password/",
        {"old_password": "nope", "new_password": "A-new-long-pass-77"},
        content_type="application/json",
    )
    assert wrong.status_code == 400 and "current password" in wrong.json()["detail"]
    weak = laptop.post(
        "/api/auth/password/",
        {"old_password": "alice-pass-123", "new_password": "123"},
        content_type="application/json",
    )
    assert weak.status_code == 400 and "new_password" in weak.json()
    done = laptop.post(
        "/api/auth/password/",
        {"old_password": "alice-pass-123", "new_password": "A-new-long-pass-77"},
        content_type="application/json",
    )
    assert done.status_code == 200 and done.json()["token"]
    assert laptop.get("/api/auth/me/").status_code == 200, "the session that changed it stays"
    assert phone.get("/api/auth/me/").status_code in (401, 403), "other sessions end"
    assert script.get("/api/auth/me/").status_code == 401, "old API tokens end"
    fresh = APIClient()
    fresh.credentials(HTTP_AUTHORIZATION=f"Token {done.json()['token']}")
    assert fresh.get("/api/auth/me/").status_code == 200
    assert Client().login(username="alice", password="A-new-long-pass-77")


def test_the_settings_page_changes_the_password(alice):
    browser, other = Client(), Client()
    browser.force_login(alice)
    other.force_login(alice)
    assert b"/accounts/password/" in browser.get("/settings/").content
    bad = browser.post(
        "/accounts/password/",
        {"old_password": "nope", "new_password1": "A-new-long-pass-77", "new_password2": "A-new-long-pass-77"},
    )
    assert bad.status_code == 400
    ok = browser.post(
        "/accounts/password/",
        {
            "old_password": "alice-pass-123",
            "new_password1": "A-new-long-pass-77",
            "new_password2": "A-new-long-pass-77",
        },
    )
    assert ok.status_code == 302 and browser.get(ok["Location"]).status_code == 200
    assert browser.get("/play/").status_code == 200 and other.get("/play/").status_code == 302


def test_a_forgotten_password_is_reset_by_email(alice):
    alice.email = "alice@example.com"
    alice.save()
    script = api_client_for(alice)
    page = Client()
    assert b"/accounts/password/reset/" in page.get("/accounts/login/").content
    response = page.post("/accounts/password/reset/", {"email": "alice@example.com"})
    assert response.status_code == 302
    unknown = page.post("/accounts/password/reset/", {"email": "nobody@example.com"})
    assert unknown.status_code == 302, "the answer does not tell who has an account"
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["alice@example.com"]
    link = re.search(r"http://testserver(/accounts/password/reset/\S+/)", mail.outbox[0].body).group(1)
    form = page.get(link, follow=True)
    assert form.status_code == 200 and b"new_password1" in form.content
    done = page.post(
        form.redirect_chain[-1][0], {"new_password1": "Reset-long-pass-42", "new_password2": "Reset-long-pass-42"}
    )
    assert done.status_code == 302
    assert Client().login(username="alice", password="Reset-long-pass-42")
    assert script.get("/api/auth/me/").status_code == 401, "API tokens end on a reset too"
    again = page.get(link, follow=True)
    assert b"used or expired" in again.content, "a link works once"
