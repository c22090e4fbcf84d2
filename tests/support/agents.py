"""Agent worlds in tests: the events URL, one line said between two agents, the
recall API asked as agent frameworks ask, and embedding what is pending."""

# Lines that match no question of the tests: what else was said.
SMALL_TALK = ["The studio floor is finished.", "Sales were good this spring.", "My dance shoes need new soles."]


def events_url(world):
    return f"/api/worlds/{world.pk}/events/"


def say(agent_api, world, actor, target, text, when):
    response = agent_api.post(
        events_url(world),
        {"type": "say", "actor": actor, "target": target, "nearby": [target], "text": text, "time": when.isoformat()},
        format="json",
    )
    assert response.status_code == 201, response.content


def recall(agent_api, world, agent, query, **extra):
    """The recall API's ranked memories (up to 5, no cooldown, the whole past)."""
    response = agent_api.post(
        f"/api/worlds/{world.pk}/agents/{agent}/recall/",
        {"query": query, "limit": 5, "cooldown_seconds": 0, "since": "1900-01-01T00:00:00Z", **extra},
        format="json",
    )
    assert response.status_code == 200, response.content
    return response.json()["memories"]


def embed_all(world):
    from memory.agents import agent_upkeep
    from memory.models import Agent

    for agent in Agent.objects.filter(world=world):
        while agent_upkeep.agent_memories_embed(agent_id=agent.pk):
            pass
