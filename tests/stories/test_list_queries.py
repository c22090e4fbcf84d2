"""Every list endpoint (and the world export) answers in a fixed number of
queries however many rows it lists: an N+1 fails here."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory.agents import agent_events, worlds
from memory.models import Memory
from stories import cards
from stories.adventures import story_create
from stories.tree import writes

pytestmark = pytest.mark.django_db


def _queries(api, url) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = api.get(url)
        if hasattr(response, "streaming_content"):
            b"".join(response.streaming_content)
    assert response.status_code == 200, (url, response.status_code)
    return len(captured)


def _grow(owner, adventure, world, rows: int, start: int) -> None:
    for n in range(start, start + rows):
        story_create(owner_id=owner.pk, title=f"A{n}", opening="Go.")
        cards.card_create(adventure=adventure, name=f"Card {n}", keys=[f"k{n}"], entry="x")
        action = writes.place(
            adventure_id=adventure.pk, branch_id=adventure.head_branch_id, kind="do", text=f"step {n}"
        )
        writes.fork(adventure_id=adventure.pk, action_id=action.pk, name=f"b{n}", checkout=False)
        Memory.objects.create(adventure=adventure, branch_id=adventure.head_branch_id, depth=1, text=f"memory {n}")
        worlds.world_create(owner_id=owner.pk, name=f"W{n}")
        worlds.token_create(world=world, name=f"t{n}")
        agent_events.events_record(
            world=world,
            events=[agent_events.Event(type="say", actor=f"agent{n}", text=f"hello {n}", nearby=[f"agent{n + 100}"])],
        )


def test_list_endpoints_and_the_world_export_do_not_grow_their_queries_with_their_rows(alice_plays):
    from django.contrib.auth import get_user_model

    owner = get_user_model().objects.get(username="alice")
    adventure = story_create(owner_id=owner.pk, title="Lists", opening="Begin.")
    world = worlds.world_create(owner_id=owner.pk, name="Lists")
    a, w = adventure.pk, world.pk
    urls = [
        "/api/adventures/",
        f"/api/adventures/{a}/branches/",
        f"/api/adventures/{a}/cards/",
        f"/api/adventures/{a}/memories/",
        "/api/worlds/",
        f"/api/worlds/{w}/tokens/",
        f"/api/worlds/{w}/agents/",
        f"/api/worlds/{w}/agents/agent1/memories/",
        f"/api/worlds/{w}/export/",
        "/api/debug/requests/",
        f"/api/adventures/{a}/story/",
    ]
    _grow(owner, adventure, world, 2, 0)
    few = {url: _queries(alice_plays, url) for url in urls}
    _grow(owner, adventure, world, 10, 2)
    many = {url: _queries(alice_plays, url) for url in urls}
    grew = {url: (few[url], many[url]) for url in urls if many[url] != few[url]}
    assert grew == {}, f"queries grew with the rows listed (2 rows -> 12 rows): {grew}"
