"""The shared space kept clean: a player reports a scenario, a moderator works the report queue in
the admin (unpublish, hide, restore, dismiss), the author is told, and stories already started
from the scenario keep their copy."""

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from stories.models import Adventure, Scenario, ScenarioReport
from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def mod(django_user_model, client):
    user = django_user_model.objects.create_user(username="mod", password="mod-pass-123", is_staff=True)
    user.groups.add(Group.objects.get(name="Moderators"))
    client.force_login(user)
    return client


def published(api, **fields):
    body = {"title": "Sky Pirates", "description": "Airships over a drowned world.", "opening": "Wind.", **fields}
    key = api.post("/api/scenarios/", body, format="json").json()["key"]
    assert api.patch(f"/api/scenarios/{key}/", {"visibility": "published"}, format="json").status_code == 200
    return key


def keys_found(api, q):
    return [row["key"] for row in api.get("/api/scenarios/", {"q": q}).json()]


def test_published_found_played_reported_and_unpublished_from_the_queue(alice_api, bob_api, charlie, mod):
    key = published(alice_api)
    assert key in keys_found(bob_api, "airships")
    adventure = bob_api.post(f"/api/scenarios/{key}/play/", {}, format="json").json()
    charlie_api = api_client_for(charlie)
    report = charlie_api.post(
        f"/api/scenarios/{key}/report/", {"reason": "spam", "text": "an advert for a casino"}, format="json"
    )
    assert report.status_code == 201

    queue = mod.get(reverse("admin:stories_scenarioreport_changelist"))
    assert queue.status_code == 200 and "an advert for a casino" in queue.content.decode()
    row = ScenarioReport.objects.get(scenario__key=key)
    answer = mod.post(
        reverse("admin:stories_scenarioreport_changelist"),
        {"action": "unpublish_scenario", "_selected_action": [row.pk]},
    )
    assert answer.status_code == 302

    assert key not in keys_found(charlie_api, "airships"), "gone from the library"
    assert bob_api.get(f"/api/scenarios/{key}/").status_code == 404, "and from its link"
    kept = bob_api.get(f"/api/adventures/{adventure['id']}/story/").json()
    assert kept["actions"][0]["text"] == "Wind.", "the story bob started keeps its copy"
    assert ScenarioReport.objects.get(pk=row.pk).status == ScenarioReport.Status.ACTIONED
    mine = alice_api.get("/api/scenarios/mine/").json()[0]
    assert mine["visibility"] == "private"
    assert "unpublished" in mine["moderator_notice"] and "spam" in mine["moderator_notice"], "the author is told why"
    assert bob_api.get("/api/scenarios/mine/").json() == []

    # the author changes it and publishes again: the notice is gone, the first publication date kept
    first = Scenario.objects.get(key=key).published_at
    alice_api.patch(f"/api/scenarios/{key}/", {"description": "Airships, no adverts."}, format="json")
    again = alice_api.patch(f"/api/scenarios/{key}/", {"visibility": "published"}, format="json").json()
    assert again["moderator_notice"] == "" and Scenario.objects.get(key=key).published_at == first


def test_hidden_vanishes_from_library_and_link_the_author_cannot_share_it_and_restore_brings_it_back(
    alice_api, bob_api, mod
):
    key = published(alice_api)
    unlisted = alice_api.post("/api/scenarios/", {"title": "Back Alley", "opening": "Rain."}, format="json").json()
    alice_api.patch(f"/api/scenarios/{unlisted['key']}/", {"visibility": "unlisted"}, format="json")
    started = bob_api.post(f"/api/scenarios/{unlisted['key']}/play/", {}, format="json").json()
    pks = list(Scenario.objects.filter(key__in=[key, unlisted["key"]]).values_list("pk", flat=True))
    mod.post(reverse("admin:stories_scenario_changelist"), {"action": "hide", "_selected_action": pks})

    assert key not in keys_found(bob_api, "airships")
    assert bob_api.get(f"/api/scenarios/{unlisted['key']}/").status_code == 404, "a share link stops working"
    assert bob_api.post(f"/api/scenarios/{unlisted['key']}/play/", {}, format="json").status_code == 404
    assert Adventure.objects.filter(pk=started["id"]).exists()
    own = alice_api.get(f"/api/scenarios/{key}/").json()
    assert own["hidden"] and "hid" in own["moderator_notice"]
    refused = alice_api.patch(f"/api/scenarios/{key}/", {"visibility": "unlisted"}, format="json")
    assert refused.status_code == 409 and "moderator" in refused.json()["detail"]

    mod.post(reverse("admin:stories_scenario_changelist"), {"action": "restore", "_selected_action": pks})
    assert key in keys_found(bob_api, "airships")
    assert bob_api.get(f"/api/scenarios/{unlisted['key']}/").status_code == 200
    assert alice_api.get(f"/api/scenarios/{key}/").json()["moderator_notice"] == ""


def test_a_dismissed_report_leaves_the_scenario_as_it_was(alice_api, bob_api, mod):
    key = published(alice_api)
    bob_api.post(f"/api/scenarios/{key}/report/", {"reason": "other", "text": "I did not like it"}, format="json")
    row = ScenarioReport.objects.get(scenario__key=key)
    mod.post(reverse("admin:stories_scenarioreport_changelist"), {"action": "dismiss", "_selected_action": [row.pk]})
    assert ScenarioReport.objects.get(pk=row.pk).status == ScenarioReport.Status.DISMISSED
    assert key in keys_found(bob_api, "airships")
    assert alice_api.get(f"/api/scenarios/{key}/").json()["moderator_notice"] == ""
    again = bob_api.post(f"/api/scenarios/{key}/report/", {"reason": "spam"}, format="json")
    assert again.status_code == 201, "a settled report does not stop a new one"


def test_moderators_read_scenarios_and_reports_but_edit_nothing(alice_api, bob_api, mod):
    key = published(alice_api)
    bob_api.post(f"/api/scenarios/{key}/report/", {"reason": "spam"}, format="json")
    scenario = Scenario.objects.get(key=key)
    page = mod.get(reverse("admin:stories_scenario_change", args=[scenario.pk]))
    assert page.status_code == 200 and "Wind." in page.content.decode(), "the opening is shown to judge it"
    refused = mod.post(reverse("admin:stories_scenario_change", args=[scenario.pk]), {"title": "pwned"})
    assert refused.status_code == 403
    assert mod.get(reverse("admin:stories_scenario_add")).status_code == 403
    assert Scenario.objects.get(pk=scenario.pk).title == "Sky Pirates"


def test_the_author_is_told_on_the_library_page_their_scenario_page_and_their_list(alice, alice_api, mod, client):
    key = published(alice_api)
    pk = Scenario.objects.get(key=key).pk
    mod.post(reverse("admin:stories_scenario_changelist"), {"action": "unpublish", "_selected_action": [pk]})
    client.force_login(alice)
    assert "The moderators wrote about 1 of your scenarios" in client.get("/library/").content.decode()
    for url in (f"/library/s/{key}/", "/library/mine/"):
        assert "A moderator unpublished this scenario" in client.get(url).content.decode(), url
