"""One door for every write: updates write only what they change (no lost
updates), every change of a story or bank asks for its memory pass once after
commit, and an unreadable key is a clear 424 and a failed run that backs off."""

from types import SimpleNamespace

import pytest
from cryptography.fernet import Fernet

from config import jobs
from memory.agents import worlds
from memory.models import AgentMemory, Memory, PassRun
from memory.story import marks, memory_pass, summaries
from play import changes as play
from stories import cards
from stories.accounts import ai_settings
from stories.models import Adventure, Branch, StoryCard
from stories.tree import writes
from tests.conftest import ALICE_KEY
from tests.support.fake_llm import Reply

pytestmark = pytest.mark.django_db


def _jobs(callbacks) -> list[tuple[str, int]]:
    return [cb.job for cb in callbacks if hasattr(cb, "job")]


class _committed:
    """The callbacks a block registers; then they are dropped, as a commit would
    (the test's own transaction never commits, and one transaction asks once)."""

    def __enter__(self):
        from django.db import connection

        self.start = len(connection.run_on_commit)
        self.callbacks = []
        return self.callbacks

    def __exit__(self, *exc):
        from django.db import connection

        # Kept as the jobs they asked for; the callbacks themselves go, as after a commit.
        self.callbacks.extend(
            SimpleNamespace(job=func.job)
            for _, func, _ in connection.run_on_commit[self.start :]
            if hasattr(func, "job")
        )
        del connection.run_on_commit[self.start :]


# ---------------------------------------------------------------------------- lost updates


def test_an_adventure_loaded_before_a_fork_and_saved_after_keeps_the_new_head_and_the_summary(adventure):
    stale = Adventure.objects.get(pk=adventure.pk)  # a PATCH read the row here...
    first = writes.place(adventure_id=adventure.pk, branch_id=adventure.head_branch_id, kind="do", text="go on")
    fork = writes.fork(adventure_id=adventure.pk, action_id=first.pk, name="other", checkout=True)
    summaries.snapshot_write(
        adventure_id=adventure.pk,
        branch=Branch.objects.get(pk=fork.pk),
        depth=2,
        text="The worker's fresh summary.",
        player=False,
    )
    summaries.summary_refresh(adventure.pk)
    play.adventure_update(adventure=stale, title="Renamed")  # ...and saves here
    fresh = Adventure.objects.get(pk=adventure.pk)
    assert fresh.title == "Renamed"
    assert fresh.head_branch_id == fork.pk, "the fork's head was moved back by a stale save"
    assert fresh.story_summary == "The worker's fresh summary."


def test_a_stale_card_world_agent_memory_or_settings_save_keeps_what_changed_meanwhile(adventure, owner):
    card = cards.card_create(adventure=adventure, name="Mira", keys=["mira"], entry="A guide.")
    stale_card = StoryCard.objects.get(pk=card.pk)
    StoryCard.objects.filter(pk=card.pk).update(entry="A guide who lies.")
    cards.card_update(card=stale_card, name="Mira Vos")
    assert StoryCard.objects.values_list("name", "entry").get(pk=card.pk) == ("Mira Vos", "A guide who lies.")

    world = worlds.world_create(owner_id=owner.pk, name="Harbor", agent_capacity=50)
    stale_world = type(world).objects.get(pk=world.pk)
    type(world).objects.filter(pk=world.pk).update(agent_capacity=9)
    worlds.world_update(world=stale_world, name="Harbor Town")
    assert type(world).objects.values_list("name", "agent_capacity").get(pk=world.pk) == ("Harbor Town", 9)

    agent = worlds.agent_for_note(world=world, external_id="cy")
    memory = AgentMemory.objects.create(
        agent=agent, world=world, kind="note", content="the key is under the mat", occurred_at=world.created_at
    )
    stale_memory = AgentMemory.objects.get(pk=memory.pk)
    AgentMemory.objects.filter(pk=memory.pk).update(retrieval_count=4, pinned=True)
    worlds.agent_memory_update(memory=stale_memory, importance=0.9)
    assert AgentMemory.objects.values_list("importance", "retrieval_count", "pinned").get(pk=memory.pk) == (
        0.9,
        4,
        True,
    )

    ai_settings.ai_settings_update(user_id=owner.pk, memory_top_k=7)
    stale_settings = ai_settings.ai_settings_of(user_id=owner.pk)
    type(stale_settings).objects.filter(pk=stale_settings.pk).update(temperature=0.2)
    ai_settings.ai_settings_update(user_id=owner.pk, memory_top_k=3)
    assert type(stale_settings).objects.values_list("memory_top_k", "temperature").get(pk=stale_settings.pk) == (3, 0.2)


# ---------------------------------------------------------------------------- one door for memory work


def test_the_pass_is_asked_for_once_after_every_change_to_a_story_or_its_bank_and_only_then(alice_plays, fake_llm):
    api = alice_plays
    aid = api.post("/api/adventures/", {"title": "Door", "opening": "You wake."}, format="json").json()["id"]
    url = f"/api/adventures/{aid}/"
    wanted = [(jobs.STORY_PASS, aid)]

    def asks(method, path, body=None, status=None, expect=wanted):
        with _committed() as callbacks:
            response = getattr(api, method)(url + path, body or {}, format="json")
        assert response.status_code == (status or response.status_code) and response.status_code < 500, (
            path,
            response.status_code,
            response.content[:300],
        )
        assert _jobs(callbacks) == expect, (
            f"{method} {path or '.'} ({response.status_code}) asked for {_jobs(callbacks)}"
        )
        return response.json() if response.content else None

    played = asks("post", "turns/", {"mode": "do", "text": "stand up"}, 201)
    fake_llm.queue(Reply(status=401))
    asks("post", "turns/", {"mode": "do", "text": "open the door"}, 424)  # failed: the action was kept
    asks("post", "retry/", None, 201)  # the missing reply
    fake_llm.queue(Reply(status=401))
    asks("post", "retry/", None, 424, expect=[])  # a failed retry stored nothing: nothing to remember
    asks("post", "retry/", None, 201)
    last = api.get(url + "story/").json()["actions"][-1]
    first_take = api.get(url + f"actions/{last['id']}/takes/").json()["takes"][0]
    asks("post", f"actions/{last['id']}/takes/", {"take_id": first_take["id"]}, 200)
    asks("patch", f"actions/{played['actions'][0]['id']}/", {"text": "stand up slowly"}, 200)
    asks("post", "undo/", None, 200)
    branch = asks("post", f"actions/{played['actions'][0]['id']}/fork/", {"name": "b", "checkout": True}, 201)
    main = [b for b in api.get(url + "branches/").json() if b["id"] != branch["id"]][0]
    asks("post", f"branches/{main['id']}/checkout/", None, 200)
    memory = asks("post", "memories/", {"text": "The door was red."}, 201)
    asks("patch", f"memories/{memory['id']}/", {"text": "The door was blue."}, 200)
    asks("post", "memories/run/", None, 202)

    with _committed() as callbacks:
        exported = api.get(url + "export/").json()
        imported = api.post("/api/adventures/import/", exported, format="json")
    assert imported.status_code == 202 and _jobs(callbacks) == [(jobs.STORY_PASS, imported.json()["adventure_id"])]

    with _committed() as callbacks:
        assert api.get(url + "story/").status_code == 200 and api.get(url + "memories/").status_code == 200
    assert _jobs(callbacks) == [], "a read asked for memory work"


def test_switching_the_embedding_model_clears_story_and_agent_vectors_and_asks_for_both_passes(owner, adventure):
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    memory = Memory.objects.create(
        adventure=adventure,
        branch_id=adventure.head_branch_id,
        depth=1,
        text="a door",
        embedding=[0.1] * 384,
        embedding_model="fake-embed",
    )
    world = worlds.world_create(owner_id=owner.pk, name="W")
    agent = worlds.agent_for_note(world=world, external_id="cy")
    note = AgentMemory.objects.create(
        agent=agent,
        world=world,
        kind="note",
        content="a door",
        occurred_at=world.created_at,
        embedding=[0.1] * 384,
        embedding_model="fake-embed",
    )
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=owner)[0].key}")
    with _committed() as callbacks:
        assert api.patch("/api/settings/", {"embedding_model": "other-embed"}, format="json").status_code == 200
    assert sorted(_jobs(callbacks)) == [(jobs.AGENT_PASS, agent.pk), (jobs.STORY_PASS, adventure.pk)]
    assert Memory.objects.get(pk=memory.pk).embedding is None
    assert AgentMemory.objects.get(pk=note.pk).embedding is None


def test_one_block_asks_once_and_a_rolled_back_one_not_at_all(adventure):
    from django.db import transaction

    with _committed() as callbacks:
        with transaction.atomic():
            for _ in range(5):
                jobs.memory_pass_after_commit(adventure_id=adventure.pk)
        try:
            with transaction.atomic():
                jobs.memory_pass_after_commit(adventure_id=adventure.pk + 1000)
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
    assert _jobs(callbacks) == [(jobs.STORY_PASS, adventure.pk)]


def test_a_job_asked_in_a_block_that_rolled_back_is_asked_again_by_the_next(adventure):
    from django.db import transaction

    with _committed() as callbacks:
        try:
            with transaction.atomic():
                jobs.memory_pass_after_commit(adventure_id=adventure.pk)
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
        with transaction.atomic():
            jobs.memory_pass_after_commit(adventure_id=adventure.pk)
            jobs.memory_pass_after_commit(adventure_id=adventure.pk)
    assert _jobs(callbacks) == [(jobs.STORY_PASS, adventure.pk)], "the rolled-back ask is gone, the next one stands"


# ---------------------------------------------------------------------------- unreadable keys, crashed passes


@pytest.fixture
def keys_rotated_without_the_old_one(settings):
    settings.FIELD_ENCRYPTION_KEYS = [Fernet.generate_key().decode()]


def test_after_the_keys_rotate_without_the_old_one_a_turn_answers_424_and_keeps_the_action(
    alice_plays, fake_llm, settings
):
    aid = alice_plays.post("/api/adventures/", {"title": "K", "opening": "You wake."}, format="json").json()["id"]
    settings.FIELD_ENCRYPTION_KEYS = [Fernet.generate_key().decode()]
    response = alice_plays.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "look up"}, format="json")
    assert response.status_code == 424, response.content
    body = response.json()
    assert body["error"] == "key_unreadable" and "enter the key again" in body["detail"]
    assert [a["text"] for a in body["stored_actions"]] == ["look up"]
    assert alice_plays.get("/api/settings/").status_code == 200
    # the player re-enters the key and plays on: retry brings the missing reply
    assert alice_plays.patch("/api/settings/", {"api_key": ALICE_KEY}, format="json").status_code == 200
    assert alice_plays.post(f"/api/adventures/{aid}/retry/").status_code == 201
    assert fake_llm.chat_requests()[-1].headers["authorization"] == f"Bearer {ALICE_KEY}"


def test_a_pass_that_meets_an_unreadable_key_is_a_failed_run_that_backs_off(adventure, settings):
    from tests.support.story import grow

    grow(adventure, marks.MEMORY_THRESHOLD + 1)
    settings.FIELD_ENCRYPTION_KEYS = [Fernet.generate_key().decode()]
    report = memory_pass.run_recorded(adventure.pk, worker="w1")
    assert report.errors and "enter the key again" in report.errors[0] and not report.transient
    run = PassRun.objects.get(adventure=adventure)
    assert run.outcome == "errors" and run.finished_at is not None and "enter the key again" in run.errors
    cursor = marks.cursor_ensure(adventure.pk)
    assert cursor.failures == 1 and "enter the key again" in cursor.last_error
    assert adventure.pk not in memory_pass.adventures_behind(), "the sweeper must back off a failing adventure"


def test_a_crashed_pass_is_recorded_as_crashed_and_counted(adventure, monkeypatch):
    def broken(**kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(memory_pass, "evict", broken)
    with pytest.raises(ZeroDivisionError):
        memory_pass.run_recorded(adventure.pk, worker="w1")
    run = PassRun.objects.get(adventure=adventure)
    assert run.outcome == "crashed" and run.finished_at is not None and "ZeroDivisionError" in run.errors
    assert marks.cursor_ensure(adventure.pk).failures == 1


def test_an_agent_pass_with_an_unreadable_key_leaves_the_work_for_later(owner, settings):
    from memory.agents import agent_upkeep

    world = worlds.world_create(owner_id=owner.pk, name="W")
    agent = worlds.agent_for_note(world=world, external_id="cy")
    AgentMemory.objects.create(agent=agent, world=world, kind="note", content="x", occurred_at=world.created_at)
    settings.FIELD_ENCRYPTION_KEYS = [Fernet.generate_key().decode()]
    assert agent_upkeep.agent_upkeep_run(agent_id=agent.pk) == {
        "embedded": 0,
        "summaries": 0,
        "keyed": 0,
        "own_index": None,
        "more": False,
    }
    assert AgentMemory.objects.get(agent=agent).embedding is None
    assert AgentMemory.objects.get(agent=agent).keys_made == "", "its keys wait for the owner's model too"


@pytest.fixture
def concurrently():
    """Run ``change`` the moment a PATCH is about to save its row, as a second
    request committing between the PATCH's read and its write would."""
    from django.db.models.signals import pre_save

    hooks = []

    def arm(model, change):
        def receiver(sender, instance, **kwargs):
            pre_save.disconnect(receiver, sender=model)
            change(instance)

        pre_save.connect(receiver, sender=model, weak=False)
        hooks.append((model, receiver))

    yield arm
    for model, receiver in hooks:
        pre_save.disconnect(receiver, sender=model)


def test_a_patch_racing_another_change_keeps_that_change(alice_plays, concurrently):
    from memory.models import World

    api = alice_plays
    aid = api.post("/api/adventures/", {"title": "Race", "opening": "You wake."}, format="json").json()["id"]
    first = api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "go"}, format="json").json()["actions"][0]
    fork = writes.fork(adventure_id=aid, action_id=first["id"], name="f", checkout=False)
    concurrently(
        Adventure,
        lambda a: Adventure.objects.filter(pk=a.pk).update(head_branch_id=fork.pk, story_summary="worker's words"),
    )
    assert api.patch(f"/api/adventures/{aid}/", {"title": "Renamed"}, format="json").status_code == 200
    assert Adventure.objects.values_list("title", "head_branch_id", "story_summary").get(pk=aid) == (
        "Renamed",
        fork.pk,
        "worker's words",
    )

    card = api.post(
        f"/api/adventures/{aid}/cards/", {"name": "Mira", "keys": ["mira"], "entry": "A guide."}, format="json"
    ).json()
    concurrently(StoryCard, lambda c: StoryCard.objects.filter(pk=c.pk).update(entry="A guide who lies."))
    assert (
        api.patch(f"/api/adventures/{aid}/cards/{card['id']}/", {"name": "Mira Vos"}, format="json").status_code == 200
    )
    assert StoryCard.objects.values_list("name", "entry").get(pk=card["id"]) == ("Mira Vos", "A guide who lies.")

    world = api.post("/api/worlds/", {"name": "Harbor"}, format="json").json()
    concurrently(World, lambda w: World.objects.filter(pk=w.pk).update(agent_capacity=9))
    assert api.patch(f"/api/worlds/{world['id']}/", {"name": "Harbor Town"}, format="json").status_code == 200
    assert World.objects.values_list("name", "agent_capacity").get(pk=world["id"]) == ("Harbor Town", 9)

    assert (
        api.post(
            f"/api/worlds/{world['id']}/events/", {"type": "observe", "actor": "cy", "text": "a mat"}, format="json"
        ).status_code
        == 201
    )
    note = api.post(
        f"/api/worlds/{world['id']}/agents/cy/memories/", {"content": "the key is under the mat"}, format="json"
    ).json()
    concurrently(AgentMemory, lambda m: AgentMemory.objects.filter(pk=m.pk).update(retrieval_count=4))
    assert (
        api.patch(
            f"/api/worlds/{world['id']}/agents/cy/memories/{note['id']}/", {"pinned": True}, format="json"
        ).status_code
        == 200
    )
    assert AgentMemory.objects.values_list("pinned", "retrieval_count").get(pk=note["id"]) == (True, 4)


def test_a_run_left_running_by_a_dead_worker_is_marked_crashed_by_the_next_pass(adventure):
    from django.utils import timezone

    dead = PassRun.objects.create(adventure=adventure, worker="gone")
    PassRun.objects.filter(pk=dead.pk).update(started_at=timezone.now() - memory_pass.PASS_ABANDONED_AFTER * 2)
    fresh = PassRun.objects.create(adventure=adventure, worker="busy")  # another pass, still going
    memory_pass.run_recorded(adventure.pk, worker="w1")
    assert PassRun.objects.get(pk=dead.pk).outcome == "crashed"
    assert PassRun.objects.get(pk=fresh.pk).outcome == "running"
    assert not PassRun.objects.filter(adventure=adventure, worker="w1", finished_at__isnull=True).exists()
