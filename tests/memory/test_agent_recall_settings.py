"""An operator's recall settings are checked: a mistyped key or a value of the wrong type is an
error at `manage.py check` and at the first recall, never silently ignored."""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from memory.agents import agent_events, agent_recall, agent_recall_conf, worlds
from memory.models import World

pytestmark = pytest.mark.django_db


def test_a_mistyped_recall_key_fails_the_check_and_the_recall(settings, alice):
    settings.AGENT_RECALL = {**settings.AGENT_RECALL, "recncy": 0.5}
    with pytest.raises(SystemCheckError, match="recncy"):
        call_command("check")
    world = World.objects.create(owner=alice, name="Town")
    agent_events.events_record(world=world, events=[agent_events.Event(type="say", actor="ann", text="hello")])
    with pytest.raises(ImproperlyConfigured, match=r"\['recncy'\] is not a recall weight or knob"):
        agent_recall.agent_recall(world=world, agent=worlds.access_agent(world=world, external_id="ann"))


def test_a_recall_value_of_the_wrong_type_or_an_unknown_kind_is_named(settings):
    settings.AGENT_RECALL = {**settings.AGENT_RECALL, "recency": "high", "kind_weights": {"sing": 0.2}}
    problems = agent_recall_conf.recall_conf_problems(settings.AGENT_RECALL)
    assert problems == [
        "AGENT_RECALL['recency'] is a str; it takes a float",
        "AGENT_RECALL['kind_weights'] names unknown kinds: sing",
    ]


def test_the_shipped_settings_pass_and_a_weight_may_be_set(settings):
    assert agent_recall_conf.recall_conf_problems(settings.AGENT_RECALL) == []
    settings.AGENT_RECALL = {**settings.AGENT_RECALL, "recency": 1, "hop": 0.5}
    assert agent_recall_conf.recall_conf()["hop"] == 0.5
    call_command("check")
