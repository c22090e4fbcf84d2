"""Security headers on every page: a Content-Security-Policy that allows only the
site's own scripts (the browser tests run under it), and ``Cache-Control:
private`` wherever a page or answer may hold a player's content."""

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_every_page_and_answer_carries_the_csp_and_private_caching(
    alices_world, alice, alice_plays, client, django_user_model
):
    root = django_user_model.objects.create_superuser(username="root", password="root-pass-123")
    staff = Client()
    staff.force_login(root)
    client.force_login(alice)
    aid = alices_world["adventure_id"]
    pages = [
        (client, "/play/"),
        (client, f"/play/{aid}/"),
        (client, "/settings/"),
        (Client(), "/accounts/login/"),
        (staff, "/admin/"),
        (staff, "/admin/stories/adventure/"),
        (staff, f"/admin/stories/adventure/{aid}/change/"),
        (Client(), "/api/docs/"),
        (alice_plays, f"/api/adventures/{aid}/story/"),
        (alice_plays, "/api/adventures/"),
        (Client(), "/healthz/live"),
    ]
    for who, url in pages:
        response = who.get(url)
        assert response.status_code == 200, url
        csp = response["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "'unsafe-inline'" not in csp.split("script-src")[1].split(";")[0], url
        assert "frame-ancestors 'none'" in csp and "object-src 'none'" in csp, url
        assert "private" in response["Cache-Control"], url


def test_no_page_of_the_site_holds_an_inline_script(alices_world, client, alice):
    import re

    client.force_login(alice)
    for url in ("/play/", f"/play/{alices_world['adventure_id']}/", "/settings/", "/accounts/password/"):
        html = client.get(url).content.decode()
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), url
        assert not re.search(r"\son[a-z]+=", html), f"an inline event handler on {url}"
