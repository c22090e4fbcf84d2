"""The story as text a person reads: a search over the played path (Postgres full text, as the
player types it) and the whole path written out as plain text or Markdown."""

from __future__ import annotations

from collections.abc import Iterator

from django.contrib.postgres.search import SearchHeadline, SearchQuery, SearchRank, SearchVector
from django.db.models import F

from config import search_text
from stories.models import Action, Adventure, Branch
from stories.prompt import voice
from stories.tree import lineage

SEARCH_CONFIG = "english"  # stemming: "hides" finds "hid", "hiding"


def search(branch: Branch, query: str, *, limit: int, viewer: int) -> list[dict]:
    """The live actions of ``branch``'s path ``viewer`` may read that match ``query`` (websearch syntax: words,
    "a phrase", -not, or; bounded by config.search_text), the best first, each with a snippet
    marking the words found. Nothing searchable in ``query`` finds nothing."""
    text = search_text.websearch(query)
    if text is None:
        return []
    found = SearchQuery(text, search_type="websearch", config=SEARCH_CONFIG)
    vector = SearchVector("text", config=SEARCH_CONFIG)
    rows = (
        lineage.story(branch, viewer=viewer)
        .annotate(search=vector, rank=SearchRank(vector, found))
        .filter(search=found)
        .annotate(
            snippet=SearchHeadline(
                "text", found, config=SEARCH_CONFIG, start_sel="«", stop_sel="»", max_words=24, min_words=8
            )
        )
        .order_by(F("rank").desc(), "-depth")
        .values("id", "depth", "kind", "snippet")[:limit]
    )
    return list(rows)


def _line(action: Action, *, markdown: bool) -> str:
    """The node as the model reads it (stories.prompt.voice); the player's own in bold in Markdown."""
    text = voice.told(action)
    return f"**{text}**" if markdown and voice.is_players(action) else text


def written(adventure: Adventure, branch: Branch, *, markdown: bool, viewer: int) -> Iterator[str]:
    """The played path as ``viewer`` may read it, oldest first, a paragraph an action (the player's own in bold in
    Markdown), read a page at a time so a long story never sits in memory whole."""
    yield (f"# {adventure.title}\n\n" if markdown else f"{adventure.title}\n{'=' * len(adventure.title)}\n\n")
    last = 0
    while True:
        page = list(lineage.story(branch, viewer=viewer).filter(depth__gt=last)[:500])
        if not page:
            return
        for action in page:
            yield _line(action, markdown=markdown) + "\n\n"
        last = page[-1].depth
