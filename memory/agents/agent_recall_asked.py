"""A recall as an agent asks for it, over REST and MCP alike: the one call both doors make and the
one answer they give."""

from __future__ import annotations

from datetime import datetime

from memory.agents.agent_recall import Recalled, agent_recall
from memory.models import Agent, World
from stories import limits


def recall_asked(*, world: World, agent: Agent, data: dict) -> dict:
    """A recall an agent asks for, REST and MCP alike: ``data`` as RecallInputSerializer checked it.
    Counts toward the world owner's RECALLS_PER_MINUTE (RateLimited past it); the answer is
    ``recall_answer``'s."""
    limits.recall(user_id=world.owner_id)
    found, block = agent_recall(
        world=world,
        agent=agent,
        partner=data["partner"],
        location=data["location"],
        query=data["query"],
        since=data["since"],
        kinds=data.get("kinds"),
        limit=data["limit"],
        token_budget=data["token_budget"],
        cooldown_s=data["cooldown_seconds"],
    )
    return recall_answer(found, block)


def recall_answer(found: list[Recalled], block: str) -> dict:
    """The one answer to a recall, REST and MCP alike: the ready-to-use text block and each memory
    with its score and the parts the score is made of."""
    return {
        "memories": [
            {
                "id": m.id,
                "content": m.content,
                "kind": m.kind,
                "partner": m.partner,
                "location": m.location,
                "occurred_at": _iso(m.occurred_at),
                "score": m.score,
                "parts": m.parts,
            }
            for m in found
        ],
        "text": block,
    }


def _iso(moment: datetime | None) -> str | None:
    """As the REST API writes times (DRF's encoder): ISO 8601, UTC as Z."""
    if moment is None:
        return None
    text = moment.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text
