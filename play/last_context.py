"""The prompt a turn sent, part by part, kept for Insights' "last turn" view (play.dry_run): in
Redis for TTL_S; a Redis that fails loses the view, never the turn."""

from __future__ import annotations

import json
import logging

import redis
from django.utils import timezone

from config.redis_pool import redis_client
from stories.models import Adventure
from stories.prompt.context import Context

log = logging.getLogger(__name__)

TTL_S = 6 * 3600  # how long Insights can show the last turn's prompt


def key(adventure: Adventure, viewer: int) -> str:
    # with the row's creation time: an id a wiped database gives again never finds another's prompt; per
    # player: a story played together tells each their own view (stories.party.secrets), shown to them alone
    return f"last-context:{adventure.pk}:{adventure.created_at.timestamp()}:{viewer}"


def keep(adventure: Adventure, ctx: Context, *, viewer: int, story_ids: tuple[int, ...], cached_tokens: int) -> None:
    shown = {**ctx.as_dict(), "sent_at": timezone.now().isoformat(), "cached_tokens": cached_tokens}
    try:
        kept = json.dumps({"shown": shown, "story_ids": story_ids})
        redis_client().set(key(adventure, viewer), kept, ex=TTL_S)
    except redis.RedisError as exc:
        log.warning("the last context of adventure %s was not kept: %s", adventure.pk, exc)
