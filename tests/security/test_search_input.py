"""Search input is bounded before it reaches Postgres: any text typed into a search box (the
library's, the story's, an agent's memories) is a 200, never a parser error; a query that parses to
nothing finds nothing; and words, "phrases", `or` and `-word` keep their web-search meaning."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.examples import examples

pytestmark = pytest.mark.django_db

HOSTILE = [
    "-" * 33,
    "-" * 500,
    "- " * 300,
    "or " * 200,
    '"' * 101,
    "!" * 80 + "&|:*()<->",
    "a " * 400,
    "(((((((((( ))))",
    "<-> <2> !!!! &&& |||",
    '"unclosed phrase',
    "' OR 1=1 --",
    "\u202e\u200b\ufeff",
]


@pytest.fixture
def places(alice_plays, alice):
    api = alice_plays
    aid = api.post("/api/adventures/", {"title": "Lantern", "opening": "The lantern road is dark."}, format="json")
    aid = aid.json()["id"]
    api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "light the lantern"}, format="json")
    world = api.post("/api/worlds/", {"name": "Town"}, format="json").json()["id"]
    api.post(
        f"/api/worlds/{world}/events/", {"type": "say", "actor": "ann", "text": "The lantern is lit."}, format="json"
    )
    return {
        "library": "/api/scenarios/",
        "story": f"/api/adventures/{aid}/story/search/",
        "memories": f"/api/worlds/{world}/agents/ann/memories/",
    }


def search(api, client, places, text):
    answers = {name: api.get(url, {"q": text}) for name, url in places.items()}
    answers["library page"] = client.get("/library/", {"q": text})
    return answers


def test_hostile_searches_answer_200_everywhere(places, alice_plays, client, alice):
    """Under the search box's 200 characters every text is a 200; past them a 400 naming ``q``."""
    client.force_login(alice)
    for text in HOSTILE:
        for where, answer in search(alice_plays, client, places, text).items():
            if len(text) <= 200:
                assert answer.status_code == 200, (where, text[:40], answer.status_code)
            elif where == "library page":
                assert answer.status_code == 400 and b"200 characters" in answer.content
            else:
                assert answer.status_code == 400 and "q" in answer.json(), (where, answer.json())


def test_words_phrases_or_and_not_keep_their_meaning(places, alice_plays):
    story = places["story"]
    assert alice_plays.get(story, {"q": "lantern"}).json()["results"], "a word"
    assert alice_plays.get(story, {"q": '"lantern road"'}).json()["results"], "a phrase"
    assert not alice_plays.get(story, {"q": '"road lantern"'}).json()["results"], "a phrase in its order"
    assert alice_plays.get(story, {"q": "dragon or lantern"}).json()["results"], "either"
    lit = alice_plays.get(story, {"q": "lantern -dark"}).json()["results"]
    assert lit and all("dark" not in r["snippet"] for r in lit), "not"
    assert alice_plays.get(story, {"q": "-" * 40}).json()["results"] == [], "nothing to search finds nothing"


@settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(text=st.text(alphabet=st.sampled_from(list('ab -"|&!():*<>or')), max_size=120))
def test_any_search_text_is_a_200(places, alice_plays, text):
    for name, url in places.items():
        answer = alice_plays.get(url, {"q": text})
        assert answer.status_code in (200, 400), (name, text, answer.status_code)
