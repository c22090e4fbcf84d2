"""Per-account limits on every write route and every outbound call. A sweep walks every route the
URL resolver serves with every writing method and finds each counted toward the account's
WRITES_PER_MINUTE (a route without a limit fails it unless it is listed as unlimited with a reason);
the costlier ones each have a limit of their own, proven one by one; and the security doc's table of
limits says what the code does."""

import re
from pathlib import Path

import pytest
from django.test import Client

from stories.models import Scenario
from tests.security.test_ownership import all_routes, fill
from tests.stories.test_field_formats import MAREN_V2
from tests.support.processes import minute_with_room

pytestmark = pytest.mark.django_db

README = Path(__file__).resolve().parents[2] / "docs" / "security.md"
SETTINGS = Path(__file__).resolve().parents[2] / "config" / "settings.py"
WRITES = ("post", "put", "patch", "delete")
# Writes that no per-account limit covers, each with the reason.
UNLIMITED = {
    "admin/": "the moderators' tools: staff only, each change in the admin's log; their logins share the login "
    "throttle",
}


def _clear_counters(settings):
    from tests.conftest import _rate_counters_clear

    _rate_counters_clear(settings)


def twice(client, method, url, *, user=None):
    """The same write twice (``user`` signed in again before each: a logout ends the first's session)."""
    answers = []
    minute_with_room(1)  # both in one minute's count
    for _ in range(2):
        if user is not None:
            client.force_login(user)
        answers.append(getattr(client, method)(url, {}, content_type="application/json"))
    return answers


@pytest.mark.slow  # a sweep or a bank at scale: make test runs it
def test_every_write_route_counts_toward_the_accounts_writes(alices_world, alice, settings):
    settings.WRITES_PER_MINUTE = 1
    signed_in, anonymous = Client(), Client()
    signed_in.force_login(alice)
    values = {**alices_world, "uidb64": "MQ", "token": "set-password", "number": 1}
    unlimited, counted = [], []
    for route, _ in all_routes():
        if any(route.startswith(prefix) for prefix in UNLIMITED):
            unlimited.append(route)
            continue
        url = fill(route, values)
        for client in (signed_in, anonymous):
            for method in WRITES:
                _clear_counters(settings)
                first, second = twice(client, method, url, user=alice if client is signed_in else None)
                where = f"{method.upper()} /{route} ({'alice' if client is signed_in else 'anonymous'})"
                if first.status_code == second.status_code == 405:
                    continue  # the route takes no such method: nothing was done
                if first.status_code == second.status_code and first.status_code in (401, 403):
                    continue  # not this caller's to use (an account, staff): refused before anything was read
                assert second.status_code == 429, f"{where}: {first.status_code} then {second.status_code}"
                assert int(second["Retry-After"]) >= 1, where
                counted.append(where)
    assert len(counted) >= 100 and unlimited, (len(counted), len(unlimited))


def test_a_write_refused_stores_nothing_and_says_when_to_come_back(alice_api, settings):
    settings.WRITES_PER_MINUTE = 2
    minute_with_room(10)
    for n in range(2):
        assert alice_api.post("/api/adventures/", {"title": f"T{n}"}, format="json").status_code == 201
    refused = alice_api.post("/api/adventures/", {"title": "T3"}, format="json")
    assert refused.status_code == 429 and "at most 2 a minute" in refused.json()["detail"]
    assert 1 <= int(refused["Retry-After"]) <= 61
    assert [a["title"] for a in alice_api.get("/api/adventures/").json()] == ["T1", "T0"], "reads are not counted"


def test_one_accounts_writes_leave_anothers_alone(alice_api, bob_api, settings):
    settings.WRITES_PER_MINUTE = 1
    minute_with_room(10)
    assert alice_api.post("/api/adventures/", {"title": "A"}, format="json").status_code == 201
    assert alice_api.post("/api/adventures/", {"title": "B"}, format="json").status_code == 429
    assert bob_api.post("/api/adventures/", {"title": "C"}, format="json").status_code == 201


# ---------------------------------------------------------------------------- the limits of their own


@pytest.fixture
def one_each(settings):
    for name in ("FILE_IMPORTS_PER_HOUR", "SCENARIO_PLAYS_PER_HOUR", "SHARES_PER_HOUR", "RECALLS_PER_MINUTE"):
        setattr(settings, name, 1)
    settings.MODEL_CALLS_PER_MINUTE = 1
    minute_with_room(20)
    return settings


def test_character_cards_lorebooks_and_card_files_share_an_hourly_limit(alice_api, one_each):
    made = alice_api.post("/api/adventures/import/character/?persona_name=Wren", MAREN_V2, format="json")
    assert made.status_code == 201
    aid = made.json()["adventure"]["id"]
    book = {"entries": {"0": {"key": ["ferry"], "content": "It sails."}}}
    for url, body in (
        ("/api/adventures/import/character/?persona_name=Wren", MAREN_V2),
        (f"/api/adventures/{aid}/cards/import/book/", book),
        (f"/api/adventures/{aid}/cards/import/", [{"keys": "ferry", "value": "It sails.", "title": "Ferry"}]),
    ):
        refused = alice_api.post(url, body, format="json")
        assert refused.status_code == 429 and "cards and lorebooks an hour" in refused.json()["detail"], url
    assert alice_api.get("/api/adventures/").json()[0]["id"] == aid and len(alice_api.get("/api/adventures/").json())


def test_starting_stories_from_a_scenario_is_limited_and_a_refusal_counts_no_play(alice_api, bob_api, one_each):
    key = alice_api.post("/api/scenarios/", {"title": "Inn", "opening": "Rain."}, format="json").json()["key"]
    alice_api.patch(f"/api/scenarios/{key}/", {"visibility": "unlisted"}, format="json")
    assert bob_api.post(f"/api/scenarios/{key}/play/", {"answers": {}}, format="json").status_code == 201
    refused = bob_api.post(f"/api/scenarios/{key}/play/", {"answers": {}}, format="json")
    assert refused.status_code == 429 and "from scenarios an hour" in refused.json()["detail"]
    assert Scenario.objects.get(key=key).play_count == 1


def test_share_links_and_visibility_changes_are_limited(alice_api, one_each):
    key = alice_api.post("/api/scenarios/", {"title": "Inn", "opening": "Rain."}, format="json").json()["key"]
    assert alice_api.post(f"/api/scenarios/{key}/link/").status_code == 200
    key = Scenario.objects.get(title="Inn").key
    refused = alice_api.patch(f"/api/scenarios/{key}/", {"visibility": "unlisted"}, format="json")
    assert refused.status_code == 429 and "new links and visibility changes" in refused.json()["detail"]
    assert alice_api.post(f"/api/scenarios/{key}/link/").status_code == 429
    assert Scenario.objects.get(key=key).visibility == "private"
    assert alice_api.patch(f"/api/scenarios/{key}/", {"visibility": "private"}, format="json").status_code == 200, (
        "making it private again is never refused"
    )


def test_the_model_list_and_a_connection_test_count_as_model_calls(alice_plays, one_each):
    assert alice_plays.get("/api/settings/models/").status_code == 200
    for refused in (
        alice_plays.get("/api/settings/models/"),
        alice_plays.post("/api/settings/models/", {"model": "m"}, format="json"),
        alice_plays.post("/api/settings/test/"),
    ):
        assert refused.status_code == 429 and "model calls" in refused.json()["detail"]


def test_recalls_are_limited_per_account_over_rest(alice_plays, one_each):
    world = alice_plays.post("/api/worlds/", {"name": "Town"}, format="json").json()["id"]
    alice_plays.post(f"/api/worlds/{world}/events/", {"type": "say", "actor": "ann", "text": "Hi."}, format="json")
    url = f"/api/worlds/{world}/agents/ann/recall/"
    assert alice_plays.post(url, {"query": "hi"}, format="json").status_code == 200
    refused = alice_plays.post(url, {"query": "hi"}, format="json")
    assert refused.status_code == 429 and "recalls" in refused.json()["detail"]


# ---------------------------------------------------------------------------- the security doc's table


def _defaults() -> dict[str, int]:
    source = SETTINGS.read_text()
    return {name: int(n) for name, n in re.findall(r'^(\w+) = env_int\("\1", (\d+)', source, re.MULTILINE)}


def test_the_readme_lists_every_rate_limit_with_the_default_the_code_has():
    table = README.read_text().split("<!-- rate limits -->")[1].split("<!-- /rate limits -->")[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table.strip().splitlines()[2:]]
    listed = {row[0].strip("`"): row[1].replace(",", "") for row in rows}
    defaults = _defaults()
    for name, default in listed.items():
        assert name in defaults, f"docs/security.md lists {name}, which settings does not read"
        assert int(default) == defaults[name], f"docs/security.md says {name} is {default}; settings: {defaults[name]}"
    limits = {n for n in defaults if re.search(r"_PER_(MINUTE|HOUR|DAY)$|_AT_ONCE$|^LOGIN_FAILURES_MAX$", n)}
    assert limits <= set(listed), f"limits missing from the security doc's table: {sorted(limits - set(listed))}"
