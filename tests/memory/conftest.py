import pytest
from rest_framework.test import APIClient

from memory.agents import worlds
from memory.models import World
from tests.support.story import grow, memory_reply  # noqa: F401  (used by the memory tests)


@pytest.fixture
def world(alice):
    return World.objects.create(owner=alice, name="Smallville", agent_capacity=200)


@pytest.fixture
def agent_api(world):
    """An agent framework holding a world token."""
    token, raw = worlds.token_create(world=world, name="town")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    client.raw_token = raw
    client.token = token
    return client
