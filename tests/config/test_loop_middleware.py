"""Django's own middleware run on the event loop under the real server (config.loop_middleware),
and a player sees exactly what Django's would give: the login keeps its session, a post without
its CSRF token is refused and changes nothing, a moderator's action message shows once, logging
out ends the session. Under the test client (WSGI) they are Django's own."""

import asyncio
import re

import pytest
import requests
from asgiref.sync import SyncToAsync
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.http import HttpResponse
from django.test import AsyncRequestFactory

from config import loop_middleware
from stories.adventures import story_create
from stories.models import Adventure
from tests.support.processes import Site

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def site(django_db_setup, tmp_path_factory):
    """One server for the module's tests (each brings its own rows): starting one costs seconds of a core."""
    server = Site(tmp_path_factory.mktemp("site"), DB_POOL_SIZE="3")
    yield server
    server.stop()


def _site_user(django_user_model, username: str, password: str, **extra):
    """A user whose password the site's own hashers check (the test settings hash with MD5)."""
    user = django_user_model.objects.create_user(username=username, **extra)
    user.password = PBKDF2PasswordHasher().encode(password, PBKDF2PasswordHasher().salt(), iterations=1000)
    user.save(update_fields=["password"])
    return user


def _token(page: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)


def _login(site, session: requests.Session, path: str, username: str, password: str) -> requests.Response:
    page = session.get(f"{site.url}{path}", timeout=10)
    assert page.status_code == 200, page.text[:300]
    return session.post(
        f"{site.url}{path}",
        data={"username": username, "password": password, "csrfmiddlewaretoken": _token(page.text)},
        headers={"Referer": f"{site.url}{path}"},
        timeout=10,
    )


def test_a_login_keeps_its_session_and_logging_out_ends_it_on_the_real_server(site, django_user_model):
    _site_user(django_user_model, "alice", "alice-pass-123")
    player = requests.Session()
    landed = _login(site, player, "/accounts/login/", "alice", "alice-pass-123")
    assert landed.status_code == 200 and landed.url.rstrip("/").endswith("/play"), (
        re.findall(r"errorlist.{0,300}", landed.text, re.S)[:2] or landed.text[-1500:]
    )
    assert "sessionid" in player.cookies, "the session was saved when the login changed it"
    again = player.get(f"{site.url}/play/", timeout=10)
    assert again.status_code == 200 and "alice" in again.text, "the next request is alice's"
    assert "Cookie" in again.headers.get("Vary", ""), "a page that read the session varies on the cookie"
    logout = player.post(
        f"{site.url}/accounts/logout/",
        data={"csrfmiddlewaretoken": player.cookies["csrftoken"]},
        headers={"Referer": f"{site.url}/play/"},
        timeout=10,
        allow_redirects=False,
    )
    assert logout.status_code == 302
    after = player.get(f"{site.url}/play/", timeout=10, allow_redirects=False)
    assert after.status_code == 302 and "/accounts/login/" in after.headers["Location"], "logged out"


def test_a_post_without_its_csrf_token_is_refused_and_changes_nothing(site, django_user_model):
    alice = _site_user(django_user_model, "alice", "alice-pass-123")
    adventure = story_create(owner_id=alice.pk, title="Harbor", opening="You arrive.")
    player = requests.Session()
    _login(site, player, "/accounts/login/", "alice", "alice-pass-123")
    refused = player.post(f"{site.url}/play/{adventure.pk}/delete/", timeout=10, allow_redirects=False)
    assert refused.status_code == 403, refused.status_code
    assert Adventure.objects.filter(pk=adventure.pk).exists(), "nothing was deleted"
    frame = player.get(f"{site.url}/play/", timeout=10)
    assert frame.headers.get("X-Frame-Options") == "DENY", "the clickjacking header is set on the loop too"


def test_a_moderators_action_message_shows_once(site, alice, django_user_model):
    adventure = story_create(owner_id=alice.pk, title="Harbor", opening="You arrive.")
    _site_user(django_user_model, "root", "root-pass-123", is_staff=True, is_superuser=True)
    staff = requests.Session()
    landed = _login(site, staff, "/admin/login/?next=/admin/", "root", "root-pass-123")
    assert "Log out" in landed.text, landed.text[:300]
    changelist = staff.get(f"{site.url}/admin/stories/adventure/", timeout=10)
    done = staff.post(
        f"{site.url}/admin/stories/adventure/",
        data={
            "action": "hide",
            "_selected_action": [str(adventure.pk)],
            "index": "0",
            "csrfmiddlewaretoken": _token(changelist.text),
        },
        headers={"Referer": f"{site.url}/admin/stories/adventure/"},
        timeout=10,
    )
    assert done.status_code == 200 and "Hidden" in done.text, "the action's message is shown after its redirect"
    assert Adventure.objects.get(pk=adventure.pk).hidden
    later = staff.get(f"{site.url}/admin/stories/adventure/", timeout=10)
    assert "messagelist" not in later.text, "a message is shown once"


def test_django_middleware_hop_to_a_thread_only_when_they_must_write(db):
    """Under ASGI the request half never hops to a thread and the answer half hops only to write:
    a session that changed is saved there; a request that leaves the session alone hops nowhere."""
    hops = []
    original = SyncToAsync.__call__

    async def counting(self, *args, **kwargs):
        hops.append(getattr(self.func, "__qualname__", "?"))
        return await original(self, *args, **kwargs)

    async def reads(request):
        return HttpResponse("read")

    async def writes(request):
        request.session["seen"] = True
        return HttpResponse("wrote")

    def chain(view):
        m = loop_middleware
        return m.Security(m.Session(m.Common(m.Csrf(m.Authentication(m.Messages(m.XFrameOptions(view)))))))

    SyncToAsync.__call__ = counting
    try:
        read = asyncio.run(chain(reads)(AsyncRequestFactory().get("/x/")))
        read_hops = list(hops)
        wrote = asyncio.run(chain(writes)(AsyncRequestFactory().get("/x/")))
    finally:
        SyncToAsync.__call__ = original
    assert read.status_code == 200 and read["X-Frame-Options"] == "DENY"
    assert read_hops == [], f"no thread hop for checks and headers: {read_hops}"
    assert wrote.status_code == 200 and "sessionid" in wrote.cookies, "a changed session is saved"
    assert [h for h in hops if "process_response" in h] == ["SessionMiddleware.process_response"], hops


def test_the_deploy_check_names_a_missing_guard_whatever_class_stands_for_it(settings):
    """Django's own W001-W003 match only its class paths (silenced); ours accepts a subclass and
    still warns when the security, clickjacking or CSRF middleware is missing."""
    from django.core.checks.registry import registry

    assert loop_middleware.guards_in_place in registry.get_checks(include_deployment_checks=True), (
        "`manage.py check --deploy` runs it (it loads no middleware, so the app registers it)"
    )
    assert loop_middleware.guards_in_place(None) == []
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if not m.endswith((".Csrf", ".XFrameOptions"))]
    assert sorted(w.id for w in loop_middleware.guards_in_place(None)) == ["config.W002", "config.W003"]
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django.middleware.csrf.CsrfViewMiddleware"]
    assert [w.id for w in loop_middleware.guards_in_place(None)] == ["config.W002"]
