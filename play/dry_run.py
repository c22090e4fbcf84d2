"""Insights' two views of what the model is told: the dry run of the next turn's context (changes
nothing, spends nothing) and the prompt the last turn sent (kept by play.turns)."""

from __future__ import annotations

import json

import redis

from config.errors import NotFound
from config.redis_pool import redis_client
from play import last_context, told
from play.insights import cards_versions, untold
from stories.accounts import ai_settings
from stories.adventures import access_adventure
from stories.models import Action, ProviderCall
from stories.prompt import prefix
from stories.prompt.context import Context
from stories.tree import lineage


def last_insights(*, user_id: int, adventure_id: int) -> dict:
    """The prompt the last turn sent, as Insights shows it; NotFound when none was sent in the
    last last_context.TTL_S, it was not kept (or Redis cannot be read now), or it told a node a
    moderator has hidden since (hidden text reaches nobody but staff)."""
    adventure = access_adventure(user_id=user_id, adventure_id=adventure_id)
    try:
        kept = redis_client().get(last_context.key(adventure, user_id))
    except redis.RedisError:
        raise NotFound("the last turn's prompt cannot be read right now; try again in a minute") from None
    if kept is None:
        raise NotFound("no turn was sent in the last 6 hours: play one and its prompt shows here")
    kept = json.loads(kept)
    if Action.objects.filter(pk__in=kept["story_ids"], hidden=True).exists():
        raise NotFound("the last turn's prompt told a passage a moderator has hidden since, so it is not shown")
    return kept["shown"]


def insights(*, user_id: int, adventure_id: int) -> Context:
    """A dry run of the next turn's context. Changes nothing, spends nothing."""
    adventure = access_adventure(user_id=user_id, adventure_id=adventure_id)
    branch = lineage.head(adventure)
    ai = ai_settings.for_adventure(ai_settings.ai_settings_of(user_id=user_id), adventure)
    model = adventure.model or ai_settings.model_for_display(user_id=user_id)
    story = lineage.recent(branch, count=told.story_window(ai.context_tokens), viewer=user_id)
    ctx, _ = told.context_told(
        adventure, branch, user_id=user_id, viewer=user_id, ai=ai, story=story, model=model, record_use=False
    )
    ctx.untold = untold(adventure=adventure, ctx=ctx, ai=ai, tip_depth=branch.tip_depth)
    cards_versions(ctx, branch)
    last = (
        ProviderCall.objects.filter(adventure_id=adventure.pk, purpose=ProviderCall.Purpose.TURN)
        .order_by("-created_at", "-id")
        .values_list("prompt_fingerprint", "cached_tokens", "outcome")
        .first()
    )
    if last is not None:
        ctx.prefix_reused = prefix.reused(bytes(last[0]), prefix.fingerprint(ctx.messages))
        ctx.last_cached_tokens = last[1] if last[2] == "ok" else None
    return ctx
