"""Recall uses time: a question asking *when* finds the memory that says when,
and a query naming a period ("in June", "yesterday") finds what happened in
it, by the memories' event times. Asked through the recall API, as agent
frameworks ask."""

from datetime import datetime, timedelta
from datetime import timezone as tz

import pytest
from django.utils import timezone

from memory.agents import when
from tests.support.agents import SMALL_TALK, embed_all, recall, say

pytestmark = pytest.mark.django_db


def test_a_question_naming_a_month_finds_what_happened_in_it_by_event_time(agent_api, world):
    say(
        agent_api,
        world,
        "ann",
        "bo",
        "We went camping by the river, it rained all night.",
        datetime(2023, 6, 20, 18, tzinfo=tz.utc),
    )
    say(
        agent_api,
        world,
        "ann",
        "bo",
        "We went camping up in the hills, the stars were bright.",
        datetime(2023, 8, 10, 18, tzinfo=tz.utc),
    )
    say(
        agent_api,
        world,
        "ann",
        "bo",
        "The bakery on the corner sells rye bread.",
        datetime(2023, 7, 1, 9, tzinfo=tz.utc),
    )
    embed_all(world)
    june = recall(agent_api, world, "bo", "When did Ann go camping in June?")
    assert "river" in june[0]["content"] and june[0]["parts"]["time"] > 0
    august = recall(agent_api, world, "bo", "Where did Ann camp in August 2023?")
    assert "hills" in august[0]["content"] and august[0]["parts"]["time"] > 0
    assert all(m["parts"]["time"] == 0 for m in recall(agent_api, world, "bo", "Where did Ann go camping?")), (
        "a query that names no time and asks no 'when' leaves time out"
    )


def test_a_when_question_ranks_the_memory_that_says_when(agent_api, world):
    start = timezone.now() - timedelta(days=30)
    say(agent_api, world, "gina", "jon", "Rosa inked my tattoo two years ago.", start)
    say(agent_api, world, "gina", "jon", "Rosa inked my tattoo, a rose for freedom.", start + timedelta(days=20))
    for n, line in enumerate([*SMALL_TALK, "The landlord raised the rent."]):
        say(agent_api, world, "gina", "jon", line, start + timedelta(days=5 + n))
    embed_all(world)
    asked = recall(agent_api, world, "jon", "When did Gina get her tattoo?")
    assert "two years ago" in asked[0]["content"] and asked[0]["parts"]["time"] > 0
    rose = next(m for m in asked if "a rose" in m["content"])
    assert rose["parts"]["time"] == 0, "a memory that does not say when gets nothing for time"
    plain = recall(agent_api, world, "jon", "What did Rosa ink for Gina?")
    assert all(m["parts"]["time"] == 0 for m in plain), "only a question about time weighs what says when"


def test_yesterday_means_the_day_before_the_question(agent_api, world):
    now = timezone.now()
    yesterday_noon = (now - timedelta(days=1)).replace(hour=12, minute=0, second=0, microsecond=0)
    say(agent_api, world, "ann", "bo", "The market had fresh figs and a juggler.", yesterday_noon)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    earlier_today = now - min(timedelta(minutes=30), (now - midnight) / 2)  # today, also just after midnight
    say(agent_api, world, "ann", "bo", "The market was quiet, only a few stalls.", earlier_today)
    embed_all(world)
    asked = recall(agent_api, world, "bo", "What was at the market yesterday?")
    assert "figs" in asked[0]["content"] and asked[0]["parts"]["time"] > 0


def test_time_cues_read_dates_and_periods_and_leave_ordinary_words_alone():
    now = datetime(2024, 3, 14, 15, tzinfo=tz.utc)  # a Thursday
    assert when.cues("When did she move?", now).asks_when
    assert when.cues("How long has he been painting?", now).asks_when
    assert not when.cues("Where did she move?", now).asks_when
    assert when.cues("what happened in May 2023", now).months == [5]
    assert when.cues("what happened in May 2023", now).years == [2023]
    assert when.cues("May I ask what Jan said?", now).months == [], "'May I' and 'Jan' are not months"
    week = when.cues("what did we do last week", now)
    assert (week.start, week.end) == (datetime(2024, 3, 4, tzinfo=tz.utc), datetime(2024, 3, 11, tzinfo=tz.utc))
    ago = when.cues("the trip two weeks ago", now)
    assert ago.start <= datetime(2024, 2, 29, tzinfo=tz.utc) < ago.end
    assert when.cues("what did she say last year", now).years == [2023]


JON_SAYS = [
    "I travelled to Rome last spring and loved it.",
    "We saw the Colosseum and ate gelato near the Vatican every evening.",
    "The dance studio needs a new wooden floor.",
    "My sister keeps asking about the rent for the studio.",
    "Business has been slow, but the new shoes are selling.",
    "I bought a bicycle to get to work faster.",
    "Our cat knocked over the plant again this morning.",
    "The bank finally approved the loan for the studio.",
    "I have been practising the tango routine every night.",
    "The weather has been cold and grey all week.",
]


def jon_tells_gina(agent_api, world, lines):
    """Jon says ``lines`` to Gina, three days apart, ending about ten days ago; all embedded."""
    start = timezone.now() - timedelta(days=40)
    for n, line in enumerate(lines):
        say(agent_api, world, "jon", "gina", line, start + timedelta(days=3 * n))
    embed_all(world)


def test_a_second_hop_finds_the_other_mention_of_the_subject_the_first_matches_found(agent_api, world, settings):
    """ "Where has Jon travelled?" names Rome's memory directly; the one about the
    Colosseum shares no word with the question, and the second hop (when the
    operator turns it on) ranks it up as the memory nearest in meaning to Rome's."""
    jon_tells_gina(agent_api, world, JON_SAYS)
    question = "Where has Jon travelled?"

    def place(found):
        return next(n for n, m in enumerate(found) if "Colosseum" in m["content"])

    settings.AGENT_RECALL = {
        **settings.AGENT_RECALL,
        "hop": 0.6,
    }  # off by default (docs/benchmarks.md: what LoCoMo showed)
    hopped = recall(agent_api, world, "gina", question, limit=10)
    assert "Rome" in hopped[0]["content"]
    colosseum = hopped[place(hopped)]
    assert colosseum["parts"]["text"] == 0, "it shares no word with the question"
    assert colosseum["parts"]["hop"] == max(m["parts"]["hop"] for m in hopped if "Rome" not in m["content"]) > 0, (
        "of everything but the first match, it is nearest in meaning to the first match"
    )
    settings.AGENT_RECALL = {**settings.AGENT_RECALL, "hop": 0.0}
    one_hop = recall(agent_api, world, "gina", question, limit=10)
    assert all(m["parts"]["hop"] == 0 for m in one_hop), "off, the hop adds nothing"
    assert colosseum["score"] > one_hop[place(one_hop)]["score"]


def test_a_question_asking_for_many_things_gets_the_second_hop_and_one_asking_for_one_does_not(
    agent_api, world, settings
):
    """With the list hop on (an operator's knob) the hop runs only for questions that ask for many
    things ("which cities...", "how many..."): it reaches the Colosseum's memory, which shares no word
    with the question; "where has Jon travelled?" asks for one place and ranks as before."""
    from memory.agents.agent_recall import asks_for_many

    assert asks_for_many("Which cities has Jon visited?") and asks_for_many("How many games has John won?")
    assert asks_for_many("What video games does Nate play?") and asks_for_many("What are the names of his kids?")
    assert not asks_for_many("Where has Jon travelled?") and not asks_for_many("What was Joanna's audition for?")
    assert not asks_for_many("Which team did John sign with on 21 May, 2023?")
    settings.AGENT_RECALL = {**settings.AGENT_RECALL, "list_hop": 0.3}
    jon_tells_gina(agent_api, world, JON_SAYS)
    many = recall(agent_api, world, "gina", "Which cities has Jon travelled to?", limit=10)
    colosseum = next(m for m in many if "Colosseum" in m["content"])
    assert colosseum["parts"]["hop"] > 0, "the hop reached it"
    one = recall(agent_api, world, "gina", "Where has Jon travelled?", limit=10)
    assert all(m["parts"]["hop"] == 0 for m in one), "a question asking for one thing: no hop"


def test_a_question_asking_for_many_things_ranks_by_meaning_more_and_one_asking_for_one_as_before(
    agent_api, world, settings
):
    """A list question names a kind ("which cities"), and the memories it wants share that kind's
    meaning more than its words: its meaning's share of the score is list_vector times the usual one,
    and the Colosseum's memory, which shares no word with it, scores higher for it. A question asking
    for one thing scores as before."""
    jon_tells_gina(agent_api, world, JON_SAYS)
    many_q, one_q = "Which cities has Jon travelled to?", "Where has Jon travelled?"

    def ranked(question, list_vector):
        settings.AGENT_RECALL = {**settings.AGENT_RECALL, "list_hop": 0.0, "list_vector": list_vector}
        return {m["content"]: m for m in recall(agent_api, world, "gina", question, limit=10)}

    plain, weighted = ranked(many_q, 1.0), ranked(many_q, 1.5)
    for content, memory in weighted.items():
        if content in plain:
            assert memory["parts"]["vector"] == pytest.approx(1.5 * plain[content]["parts"]["vector"], abs=1e-3)
    colosseum = next(c for c in weighted if "Colosseum" in c)
    assert weighted[colosseum]["parts"]["text"] == 0, "it shares no word with the question"
    assert weighted[colosseum]["score"] > plain[colosseum]["score"]
    assert {c: m["parts"]["vector"] for c, m in ranked(one_q, 1.5).items()} == {
        c: m["parts"]["vector"] for c, m in ranked(one_q, 1.0).items()
    }, "a question asking for one thing: the weight does not apply"
