"""What a newcomer reads before they play: the site says what it is at /, and a player with no model
(and no demo model) is told on every page, before starting a story, what to set and where."""

import pytest

pytestmark = pytest.mark.django_db

NOTICE = "No model is set up yet"


def test_a_visitor_reads_what_the_site_is_at_the_root_and_can_sign_up(client):
    page = client.get("/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "continues the story" in text and 'href="/accounts/signup/"' in text
    assert NOTICE not in text


def test_a_player_with_no_model_is_told_before_starting_a_story_with_a_link_to_settings(client, alice, settings):
    settings.DEMO_ENDPOINT_URL = ""
    client.force_login(alice)
    for path in ("/library/", "/play/"):
        page = client.get(path).content.decode()
        assert NOTICE in page and 'href="/settings/"' in page, path
    story = client.post("/play/", {"title": "Road", "opening": "Dawn."})
    play = client.get(story["Location"]).content.decode()
    assert NOTICE in play, "the play page says it above the story too"


def test_a_player_with_a_model_or_the_demo_is_not_told(client, alice, settings, fake_llm, demo):
    client.force_login(alice)
    assert NOTICE not in client.get("/library/").content.decode(), "the demo model plays for them"
    settings.DEMO_ENDPOINT_URL = ""
    from stories.accounts import ai_settings

    ai_settings.ai_settings_update(user_id=alice.pk, endpoint_url=fake_llm.url, model="m")
    assert NOTICE not in client.get("/library/").content.decode()


def test_a_search_past_its_limit_says_more_passages_match(alice_api):
    aid = alice_api.post("/api/adventures/", {"title": "Mill", "opening": "The mill wheel turns."}, format="json")
    aid = aid.json()["id"]
    from stories.models import Adventure
    from stories.tree import writes

    head = Adventure.objects.get(pk=aid).head_branch_id
    for n in range(25):
        writes.place(adventure_id=aid, branch_id=head, kind="story", text=f"The mill wheel turns again ({n}).")
    found = alice_api.get(f"/api/adventures/{aid}/story/search/", {"q": "wheel"}).json()
    assert len(found["results"]) == 20 and found["more"] is True
    few = alice_api.get(f"/api/adventures/{aid}/story/search/", {"q": "wheel", "limit": 50}).json()
    assert len(few["results"]) == 26 and few["more"] is False
