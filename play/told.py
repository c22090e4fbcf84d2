"""What the model is told for a turn, built from the story as its player may read it: a turn's
context (play.turns) and Insights' dry run of it (play.dry_run) alike."""

from __future__ import annotations

from config import server_timing
from memory.story import claims, retrieval, summaries
from stories.cards import present_cards
from stories.models import Action, Adventure, AISettings, Branch
from stories.prompt import builder
from stories.prompt.context import Context, SummaryFrame


def story_window(context_tokens: int) -> int:
    """How many recent actions to hand the builder (it drops what does not fit)."""
    return min(500, max(50, context_tokens // 40))


def context_told(
    adventure: Adventure,
    branch: Branch,
    *,
    user_id: int,
    viewer: int | None,
    ai: AISettings,
    story: list[Action],
    model: str,
    record_use: bool,
) -> tuple[Context, retrieval.Recall]:
    """What the model is told after ``story``, and what recall brought: a turn's and Insights' alike.
    ``user_id`` pays (the owner), ``viewer`` plays: recall brings the secrets told to them alone.
    ``record_use``: the memories told count as used (a turn; Insights is a dry run)."""
    with server_timing.phase("cards"):
        cards, _ = claims.cards_told(branch, present_cards(adventure))  # with what the story changed on them
    recalled = retrieval.recall_for_turn(
        adventure=adventure,
        branch=branch,
        user_id=user_id,
        top_k=ai.memory_top_k,
        story=story,
        record_use=record_use,
        ai=ai,
        cards=cards,
        viewer=viewer,
    )
    with server_timing.phase("build"):
        summary_frame = _summaries(adventure, branch, story)
        ctx = builder.build(
            adventure=adventure,
            story=story,
            cards=cards,
            memories=recalled.items,
            context_tokens=ai.context_tokens,
            model=model,
            recall_note=recalled.fallback,
            knowledge=recalled.knowledge,
            summaries=summary_frame,
        )
    return ctx, recalled


def _summaries(adventure: Adventure, branch: Branch, story: list[Action]) -> SummaryFrame | None:
    """What memory holds of the path's summaries around ``story``, for the prefix-cache layout (the
    older order tells the current summary)."""
    if adventure.memories_before_story or not story:
        return None
    return summaries.summary_frame(branch, story[0].depth, current=adventure.story_summary)
