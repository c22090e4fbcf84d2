"""CSRF on the browser side: a cross-site form post (no CSRF token) is refused
on every page that changes something and on the session-authenticated API,
and nothing changes. API tokens, which a browser never sends on its own, need none."""

import pytest
from django.test import Client

from stories.models import Adventure

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser(alice):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    return client


def test_cross_site_posts_are_refused_and_change_nothing(browser, alice_api):
    adventure = alice_api.post("/api/adventures/", {"title": "Mine"}, format="json").json()
    posts = [
        ("/play/", {"title": "Forged", "opening": "Dawn."}),
        (f"/play/{adventure['id']}/delete/", {}),
        ("/settings/", {"endpoint_url": "https://evil.example/v1", "model": "m"}),
        ("/accounts/logout/", {}),
    ]
    for url, data in posts:
        response = browser.post(url, data)
        assert response.status_code == 403, url
    api_posts = [
        ("post", "/api/adventures/", {"title": "Forged"}),
        ("delete", f"/api/adventures/{adventure['id']}/", None),
        ("patch", "/api/settings/", {"endpoint_url": "https://evil.example/v1"}),
    ]
    for method, url, data in api_posts:
        response = getattr(browser, method)(url, data, content_type="application/json")
        assert response.status_code == 403 and "CSRF" in response.json()["detail"], url
    assert list(Adventure.objects.values_list("title", flat=True)) == ["Mine"]
    assert alice_api.get("/api/settings/").json()["endpoint_url"] == ""
    assert browser.get("/play/").status_code == 200, "still signed in: the forged logout did nothing"


def test_the_same_posts_with_the_pages_token_work(browser):
    page = browser.get("/play/")
    token = page.cookies["csrftoken"].value if "csrftoken" in page.cookies else browser.cookies["csrftoken"].value
    response = browser.post("/play/", {"title": "Real", "opening": "Dawn.", "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert Adventure.objects.filter(title="Real").exists()
