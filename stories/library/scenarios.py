"""Scenarios: what starts a story (title, opening, plot essentials, instructions, author's note,
cards with their cast, tags, a rating, a cover), written by a player for themselves or for
everyone. Its content lives in versions: every save that changes it writes a new one, and an
adventure started from it copies the version it started from, so nothing a save does reaches a
story already begun. The author is the only one who changes it; others read it while it is
published or unlisted (the key is the share link) and a moderator has not hidden it."""

from __future__ import annotations

import re
import secrets

from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVector
from django.db import IntegrityError, transaction
from django.db.models import F, Q, QuerySet, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from config import search_text
from config.errors import Conflict, InvalidRequest, NotFound
from stories import adventures, limits
from stories.library import macros
from stories.models import (
    ACTION_TEXT_MAX,
    AUTHORS_NOTE_MAX,
    CARD_ENTRY_MAX,
    CARDS_PER_SCENARIO_MAX,
    LONG_TEXT_MAX,
    RATING_ORDER,
    SCENARIO_VERSIONS_KEPT,
    TITLE_MAX,
    Action,
    Adventure,
    Scenario,
    ScenarioReport,
    ScenarioVersion,
    StoryCard,
)
from stories.tree import lineage

EXPORT_FORMAT, EXPORT_VERSION = "everlore-scenario", 1
# `${Your name?}`, as AI Dungeon writes a question the player answers when starting
PLACEHOLDER = re.compile(r"\$\{([^{}\n]{1,80})\}")
# the question that asks the protagonist's name ("Your name?", "What is your character's name?", "Name")
NAME_QUESTION = re.compile(
    r"^\s*(?:what(?:'s| is)\s+)?(?:your|the player'?s|your character'?s|the protagonist'?s|character)?\s*"
    r"(?:first\s+|full\s+)?name\s*\??\s*$",
    re.I,
)
PLACEHOLDERS_MAX = 10  # distinct questions per scenario
ANSWER_MAX = 200  # characters in one answer
SCENARIOS_PER_AUTHOR_MAX = 200
TEXT_FIELDS = ("title", "description", "opening", "plot_essentials", "ai_instructions", "authors_note")
CONTENT_FIELDS = (*TEXT_FIELDS, "tags", "rating", "cover_emoji", "cover_color", "cards")
LIBRARY_FIELDS = ("title", "description", "tags", "rating", "cover_emoji", "cover_color")
PLAYED_FIELDS = ("title", "opening", "plot_essentials", "ai_instructions", "authors_note")  # placeholders filled
CARD_FIELDS = ("type", "name", "keys", "entry", "notes", "in_cast")
# what an adventure holds of each text a scenario's answers fill (stories.models)
FILLED_MAX = {
    "title": TITLE_MAX,
    "opening": ACTION_TEXT_MAX,
    "plot_essentials": LONG_TEXT_MAX,
    "ai_instructions": LONG_TEXT_MAX,
    "authors_note": AUTHORS_NOTE_MAX,
}
Visibility = Scenario.Visibility


def access_own_scenario(*, user_id: int, key: str) -> Scenario:
    """The scenario if ``user_id`` wrote it; NotFound otherwise (a starter is nobody's)."""
    found = Scenario.objects.select_related("current").filter(key=key, author_id=user_id).first()
    if found is None:
        raise NotFound()
    return found


def access_scenario(*, user_id: int, key: str) -> Scenario:
    """The scenario if ``user_id`` may read it: its author always; anyone else while it is published
    or unlisted (knowing the key is the share link) and not hidden by a moderator. NotFound
    otherwise, alike for "private" and "no such"."""
    shared = Q(visibility__in=[Visibility.PUBLISHED, Visibility.UNLISTED], hidden=False)
    found = Scenario.objects.select_related("current", "author").filter(Q(key=key) & (Q(author_id=user_id) | shared))
    scenario = found.first()
    if scenario is None:
        raise NotFound()
    return scenario


def placeholders_of(content: dict) -> list[str]:
    """The questions the player answers on starting, in the order they first appear."""
    texts = [content.get(name) or "" for name in PLAYED_FIELDS]
    for card in content.get("cards") or []:
        texts += [card.get("name") or "", card.get("entry") or "", *(card.get("keys") or [])]
    seen: dict[str, None] = {}
    for text in texts:
        for question in PLACEHOLDER.findall(text):
            seen.setdefault(question.strip(), None)
    return [q for q in seen if q]


def content_of(version: ScenarioVersion) -> dict:
    return {name: getattr(version, name) for name in CONTENT_FIELDS}


def scenario_create(*, author_id: int, **content) -> Scenario:
    """A new private scenario with ``content`` as its first version."""
    if Scenario.objects.filter(author_id=author_id).count() >= SCENARIOS_PER_AUTHOR_MAX:
        raise InvalidRequest(f"you have {SCENARIOS_PER_AUTHOR_MAX} scenarios, the most one player keeps")
    with transaction.atomic():
        scenario = Scenario.objects.create(author_id=author_id, key=secrets.token_urlsafe(12), title=content["title"])
        _version_write(scenario, {**_defaults(), **content})
    return scenario


def scenario_change(*, scenario: Scenario, visibility: str | None = None, **content) -> Scenario:
    """Change the content given (a new version when anything differs from the current one) and,
    if given, who sees it. Publishing counts toward the author's publishes a day (RateLimited);
    a scenario a moderator hid cannot be shared (Conflict)."""
    with transaction.atomic():
        scenario = Scenario.objects.select_for_update(of=("self",)).select_related("current").get(pk=scenario.pk)
        if content:
            merged = {**content_of(scenario.current), **content} if scenario.current else {**_defaults(), **content}
            if scenario.current is None or merged != content_of(scenario.current):
                _version_write(scenario, merged)
        if visibility is not None and visibility != scenario.visibility:
            _visibility_set(scenario, visibility)
    scenario.refresh_from_db()
    return scenario


def scenario_version_restore(*, scenario: Scenario, number: int) -> Scenario:
    """Version ``number``'s content as the newest version (nothing changes when it is the current
    one); NotFound when the scenario keeps no such version."""
    old = ScenarioVersion.objects.filter(scenario=scenario, number=number).first()
    if old is None:
        raise NotFound()
    return scenario_change(scenario=scenario, **content_of(old))


def scenario_link_renew(*, scenario: Scenario) -> Scenario:
    """A new key: the old link (and the old API id) stops working at once; adventures started from
    the scenario are unchanged. Counts toward the author's SHARES_PER_HOUR."""
    limits.share(user_id=scenario.author_id)
    Scenario.objects.filter(pk=scenario.pk).update(key=secrets.token_urlsafe(12), updated_at=timezone.now())
    scenario.refresh_from_db()
    return scenario


def scenario_delete(*, scenario: Scenario) -> None:
    """The scenario and its versions go; adventures started from it keep their copy."""
    scenario.delete()


def scenario_from_adventure(*, adventure: Adventure) -> Scenario:
    """A private scenario holding ``adventure``'s setup: its title, opening, plot essentials,
    instructions, author's note and cards; never the story played since, its summary or its
    memories."""
    start = lineage.node_at(lineage.head(adventure), 1)
    cards = list(StoryCard.objects.filter(adventure=adventure).order_by("id").values(*CARD_FIELDS))
    if len(cards) > CARDS_PER_SCENARIO_MAX:
        raise InvalidRequest(
            f"this adventure has {len(cards)} story cards; a scenario holds at most {CARDS_PER_SCENARIO_MAX}"
        )
    return scenario_create(
        author_id=adventure.owner_id,
        title=adventure.title,
        opening=start.text if start is not None and start.kind == Action.Kind.START else "",
        plot_essentials=adventure.plot_essentials,
        ai_instructions=adventure.ai_instructions,
        authors_note=adventure.authors_note,
        cards=cards,
    )


def scenario_play(*, scenario: Scenario, user_id: int, answers: dict[str, str]) -> Adventure:
    """A new adventure of ``user_id`` with the current version's setup, each `${question}` replaced
    by its answer, and its cards copied (the player's to change from then on). Every question
    needs an answer and every answer a question (InvalidRequest naming them). The play count
    goes up unless the author plays it. Counts toward the player's SCENARIO_PLAYS_PER_HOUR."""
    limits.scenario_play(user_id=user_id)
    version = scenario.current
    questions = placeholders_of(content_of(version))
    missing = [q for q in questions if not (answers.get(q) or "").strip()]
    unknown = sorted(set(answers) - set(questions))
    if missing or unknown:
        problems = [f"answer {q!r}" for q in missing] + [f"{q!r} is not a question of this scenario" for q in unknown]
        raise InvalidRequest("; ".join(problems))

    def fill(text: str) -> str:
        return PLACEHOLDER.sub(lambda m: answers.get(m.group(1).strip(), "").strip(), text)

    cards = [
        {
            **{k: card[k] for k in CARD_FIELDS if k in card},
            "name": fill(card["name"])[:100] or "?",
            "entry": fill(card.get("entry") or ""),
            "keys": _filled_keys(card.get("keys") or [], fill),
        }
        for card in version.cards
    ]
    setup = {name: fill(getattr(version, name)) for name in PLAYED_FIELDS}
    _filled_lengths_check(setup, cards)
    named = next((answers[q].strip() for q in questions if NAME_QUESTION.search(q)), "")
    if named:  # "Your name?" names the protagonist: the memories and the prompt call them so
        setup["persona_name"] = named[:100]
    texts = [*setup.values(), *(card["entry"] for card in cards)]
    if macros.names_the_player(*texts):  # a scenario made from a card may say {{user}}
        filler = macros.Macros(user=macros.player_name(owner_id=user_id, given=named, texts=texts), char=None)
        setup = {name: filler.fill(text) for name, text in setup.items()}
        cards = [{**card, "entry": filler.fill(card["entry"])} for card in cards]
    with transaction.atomic():
        adventure = adventures.story_create(
            owner_id=user_id, cards=cards, scenario=scenario, scenario_version=version, **setup
        )
        if scenario.author_id != user_id:
            Scenario.objects.filter(pk=scenario.pk).update(play_count=F("play_count") + 1)
    return adventure


def _filled_lengths_check(setup: dict[str, str], cards: list[dict]) -> None:
    """InvalidRequest naming the first text the answers made longer than an adventure holds."""
    for name, most in FILLED_MAX.items():
        if len(setup[name]) > most:
            raise InvalidRequest(
                f"with these answers the {name.replace('_', ' ')} is {len(setup[name])} characters, "
                f"over the {most} it may hold: give shorter answers"
            )
    for card in cards:
        if len(card["entry"]) > CARD_ENTRY_MAX:
            raise InvalidRequest(
                f"with these answers the card {card['name']!r} is over {CARD_ENTRY_MAX} characters: give shorter answers"
            )


def _filled_keys(keys: list[str], fill) -> list[str]:
    out: list[str] = []
    for key in keys:
        filled = fill(key).strip()[:80]
        if filled and filled.lower() not in {k.lower() for k in out}:
            out.append(filled)
    return out


def scenario_export(*, scenario: Scenario) -> dict:
    return {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "scenario": content_of(scenario.current)}


def library(*, max_rating: str, q: str = "", tag: str = "", rating: str = "", sort: str = "") -> QuerySet:
    """Published scenarios no moderator hid, rated at most ``max_rating`` (the player's preference),
    matching the full-text query ``q`` over title, description and tags, ``tag`` and ``rating``;
    sorted by ``sort``: "new", "played", or (the default with a query) "relevant"."""
    shown = RATING_ORDER[: RATING_ORDER.index(max_rating) + 1]
    rows = Scenario.objects.filter(visibility=Visibility.PUBLISHED, hidden=False, rating__in=shown)
    rows = rows.select_related("author")
    if tag:
        rows = rows.filter(tags__contains=[tag.strip().lower()])
    if rating:
        rows = rows.filter(rating=rating)
    sort = sort or ("relevant" if q else "new")
    if q:
        query = _search_query(q)
        if query is None:
            return rows.none()
        rows = rows.filter(search=query).annotate(rank=SearchRank(F("search"), query))
    order = {
        "new": ("-published_at", "-id"),
        "played": ("-play_count", "-published_at", "-id"),
        "relevant": ("-rank", "-play_count", "-id") if q else ("-published_at", "-id"),
    }[sort]
    return rows.order_by(*order)


def _search_query(q: str) -> SearchQuery | None:
    """Plain words match as prefixes as they are typed ("lant road" finds "The Lantern Road");
    quotes, "or" and a leading "-" are web-search syntax (a phrase, either, not), bounded
    (config.search_text). None: nothing searchable was typed."""
    words = search_text.plain_words(q)
    if words:
        return SearchQuery(" & ".join(f"{word}:*" for word in words), search_type="raw", config="english")
    text = search_text.websearch(q)
    return None if text is None else SearchQuery(text, search_type="websearch", config="english")


def own_scenarios(*, user_id: int) -> QuerySet:
    return Scenario.objects.filter(author_id=user_id).order_by("-updated_at", "-id")


def scenario_report(*, scenario: Scenario, reporter_id: int, reason: str, text: str = "") -> ScenarioReport:
    """A player reports a scenario they can read to the moderators' queue; their own is not theirs
    to report (InvalidRequest), one open report per player and scenario (Conflict), and reports
    are rate limited."""
    if scenario.author_id == reporter_id:
        raise InvalidRequest("this is your own scenario: change it or make it private instead of reporting it")
    limits.report(user_id=reporter_id)
    try:
        with transaction.atomic():
            return ScenarioReport.objects.create(scenario=scenario, reporter_id=reporter_id, reason=reason, text=text)
    except IntegrityError:
        raise Conflict("you have reported this scenario already; the moderators will look at it") from None


def _defaults() -> dict:
    return {
        "description": "",
        "opening": "",
        "plot_essentials": "",
        "ai_instructions": "",
        "authors_note": "",
        "tags": [],
        "rating": "everyone",
        "cover_emoji": "",
        "cover_color": "#4f5d95",
        "cards": [],
    }


def _version_write(scenario: Scenario, content: dict) -> ScenarioVersion:
    """The one write path of a scenario's content: a new version, the library's copy of its
    title, description, tags, rating and cover, and its search vector, in the caller's
    transaction. Versions past the newest SCENARIO_VERSIONS_KEPT go."""
    # a PATCH's cards come without the defaults DRF leaves out of partial input
    card_defaults = {"type": "other", "keys": [], "entry": "", "notes": "", "in_cast": True}
    content = {**content, "cards": [{**card_defaults, **card} for card in content["cards"]]}
    if len(placeholders_of(content)) > PLACEHOLDERS_MAX:
        raise InvalidRequest(f"a scenario asks at most {PLACEHOLDERS_MAX} questions (`${{...}}` placeholders)")
    number = (scenario.current.number if scenario.current_id else 0) + 1
    version = ScenarioVersion.objects.create(scenario=scenario, number=number, **content)
    library_copy = {name: content[name] for name in LIBRARY_FIELDS}
    Scenario.objects.filter(pk=scenario.pk).update(
        current=version,
        updated_at=timezone.now(),
        search=SearchVector(Value(content["title"]), weight="A", config="english")
        + SearchVector(Value(" ".join(content["tags"])), weight="A", config="english")
        + SearchVector(Value(content["description"]), weight="B", config="english"),
        **library_copy,
    )
    old = ScenarioVersion.objects.filter(scenario=scenario, number__lte=number - SCENARIO_VERSIONS_KEPT)
    old.delete()
    scenario.current, scenario.current_id = version, version.pk
    for name, value in library_copy.items():
        setattr(scenario, name, value)
    return version


def _visibility_set(scenario: Scenario, visibility: str) -> None:
    if scenario.hidden and visibility != Visibility.PRIVATE:
        raise Conflict("a moderator hid this scenario: it cannot be shared or published")
    if visibility != Visibility.PRIVATE:
        limits.share(user_id=scenario.author_id)
    changes: dict = {"visibility": visibility}
    if visibility == Visibility.PUBLISHED:
        if not (scenario.current and scenario.current.opening.strip()):
            raise InvalidRequest("write an opening before publishing: it is where every player's story starts")
        limits.scenario_publish(user_id=scenario.author_id)
        # the first publication dates it in the library: publishing again does not bring it back to the top
        changes.update(published_at=Coalesce(F("published_at"), Value(timezone.now())), moderator_notice="")
    Scenario.objects.filter(pk=scenario.pk).update(**changes)
