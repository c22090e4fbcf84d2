"""Published text is escaped everywhere: a scenario whose every field (and its cards, tags, the
answer a player gives and the report's text) carries markup shows it as text on the library,
the scenario page (as its author and as anyone else), the author's list, the editor, the story
started from it and the moderators' pages; no page holds an inline script or handler."""

import re
from html.parser import HTMLParser

import pytest
from django.test import Client

from stories.models import Scenario, ScenarioReport

pytestmark = pytest.mark.django_db

PAYLOADS = [
    '<img src=x onerror="alert(1)">',
    "<script>alert(2)</script>",
    '"><svg onload=alert(3)>',
    "javascript:alert(4)",
    "{{ 7*7 }}{% now 'Y' %}",
]
ATTACK = " ".join(PAYLOADS)


class _Tags(HTMLParser):
    """What the browser would make of a page: inline scripts and event-handler attributes."""

    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        names = {name for name, _ in attrs}
        if tag == "script" and "src" not in names:
            self.found.append("an inline <script>")
        self.found += [f"<{tag} {name}=...>" for name in names if name.startswith("on")]
        if dict(attrs).get("src") == "x":
            self.found.append(f"the payload's <{tag} src=x>")


def _active(html: str) -> list[str]:
    parser = _Tags()
    parser.feed(html)
    return parser.found


def _hostile(text: str) -> bool:
    return bool(re.search(r"<img src=x|<script>alert|<svg onload", text))


def test_every_page_showing_a_scenario_shows_its_markup_as_text(alice, alice_api, bob, bob_api, django_user_model):
    body = {
        "title": "T " + ATTACK[:150],
        "description": ATTACK,
        "opening": "Open " + ATTACK + " ${Name " + "<b>?" + "}",
        "plot_essentials": ATTACK,
        "ai_instructions": ATTACK,
        "authors_note": ATTACK,
        "cover_emoji": "<i>",
        "cards": [{"name": "<img src=x onerror=alert(5)>", "keys": ["<b>"], "entry": ATTACK}],
    }
    created = alice_api.post("/api/scenarios/", body, format="json")
    assert created.status_code == 201, created.json()
    key = created.json()["key"]
    alice_api.patch(f"/api/scenarios/{key}/", {"visibility": "published"}, format="json")
    started = bob_api.post(f"/api/scenarios/{key}/play/", {"answers": {"Name <b>?": ATTACK[:200]}}, format="json")
    assert started.status_code == 201, started.json()
    bob_api.post(f"/api/scenarios/{key}/report/", {"reason": "other", "text": ATTACK}, format="json")

    author, other, staff = Client(), Client(), Client()
    author.force_login(alice)
    other.force_login(bob)
    staff.force_login(django_user_model.objects.create_superuser(username="root", password="root-pass-123"))
    scenario = Scenario.objects.get(key=key)
    report = ScenarioReport.objects.get(scenario=scenario)
    pages = [
        (other, "/library/"),
        (other, "/library/?q=alert"),
        (other, f"/library/s/{key}/"),
        (author, f"/library/s/{key}/"),
        (author, "/library/mine/"),
        (author, f"/library/s/{key}/edit/"),
        (other, f"/play/{started.json()['id']}/"),
        (other, "/play/"),
        (staff, "/admin/stories/scenario/"),
        (staff, f"/admin/stories/scenario/{scenario.pk}/change/"),
        (staff, "/admin/stories/scenarioreport/"),
        (staff, f"/admin/stories/scenarioreport/{report.pk}/change/"),
    ]
    for who, url in pages:
        response = who.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert not _hostile(html), f"{url} shows markup unescaped"
        assert _active(html) == [], f"{url}: {_active(html)}"
    shown = other.get(f"/library/s/{key}/").content.decode()
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in shown, "the markup is there, as text"
    assert "{{ 7*7 }}" in shown, "template syntax in a scenario is text, never evaluated"
