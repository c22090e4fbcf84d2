"""Build the prompt from its parts under a token budget, and say what each part costs and why it is
there (the same object powers Insights). Budgets are the same in either layout
(stories.prompt.layouts): the fixed parts are capped first, then memories, what characters know
and cards take their share, and the story gets the rest."""

from __future__ import annotations

from stories.models import Action, Adventure, StoryCard
from stories.prompt import layouts
from stories.prompt.context import Context, Knowing, MemoryItem, SummaryFrame
from stories.prompt.parts import CARD_SCAN_ACTIONS, Counter, fixed_parts, turn_parts

BUDGET_MIN = 256  # tokens: a smaller context is read as this one


def build(
    *,
    adventure: Adventure,
    story: list[Action],
    cards: list[StoryCard],
    memories: list[MemoryItem],
    context_tokens: int,
    model: str,
    recall_note: str = "",
    knowledge: list[Knowing] | None = None,
    summaries: SummaryFrame | None = None,
) -> Context:
    """The prompt for the next model reply after ``story`` (oldest first). ``summaries``: what the
    path's summaries are around ``story`` (read by the caller); in the prefix-cache layout the
    summary told is the one before the window, so it changes when the window jumps rather than
    whenever the pass rewrites it. Without it, the adventure's current summary.

    A memory of a block whose actions are all in the story part, word for word, is left out (pins
    are always sent): the same events are not paid twice. Leaving memories out only frees room, so
    the story part can only grow, and one more layout settles it."""
    knowledge = knowledge or []
    frame = summaries or SummaryFrame(current=adventure.story_summary)
    summary = frame.current

    def laid_out(recalled: list[MemoryItem]) -> Context:
        """The layout with ``recalled``; in the prefix-cache layout with the summary of what its
        window does not show (the summary's length moves the window: again until they agree)."""
        nonlocal summary
        for _ in range(4):
            ctx = _layout(adventure, story, cards, recalled, context_tokens, model, recall_note, knowledge, summary)
            shown = _story_depths(ctx)
            if shown is None or summaries is None or adventure.memories_before_story:
                break
            before = frame.before(shown[0])
            if before == summary:
                break
            summary = before
        return ctx

    ctx = laid_out(memories)
    shown = _story_depths(ctx)
    if shown is None:
        return ctx
    covered = [
        m
        for m in memories
        if not m.pinned and m.source_start is not None and shown[0] <= m.source_start and m.source_end <= shown[1]
    ]
    if not covered:
        return ctx
    ctx = laid_out([m for m in memories if m not in covered])
    for part in ctx.parts:
        if part.name == "story":
            part.reason += f"; {len(covered)} recalled memories left out: their events are here word for word"
    return ctx


def _story_depths(ctx: Context) -> tuple[int, int] | None:
    for part in ctx.parts:
        if part.name == "story" and part.items and part.items[0]["first_depth"] is not None:
            return part.items[0]["first_depth"], part.items[0]["last_depth"]
    return None


def _layout(adventure, story, cards, memories, context_tokens, model, recall_note, knowledge, summary) -> Context:
    budget = max(context_tokens, BUDGET_MIN)
    c = Counter(model)
    fixed = fixed_parts(c, adventure=adventure, knowledge=knowledge, summary=summary, budget=budget)
    recent_text = "\n".join(a.text for a in story[-CARD_SCAN_ACTIONS:])
    newest = story[-1].depth if story else 0
    turn = turn_parts(
        c, fixed, memories=memories, knowledge=knowledge, cards=cards, recent_text=recent_text, newest=newest
    )
    layout = layouts.older_order if adventure.memories_before_story else layouts.prefix_cache
    return layout(c, fixed, turn, story, budget=budget, recall_note=recall_note)
