"""What Insights says of the parts the model is not told this turn, and why: the summary, each story
card, the memories. Read beside the dry run of the next turn (play.turns.insights); writes nothing."""

from __future__ import annotations

from memory.models import Memory
from memory.story import canon, claims
from memory.story.marks import MEMORY_INTERVAL, MEMORY_THRESHOLD
from stories.models import Adventure, AISettings, Branch, StoryCard
from stories.prompt.context import Context
from stories.prompt.parts import CARD_PARTS
from stories.prompt.triggers import scan

CARDS_LISTED_MAX = 40  # cards Insights explains one by one; the rest are counted


def cards_versions(ctx: Context, branch: Branch) -> None:
    """Which version of each card was told: ``since``, the passage its version was made at (0: before
    the story), on the items of the cards' parts (a card never changed has none), and ``claims``, what
    the story changed on it (told under its text)."""
    told = [item for part in ctx.parts if part.name.startswith("cards") for item in part.items]
    since = canon.cards_since(branch, [item["id"] for item in told]) if told else {}
    changed = claims.told_on_path(branch, [item["id"] for item in told])
    for item in told:
        if item["id"] in since:
            item["since"] = since[item["id"]]
        if item["id"] in changed:  # what the story changed on it, told under its text, with the evidence
            item["claims"] = [
                {"slot": c.slot, "value": c.value, "text": c.text, "evidence": c.action_id, "since": c.action.depth}
                for c in changed[item["id"]]
            ]


def untold(*, adventure: Adventure, ctx: Context, ai: AISettings, tip_depth: int) -> list[dict]:
    """One line per part not told: ``part``, ``name`` (a card's), ``why`` and ``when`` it will be."""
    parts = {p.name: p for p in ctx.parts}
    window = next((p.items[0] for p in ctx.parts if p.name == "story" and p.items), {})
    first = window.get("first_depth")
    knows = {item.get("character") for p in ctx.parts if p.name == "knows" for item in p.items}
    newest = window.get("last_depth") or 0
    lines = _summary(adventure, parts, first, tip_depth) + _cards(adventure, parts, knows, newest)
    return lines + _memories(adventure, parts, ai, tip_depth)


def _summary(adventure: Adventure, parts: dict, first: int | None, tip_depth: int) -> list[dict]:
    if "summary" in parts:
        return []
    if first is None or first <= 1:
        why = "the recent story shows the whole story from its opening: nothing before it needs a summary"
        when = "once the story is longer than the context holds"
    elif not adventure.memory_bank_enabled:
        why = "memory work is off for this adventure (Story settings), so no summary is written"
        when = "when memory work is on again and its pass has run"
    else:
        why = f"no summary of the story before action {first} is written yet"
        when = "after the next memory pass (it runs after each turn)"
    return [{"part": "summary", "name": "", "why": why, "when": when}]


def _cards(adventure: Adventure, parts: dict, knows: set, newest: int) -> list[dict]:
    told = {item["id"]: item for name in CARD_PARTS.values() if name in parts for item in parts[name].items}
    story = parts.get("story")
    recent = story.text if story else ""
    lines = []
    cards = list(StoryCard.objects.filter(adventure=adventure).order_by("id"))
    found = scan(cards=cards, text=recent, turn=newest)
    hits = {hit.card.pk for hit in found.hits}
    for card in cards:
        if card.pk in told and told[card.pk]["included"]:
            continue
        if card.pk in hits:  # triggered, and not told: the cards' share was full
            why = "its key is in the recent story, but the cards that came first filled the cards' share of the context"
            when = "when fewer cards are triggered at once, or with a larger context"
        elif card.pk in found.misses:
            why, when = found.misses[card.pk], "a turn its rules hold"
        elif not card.keys:
            why, when = (
                "it has no keys, so nothing in the story triggers it",
                "add a key (a name or word the story uses)",
            )
        else:
            keys = ", ".join(f'"{k}"' for k in card.keys[:5])
            why = f"none of its keys ({keys}) appears in the recent story"
            when = "the turn the story names one of them"
        if card.type == "character" and card.pk in knows:
            why += "; what this character knows is told"
        lines.append({"part": "card", "name": card.name, "why": why, "when": when})
    if len(lines) > CARDS_LISTED_MAX:
        rest = len(lines) - CARDS_LISTED_MAX
        lines = lines[:CARDS_LISTED_MAX] + [
            {"part": "card", "name": f"{rest} more", "why": "not triggered by the recent story", "when": ""}
        ]
    return lines


def _memories(adventure: Adventure, parts: dict, ai: AISettings, tip_depth: int) -> list[dict]:
    told = len(parts["memories"].items) if "memories" in parts else 0
    bank = Memory.objects.filter(adventure=adventure, character__isnull=True, forgotten=False).count()
    if not adventure.memory_bank_enabled:
        return [{"part": "memories", "name": "", "why": "the memory bank is off for this adventure", "when": ""}]
    if bank == 0:
        if tip_depth < MEMORY_THRESHOLD:
            why = f"no memories yet: the first are written once the story holds {MEMORY_THRESHOLD} actions"
        else:
            why = "no memories yet: the memory pass has not written them"
        return [{"part": "memories", "name": "", "why": why, "when": f"every {MEMORY_INTERVAL} actions after that"}]
    if ai.memory_top_k == 0:
        return [{"part": "memories", "name": "", "why": "memories per turn is 0 in Settings", "when": ""}]
    if bank > told:
        why = (
            f"{bank} memories in the bank; the {told} closest to this moment are told"
            f" (at most {ai.memory_top_k} a turn, within the memories' share of the context)"
        )
        return [{"part": "memories", "name": "", "why": why, "when": "a memory is told when the story comes near it"}]
    return []
