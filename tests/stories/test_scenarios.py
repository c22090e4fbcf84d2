"""Scenarios as players use them: write one, share it, find it in the library, start a story from
it in one click (its questions answered, its cards copied), keep versions that never reach a
story already begun, save an adventure's setup as one, export and import it, report it."""

import pytest

from stories.models import Adventure, Scenario, ScenarioReport, StoryCard
from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db

HARBOUR = {
    "title": "The Drowned Harbour",
    "description": "A smuggler's port where the tide hides a sunken bell tower.",
    "opening": "Fog rolls over the quay. You are ${Your name?}, and the harbourmaster owes you money.",
    "plot_essentials": "${Your name?} runs a small boat called ${Your boat's name?}.",
    "ai_instructions": "Second person.",
    "authors_note": "Salt and rope.",
    "tags": ["Pirates", "mystery"],
    "rating": "teen",
    "cover_emoji": "⚓",
    "cover_color": "#225577",
    "cards": [
        {"type": "character", "name": "Harbourmaster Quill", "keys": ["Quill"], "entry": "He owes ${Your name?}."},
        {
            "type": "place",
            "name": "The bell tower",
            "keys": ["bell", "tower"],
            "entry": "Under the water.",
            "in_cast": False,
        },
    ],
}


def write(api, **changes):
    response = api.post("/api/scenarios/", {**HARBOUR, **changes}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def test_a_written_scenario_is_private_until_published_then_anyone_finds_it_and_plays_it(alice_api, bob_api, charlie):
    mine = write(alice_api)
    key = mine["key"]
    assert mine["visibility"] == "private" and mine["version"] == 1
    assert mine["placeholders"] == ["Your name?", "Your boat's name?"]
    assert mine["tags"] == ["pirates", "mystery"], "tags are kept lower-case"

    assert bob_api.get(f"/api/scenarios/{key}/").status_code == 404, "another player's private scenario is not there"
    assert bob_api.post(f"/api/scenarios/{key}/play/", {}, format="json").status_code == 404
    found = bob_api.get("/api/scenarios/", {"q": "harbour"}).json()
    assert key not in [row["key"] for row in found]

    published = alice_api.patch(f"/api/scenarios/{key}/", {"visibility": "published"}, format="json").json()
    assert published["visibility"] == "published" and published["version"] == 1, "sharing is not a new version"
    for query in ({"q": "drowned harbour"}, {"q": "smuggler"}, {"q": "pirates"}, {"tag": "mystery"}):
        rows = bob_api.get("/api/scenarios/", query).json()
        assert key in [row["key"] for row in rows], query
    assert key not in [r["key"] for r in bob_api.get("/api/scenarios/", {"q": "spaceship"}).json()]
    row = next(r for r in bob_api.get("/api/scenarios/", {"q": "harbour"}).json() if r["key"] == key)
    assert row["author"] == "alice" and row["play_count"] == 0

    refused = bob_api.post(f"/api/scenarios/{key}/play/", {"answers": {"Your name?": "Tam"}}, format="json")
    assert refused.status_code == 400 and "Your boat's name?" in refused.json()["detail"]
    assert not Adventure.objects.filter(owner__username="bob").exists()
    started = bob_api.post(
        f"/api/scenarios/{key}/play/",
        {"answers": {"Your name?": "Tam", "Your boat's name?": "the Gull"}},
        format="json",
    )
    assert started.status_code == 201, started.json()
    adventure = started.json()
    assert adventure["plot_essentials"] == "Tam runs a small boat called the Gull."
    assert adventure["persona_name"] == "Tam", "the answer to 'Your name?' names the protagonist (memories say Tam)"
    story = bob_api.get(f"/api/adventures/{adventure['id']}/story/").json()
    assert story["actions"][0]["text"].startswith("Fog rolls over the quay. You are Tam,")
    cards = bob_api.get(f"/api/adventures/{adventure['id']}/cards/").json()
    assert [(c["name"], c["entry"], c["in_cast"]) for c in cards] == [
        ("Harbourmaster Quill", "He owes Tam.", True),
        ("The bell tower", "Under the water.", False),
    ]
    assert Scenario.objects.get(key=key).play_count == 1
    # the copy is bob's to change; the scenario stays as alice wrote it
    quill = cards[0]["id"]
    bob_api.patch(f"/api/adventures/{adventure['id']}/cards/{quill}/", {"entry": "He owes me nothing."}, format="json")
    assert alice_api.get(f"/api/scenarios/{key}/").json()["cards"][0]["entry"] == "He owes ${Your name?}."

    alice_api.post(
        f"/api/scenarios/{key}/play/", {"answers": {"Your name?": "A", "Your boat's name?": "B"}}, format="json"
    )
    assert Scenario.objects.get(key=key).play_count == 1, "the author's own plays are not counted"


def test_a_new_version_never_changes_a_story_already_started(alice_api, bob_api):
    key = write(alice_api)["key"]
    alice_api.patch(f"/api/scenarios/{key}/", {"visibility": "unlisted"}, format="json")
    answers = {"answers": {"Your name?": "Tam", "Your boat's name?": "Gull"}}
    before = bob_api.post(f"/api/scenarios/{key}/play/", answers, format="json").json()

    changed = alice_api.patch(
        f"/api/scenarios/{key}/",
        {"plot_essentials": "${Your name?} lost the ${Your boat's name?} at cards.", "cards": []},
        format="json",
    ).json()
    assert changed["version"] == 2 and changed["cards"] == []
    same = alice_api.patch(f"/api/scenarios/{key}/", {"cards": []}, format="json").json()
    assert same["version"] == 2, "a save that changes nothing is no new version"
    versions = alice_api.get(f"/api/scenarios/{key}/versions/").json()
    assert [v["number"] for v in versions] == [2, 1]
    assert bob_api.get(f"/api/scenarios/{key}/versions/").status_code == 404, "versions are the author's"

    kept = bob_api.get(f"/api/adventures/{before['id']}/").json()
    assert kept["plot_essentials"] == "Tam runs a small boat called Gull."
    assert StoryCard.objects.filter(adventure_id=before["id"]).count() == 2
    after = bob_api.post(f"/api/scenarios/{key}/play/", answers, format="json").json()
    assert after["plot_essentials"] == "Tam lost the Gull at cards."
    assert Adventure.objects.get(pk=before["id"]).scenario_version.number == 1
    assert Adventure.objects.get(pk=after["id"]).scenario_version.number == 2


def test_unlisted_is_a_share_link_not_a_library_entry_and_private_again_ends_the_link(alice_api, bob_api):
    key = write(alice_api)["key"]
    alice_api.patch(f"/api/scenarios/{key}/", {"visibility": "unlisted"}, format="json")
    assert bob_api.get(f"/api/scenarios/{key}/").status_code == 200
    assert key not in [r["key"] for r in bob_api.get("/api/scenarios/", {"q": "harbour"}).json()]
    alice_api.patch(f"/api/scenarios/{key}/", {"visibility": "private"}, format="json")
    assert bob_api.get(f"/api/scenarios/{key}/").status_code == 404


def test_the_library_sorts_filters_pages_and_honours_the_players_rating(alice_api, bob_api, bob):
    keys = {}
    for title, rating in [("Calm Meadow", "everyone"), ("Dark Cellar", "mature"), ("Night Market", "teen")]:
        keys[title] = write(alice_api, title=title, rating=rating, tags=["mine"], description=title)["key"]
        alice_api.patch(f"/api/scenarios/{keys[title]}/", {"visibility": "published"}, format="json")
    for _ in range(2):
        bob_api.post(
            f"/api/scenarios/{keys['Night Market']}/play/",
            {"answers": {"Your name?": "B", "Your boat's name?": "C"}},
            format="json",
        )

    def titles(**query):
        return [r["title"] for r in bob_api.get("/api/scenarios/", {"tag": "mine", **query}).json()]

    assert titles() == ["Night Market", "Calm Meadow"], "mature is left out until the player opts in; newest first"
    assert titles(sort="played") == ["Night Market", "Calm Meadow"]
    assert titles(rating="everyone") == ["Calm Meadow"]
    assert bob_api.patch("/api/settings/", {"content_rating": "mature"}, format="json").status_code == 200
    assert titles() == ["Night Market", "Dark Cellar", "Calm Meadow"]
    page = bob_api.get("/api/scenarios/", {"tag": "mine", "limit": 1, "offset": 1})
    assert [r["title"] for r in page.json()] == ["Dark Cellar"] and page["X-Total-Count"] == "3"
    assert bob_api.get("/api/scenarios/", {"sort": "oldest"}).status_code == 400
    assert bob_api.get("/api/scenarios/", {"limit": 101}).status_code == 400
    assert bob_api.patch("/api/settings/", {"content_rating": "x"}, format="json").status_code == 400


def test_the_starter_library_is_there_for_a_newcomer_and_plays_with_the_demo_model(demo, charlie):
    charlie_api = api_client_for(charlie)
    starters = charlie_api.get("/api/scenarios/", {"limit": 100}).json()
    starter = [r for r in starters if r["author"] is None]
    assert len(starter) >= 4 and len({tuple(r["tags"]) for r in starter}) == len(starter), "different genres"
    assert all(r["rating"] != "mature" for r in starter), "the default preference hides mature ones"
    lantern = next(r for r in starter if r["title"] == "The Lantern Road")
    page = charlie_api.get(f"/api/scenarios/{lantern['key']}/").json()
    assert page["placeholders"] == ["Your name?"] and any(c["in_cast"] for c in page["cards"])
    adventure = charlie_api.post(
        f"/api/scenarios/{lantern['key']}/play/", {"answers": {"Your name?": "Wren"}}, format="json"
    ).json()
    turn = charlie_api.post(
        f"/api/adventures/{adventure['id']}/turns/", {"mode": "do", "text": "light the lantern"}, format="json"
    )
    assert turn.status_code == 201, turn.json()
    prompt = str(demo.chat_requests()[-1].body["messages"])
    assert "Wren" in prompt and "Old Bram" in prompt, "the answer and the cast reach the demo model"
    assert charlie_api.patch(f"/api/scenarios/{lantern['key']}/", {"title": "mine"}, format="json").status_code == 404


def test_save_as_scenario_takes_the_setup_never_the_story_or_its_memories(alice_plays):
    adventure = alice_plays.post(
        "/api/adventures/",
        {
            "title": "Ice Hotel",
            "opening": "Snow seals the doors.",
            "plot_essentials": "A hotel cut off by snow.",
            "story_summary": "Secret summary.",
            "cards": [{"type": "character", "name": "Ines", "keys": ["Ines"], "entry": "The concierge."}],
        },
        format="json",
    ).json()
    aid = adventure["id"]
    alice_plays.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "I try the door"}, format="json")
    alice_plays.post(f"/api/adventures/{aid}/memories/", {"text": "Secret memory."}, format="json")
    saved = alice_plays.post(f"/api/adventures/{aid}/scenario/")
    assert saved.status_code == 201, saved.json()
    doc = alice_plays.get(f"/api/scenarios/{saved.json()['key']}/export/").json()
    assert doc["scenario"]["opening"] == "Snow seals the doors."
    assert doc["scenario"]["plot_essentials"] == "A hotel cut off by snow."
    assert [c["name"] for c in doc["scenario"]["cards"]] == ["Ines"]
    text = str(doc)
    assert "I try the door" not in text and "Secret" not in text
    assert saved.json()["visibility"] == "private"


def test_export_then_import_is_the_same_scenario_and_a_bad_document_stores_nothing(alice_api):
    key = write(alice_api)["key"]
    doc = alice_api.get(f"/api/scenarios/{key}/export/").json()
    assert doc["format"] == "everlore-scenario"
    copy = alice_api.post("/api/scenarios/import/", doc, format="json")
    assert copy.status_code == 201, copy.json()
    again = alice_api.get(f"/api/scenarios/{copy.json()['key']}/export/").json()
    assert again == doc and copy.json()["visibility"] == "private"
    count = Scenario.objects.count()
    for bad, where in [
        ({**doc, "format": "other"}, "format"),
        ({**doc, "scenario": {**doc["scenario"], "cards": [{"name": "x"}] * 101}}, "cards"),
        ({**doc, "scenario": {**doc["scenario"], "cover_color": "red"}}, "cover_color"),
        ({**doc, "scenario": {**doc["scenario"], "tags": ["<b>"]}}, "tags"),
        ({**doc, "scenario": {**doc["scenario"], "title": "x" * 201}}, "title"),
        ({**doc, "scenario": {**doc["scenario"], "opening": "".join(f"${{q{i}}}" for i in range(11))}}, "questions"),
        ({**doc, "scenario": {**doc["scenario"], "rating": "adult"}}, "rating"),
        ({**doc, "scenario": {**doc["scenario"], "cards": [{"name": "x", "in_cast": "yes"}]}}, "in_cast"),
        ({**doc, "scenario": {**doc["scenario"], "colour": "#000000"}}, "colour"),
    ]:
        response = alice_api.post("/api/scenarios/import/", bad, format="json")
        assert response.status_code == 400, where
        assert where in str(response.json()), (where, response.json())
    assert Scenario.objects.count() == count


def test_publishing_is_limited_per_day_and_needs_an_opening(alice_api, settings):
    settings.SCENARIO_PUBLISHES_PER_DAY = 2
    empty = write(alice_api, opening="")["key"]
    refused = alice_api.patch(f"/api/scenarios/{empty}/", {"visibility": "published"}, format="json")
    assert refused.status_code == 400 and "opening" in refused.json()["detail"]
    keys = [write(alice_api)["key"] for _ in range(3)]
    answers = [alice_api.patch(f"/api/scenarios/{k}/", {"visibility": "published"}, format="json") for k in keys]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert "Retry-After" in answers[2] and Scenario.objects.get(key=keys[2]).visibility == "private"


def test_reports_reach_the_queue_once_per_player_and_are_rate_limited(alice_api, bob_api, charlie, settings):
    key = write(alice_api)["key"]
    alice_api.patch(f"/api/scenarios/{key}/", {"visibility": "published"}, format="json")
    first = bob_api.post(f"/api/scenarios/{key}/report/", {"reason": "spam", "text": "ads"}, format="json")
    assert first.status_code == 201 and first.json()["status"] == "open"
    again = bob_api.post(f"/api/scenarios/{key}/report/", {"reason": "spam"}, format="json")
    assert again.status_code == 409
    assert bob_api.post(f"/api/scenarios/{key}/report/", {"reason": "bad"}, format="json").status_code == 400
    own = alice_api.post(f"/api/scenarios/{key}/report/", {"reason": "spam"}, format="json")
    assert own.status_code == 400 and "your own" in own.json()["detail"]
    assert ScenarioReport.objects.filter(scenario__key=key).count() == 1

    settings.SCENARIO_REPORTS_PER_HOUR = 2
    charlie_api = api_client_for(charlie)
    others = [write(alice_api, title=f"T{i}")["key"] for i in range(3)]
    for k in others:
        alice_api.patch(f"/api/scenarios/{k}/", {"visibility": "published"}, format="json")
    codes = [
        charlie_api.post(f"/api/scenarios/{k}/report/", {"reason": "other"}, format="json").status_code for k in others
    ]
    assert codes == [201, 201, 429]


def test_the_library_costs_the_same_queries_for_three_scenarios_or_thirty(alice_api, bob, client):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.force_login(bob)
    bob_api = api_client_for(bob)

    def costs():
        with CaptureQueriesContext(connection) as api:
            assert bob_api.get("/api/scenarios/", {"limit": 100}).status_code == 200
        with CaptureQueriesContext(connection) as page:
            assert client.get("/library/").status_code == 200
        return len(api), len(page)

    def publish(n):
        for i in range(n):
            key = write(alice_api, title=f"Tale {i}")["key"]
            alice_api.patch(f"/api/scenarios/{key}/", {"visibility": "published"}, format="json")

    publish(3)
    costs()  # the first visit makes bob's settings row
    few = costs()
    publish(7)  # 10 publishes a day
    Scenario.objects.filter(author__username="alice").update(published_at=None)
    for scenario in list(Scenario.objects.filter(author__username="alice"))[:3]:
        for i in range(6):
            Scenario.objects.create(
                author=scenario.author,
                key=f"{scenario.key[:10]}x{i}",
                title=f"Copy {i}",
                visibility="published",
                current=scenario.current,
            )
    assert Scenario.objects.filter(visibility="published").count() >= 30
    assert costs() == few, "no query per scenario listed"


def test_a_scenario_keeps_its_newest_fifty_versions_and_a_story_from_an_old_one_keeps_its_copy(alice_api, bob_api):
    key = write(alice_api)["key"]
    alice_api.patch(f"/api/scenarios/{key}/", {"visibility": "unlisted"}, format="json")
    answers = {"answers": {"Your name?": "Tam", "Your boat's name?": "Gull"}}
    first = bob_api.post(f"/api/scenarios/{key}/play/", answers, format="json").json()
    for n in range(2, 53):
        alice_api.patch(f"/api/scenarios/{key}/", {"authors_note": f"note {n}"}, format="json")
    numbers = [v["number"] for v in alice_api.get(f"/api/scenarios/{key}/versions/", {"limit": 100}).json()]
    assert numbers == list(range(52, 2, -1))
    kept = bob_api.get(f"/api/adventures/{first['id']}/").json()
    assert kept["authors_note"] == "Salt and rope." and kept["plot_essentials"].startswith("Tam runs")


def test_cards_changed_with_a_patch_get_the_same_defaults_as_new_ones(alice_api, bob_api):
    key = write(alice_api)["key"]
    changed = alice_api.patch(f"/api/scenarios/{key}/", {"cards": [{"name": "Nell"}]}, format="json")
    assert changed.status_code == 200, changed.json()
    assert changed.json()["cards"] == [
        {"type": "other", "name": "Nell", "keys": [], "entry": "", "notes": "", "in_cast": True}
    ]
    alice_api.patch(f"/api/scenarios/{key}/", {"visibility": "unlisted"}, format="json")
    answers = {"answers": {"Your name?": "Tam", "Your boat's name?": "Gull"}}
    adventure = bob_api.post(f"/api/scenarios/{key}/play/", answers, format="json").json()
    assert [c["name"] for c in bob_api.get(f"/api/adventures/{adventure['id']}/cards/").json()] == ["Nell"]


@pytest.mark.parametrize("cards", [[{}], [{"keys": ["a"]}], [{"name": ""}], [{"name": "A"}, {"entry": "x"}]])
def test_a_patch_checks_a_list_of_cards_whole_and_a_bad_one_stores_no_version(alice_api, cards):
    """Each card a PATCH sends needs what a new card needs (its name): the list replaces the old one.
    A card without one once made a version that answered 500 on every read of the scenario."""
    key = write(alice_api)["key"]
    versions = Scenario.objects.get(key=key).versions.count()
    refused = alice_api.patch(f"/api/scenarios/{key}/", {"cards": cards}, format="json")
    assert refused.status_code == 400 and "cards" in refused.json() and "name" in str(refused.json()), refused.json()
    assert Scenario.objects.get(key=key).versions.count() == versions
    for url in (f"/api/scenarios/{key}/", "/api/scenarios/mine/", f"/api/scenarios/{key}/export/"):
        assert alice_api.get(url).status_code == 200, url


def test_a_patch_leaves_what_it_does_not_name_as_it_was(alice_api):
    key = write(alice_api)["key"]
    changed = alice_api.patch(f"/api/scenarios/{key}/", {"title": "The Dry Harbour"}, format="json").json()
    assert changed["title"] == "The Dry Harbour" and changed["description"] == HARBOUR["description"]
    assert changed["rating"] == "teen" and len(changed["cards"]) == 2


def test_a_newcomer_starts_at_the_library_and_a_player_with_stories_at_their_adventures(alice, client):
    client.force_login(alice)
    assert client.get("/")["Location"] == "/library/"
    Adventure.objects.create(owner=alice, title="Mine")
    assert client.get("/")["Location"] == "/play/"


def test_a_shared_link_above_the_players_rating_says_so_before_they_play(alice_api, bob, client):
    key = write(alice_api, rating="mature")["key"]
    alice_api.patch(f"/api/scenarios/{key}/", {"visibility": "unlisted"}, format="json")
    client.force_login(bob)
    page = client.get(f"/library/s/{key}/").content.decode()
    assert "rated mature, above what you chose to see" in page


def test_answers_that_would_overflow_a_text_are_refused_naming_it_and_store_nothing(alice_api, bob_api):
    key = write(alice_api, title="${Your name?} and ${Your boat's name?}")["key"]
    alice_api.patch(f"/api/scenarios/{key}/", {"visibility": "unlisted"}, format="json")
    long = {"answers": {"Your name?": "N" * 150, "Your boat's name?": "B" * 150}}
    refused = bob_api.post(f"/api/scenarios/{key}/play/", long, format="json")
    assert refused.status_code == 400 and "the title is 305 characters" in refused.json()["detail"]
    assert not Adventure.objects.filter(owner__username="bob").exists()
    fine = {"answers": {"Your name?": "N" * 90, "Your boat's name?": "B" * 90}}
    assert bob_api.post(f"/api/scenarios/{key}/play/", fine, format="json").status_code == 201


def test_a_new_link_ends_the_old_one_and_keeps_the_stories_started_from_it(alice_api, bob_api):
    key = write(alice_api)["key"]
    alice_api.patch(f"/api/scenarios/{key}/", {"visibility": "unlisted"}, format="json")
    answers = {"answers": {"Your name?": "Tam", "Your boat's name?": "Gull"}}
    started = bob_api.post(f"/api/scenarios/{key}/play/", answers, format="json").json()
    assert bob_api.post(f"/api/scenarios/{key}/link/").status_code == 404, "only the author renews it"
    renewed = alice_api.post(f"/api/scenarios/{key}/link/").json()
    assert renewed["key"] != key and renewed["version"] == 1 and renewed["visibility"] == "unlisted"
    assert bob_api.get(f"/api/scenarios/{key}/").status_code == 404, "the old link stops working"
    assert bob_api.get(f"/api/scenarios/{renewed['key']}/").status_code == 200
    assert bob_api.get(f"/api/adventures/{started['id']}/").status_code == 200


def test_an_earlier_version_comes_back_as_the_newest(alice_api, bob_api):
    key = write(alice_api)["key"]
    alice_api.patch(f"/api/scenarios/{key}/", {"opening": "A new opening.", "cards": []}, format="json")
    back = alice_api.post(f"/api/scenarios/{key}/versions/1/restore/")
    assert back.status_code == 200
    assert back.json()["version"] == 3 and back.json()["opening"] == HARBOUR["opening"]
    assert [c["name"] for c in back.json()["cards"]] == ["Harbourmaster Quill", "The bell tower"]
    assert alice_api.post(f"/api/scenarios/{key}/versions/3/restore/").json()["version"] == 3, "the current: no change"
    assert alice_api.post(f"/api/scenarios/{key}/versions/9/restore/").status_code == 404
    assert bob_api.post(f"/api/scenarios/{key}/versions/1/restore/").status_code == 404


@pytest.mark.parametrize(
    "q, found",
    [
        ("lant", True),  # a word as it is being typed
        ("lanterns caravan", True),
        ("Lantern & | ! :* ( road", True),  # tsquery's own syntax is only punctuation here
        ('"lantern road"', True),  # a phrase
        ("lantern -caravan", False),  # web-search "not"
        ("dragon or lantern", True),
        ("spaceship", False),
        ("'", False),
    ],
)
def test_library_search_reads_words_as_typed_and_web_search_syntax(bob_api, q, found):
    rows = bob_api.get("/api/scenarios/", {"q": q})
    assert rows.status_code == 200
    assert ("The Lantern Road" in [r["title"] for r in rows.json()]) is found


def test_the_library_page_pages_and_keeps_the_search_across_pages(alice_api, bob, client, monkeypatch):
    from play import web_library

    monkeypatch.setattr(web_library, "LIBRARY_PAGE", 2)
    for i in range(3):
        key = write(alice_api, title=f"Harbour {i}")["key"]
        alice_api.patch(f"/api/scenarios/{key}/", {"visibility": "published"}, format="json")
    client.force_login(bob)
    first = client.get("/library/", {"q": "harbour", "sort": "new"}).content.decode()
    assert "Harbour 2" in first and "Harbour 0" not in first and "Page 1 of 2" in first
    assert 'href="?q=harbour&amp;sort=new&amp;page=2"' in first
    second = client.get("/library/", {"q": "harbour", "sort": "new", "page": 2}).content.decode()
    assert "Harbour 0" in second and "Harbour 2" not in second
