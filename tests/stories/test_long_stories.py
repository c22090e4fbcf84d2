"""A long story stays readable: every page of it loads (older ones as the player scrolls up), a
search over the played path finds a passage, and the story leaves as plain text or Markdown."""

import pytest

from stories.adventures import story_create
from stories.tree import writes

pytestmark = pytest.mark.django_db


@pytest.fixture
def long_road(alice):
    adventure = story_create(owner_id=alice.pk, title="A long road", opening="The road begins at the river.")
    for n in range(2, 321):
        kind, text = ("do", f"walk on past milestone {n}") if n % 2 == 0 else ("story", f"Milestone {n} is mossy.")
        if n == 77:
            text = "A hooded stranger hides a silver key under milestone 77."
        writes.place(
            adventure_id=adventure.pk, branch_id=adventure.head_branch_id, kind=kind, text=text, ask_pass=False
        )
    return adventure.pk


def test_every_page_of_a_320_action_story_loads_back_to_the_opening(long_road, alice_api):
    seen, before = [], None
    while True:
        url = f"/api/adventures/{long_road}/story/?limit=200" + (f"&before={before}" if before else "")
        page = alice_api.get(url).json()
        seen = [a["depth"] for a in page["actions"]] + seen
        before = page["next_before"]
        if before is None:
            break
    assert seen == list(range(1, 321))


def test_a_search_finds_the_passage_with_the_words_marked(long_road, alice_api):
    found = alice_api.get(f"/api/adventures/{long_road}/story/search/?q=hiding+keys").json()
    assert found["results"][0]["depth"] == 77, found  # "hiding keys" finds "hides a key": words are stemmed
    assert "«key»" in found["results"][0]["snippet"]
    phrase = alice_api.get(f'/api/adventures/{long_road}/story/search/?q="milestone 300"').json()["results"]
    assert [r["depth"] for r in phrase] == [300]
    assert alice_api.get(f"/api/adventures/{long_road}/story/search/?q=dragon").json()["results"] == []


@pytest.mark.parametrize("query", ["", "q=", "q=" + "x" * 201, "q=key&limit=0", "q=key&limit=51"])
def test_a_search_to_fix_is_a_400_naming_it(long_road, alice_api, query):
    refused = alice_api.get(f"/api/adventures/{long_road}/story/search/?{query}")
    assert refused.status_code == 400, refused.content


def test_the_story_leaves_as_plain_text_and_markdown(long_road, alice_api):
    text = alice_api.get(f"/api/adventures/{long_road}/story/export/")
    assert text.status_code == 200 and text["Content-Type"].startswith("text/plain")
    assert 'filename="story-' in text["Content-Disposition"]
    body = b"".join(text.streaming_content).decode()
    assert body.startswith("A long road\n===========\n\nThe road begins at the river.")
    assert "> You walk on past milestone 2\n\nMilestone 3 is mossy." in body
    assert body.count("\n\n") >= 320
    md = b"".join(alice_api.get(f"/api/adventures/{long_road}/story/export/?type=markdown").streaming_content).decode()
    assert md.startswith("# A long road") and "**> You walk on past milestone 320**" in md
    assert alice_api.get(f"/api/adventures/{long_road}/story/export/?type=pdf").status_code == 400


def test_another_players_story_is_not_found(long_road, bob_api):
    for path in ("story/search/?q=key", "story/export/"):
        assert bob_api.get(f"/api/adventures/{long_road}/{path}").status_code == 404
