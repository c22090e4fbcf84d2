"""Agent worlds in tests: the events URL and one line said between two agents."""


def events_url(world):
    return f"/api/worlds/{world.pk}/events/"


def say(agent_api, world, actor, target, text, when):
    response = agent_api.post(events_url(world), {"type": "say", "actor": actor, "target": target, "nearby": [target],
                                                  "text": text, "time": when.isoformat()}, format="json")
    assert response.status_code == 201, response.content
