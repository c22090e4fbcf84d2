"""Moderators work in the Django admin: hide content, suspend users; they never see API keys."""

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group
from django.urls import reverse

from memory.models import Memory
from stories.models import Action
from tests.conftest import ALICE_KEY, api_client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def moderator(django_user_model, client):
    user = django_user_model.objects.create_user(username="mod", password="mod-pass-123", is_staff=True)
    user.groups.add(Group.objects.get(name="Moderators"))
    client.force_login(user)
    return client


@pytest.fixture
def story(alice_plays, fake_llm):
    aid = alice_plays.post("/api/adventures/", {"title": "Harbor", "opening": "You arrive."}, format="json").json()[
        "id"
    ]
    alice_plays.post(f"/api/adventures/{aid}/turns/", {"mode": "say", "text": "ABUSIVE-WORDS here"}, format="json")
    return aid


def test_a_hidden_action_leaves_the_owners_story_and_the_next_prompt(moderator, story, alice_plays, fake_llm):
    offending = Action.objects.get(text="ABUSIVE-WORDS here")
    response = moderator.post(
        reverse("admin:stories_action_changelist"), {"action": "hide", "_selected_action": [offending.pk]}
    )
    assert response.status_code == 302
    texts = [a["text"] for a in alice_plays.get(f"/api/adventures/{story}/story/").json()["actions"]]
    assert "ABUSIVE-WORDS here" not in texts and len(texts) == 2
    alice_plays.post(f"/api/adventures/{story}/turns/", {"mode": "do", "text": "look around"}, format="json")
    prompt = str(fake_llm.chat_requests()[-1].body["messages"])
    assert "ABUSIVE-WORDS" not in prompt and "look around" in prompt
    entry = LogEntry.objects.get(object_id=str(offending.pk))
    assert entry.user.username == "mod" and "Hidden" in entry.change_message


def test_a_hidden_adventure_is_gone_for_its_owner(moderator, story, alice_plays):
    moderator.post(reverse("admin:stories_adventure_changelist"), {"action": "hide", "_selected_action": [story]})
    assert alice_plays.get(f"/api/adventures/{story}/").status_code == 404
    assert alice_plays.get("/api/adventures/").json() == []


def test_moderators_never_see_an_api_key_anywhere_in_the_admin(moderator, story, alice_plays):
    assert moderator.get(reverse("admin:stories_aisettings_changelist")).status_code == 403
    alice = alice_plays.user
    pages = [reverse("admin:index"), reverse("admin:auth_user_change", args=[alice.pk])]
    for model in ["adventure", "action", "branch", "storycard", "providercall"]:
        pages.append(reverse(f"admin:stories_{model}_changelist"))
    for model in ["memory", "world", "agentmemory", "passrun"]:
        pages.append(reverse(f"admin:memory_{model}_changelist"))
    pages.append(reverse("admin:stories_adventure_change", args=[story]))
    for page in pages:
        response = moderator.get(page)
        assert response.status_code == 200, page
        body = response.content.decode()
        assert ALICE_KEY not in body and "api_key_encrypted" not in body, page


def test_a_suspended_user_is_locked_out_at_once(moderator, alice_plays, client, alice):
    browser = api_client_for(alice)
    browser.force_authenticate(user=None)
    browser.credentials()
    browser.login(username="alice", password="alice-pass-123")
    assert browser.get("/api/auth/me/").status_code == 200
    response = moderator.post(
        reverse("admin:auth_user_changelist"), {"action": "suspend", "_selected_action": [alice.pk]}
    )
    assert response.status_code == 302
    assert alice_plays.get("/api/adventures/").status_code in (401, 403), "her API token stops working"
    assert browser.get("/api/auth/me/").status_code in (401, 403), "her session ends"
    assert LogEntry.objects.filter(object_id=str(alice.pk), change_message__contains="Suspended").exists()


def test_a_moderator_cannot_make_a_superuser(moderator, bob):
    page = reverse("admin:auth_user_change", args=[bob.pk])
    moderator.post(
        page,
        {
            "username": "bob",
            "is_active": "on",
            "is_staff": "on",
            "is_superuser": "on",
            "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00",
        },
    )
    bob.refresh_from_db()
    assert not bob.is_superuser and not bob.is_staff


def test_memory_moderation_actions(moderator, alice):
    from stories.adventures import story_create

    adventure = story_create(owner_id=alice.pk, title="t", opening="o")
    memory = Memory.objects.create(adventure=adventure, branch=adventure.head_branch, depth=1, text="a memory")
    url = reverse("admin:memory_memory_changelist")
    moderator.post(url, {"action": "forget", "_selected_action": [memory.pk]})
    memory.refresh_from_db()
    assert memory.forgotten
    moderator.post(url, {"action": "restore", "_selected_action": [memory.pk]})
    memory.refresh_from_db()
    assert not memory.forgotten


def test_hiding_an_action_rewrites_only_its_block_and_keeps_what_the_player_set(
    moderator, adventure, memory_llm, alice_api, django_capture_on_commit_callbacks
):
    from memory.story import memory_pass
    from stories.tree import lineage
    from tests.memory.conftest import grow
    from tests.support.commits import as_if_committed

    head = grow(adventure, 79)
    for _ in range(4):
        memory_pass.run(adventure.pk)
    before = {m.pk: m for m in Memory.objects.filter(adventure=adventure)}
    assert len(before) == 13
    by_block = {m.source_start: m for m in before.values()}
    Memory.objects.filter(pk=by_block[13].pk).update(pinned=True)
    alice_api.patch(
        f"/api/adventures/{adventure.pk}/memories/{by_block[19].pk}/", {"text": "Mira's own note"}, format="json"
    )
    Memory.objects.filter(pk=by_block[25].pk).update(forgotten=True)
    Memory.objects.filter(pk=by_block[31].pk).update(use_count=7)
    Action.objects.filter(pk=lineage.node_at(head, 4).pk).update(text="Action 4: Mira sees ABUSIVE-WORDS.")
    Memory.objects.filter(pk=by_block[1].pk).update(text="ABUSIVE-WORDS remembered")
    snapshot = {
        m.pk: (m.text, m.pinned, m.forgotten, m.use_count, m.edited)
        for m in Memory.objects.filter(adventure=adventure)
        if m.source_start != 1
    }

    as_if_committed()  # the setup's requests committed: the passes they asked for are no longer waiting
    with django_capture_on_commit_callbacks() as queued:
        moderator.post(
            reverse("admin:stories_action_changelist"),
            {"action": "hide", "_selected_action": [lineage.node_at(head, 4).pk]},
        )
    assert queued, "the memory pass is queued at once"
    after = {
        m.pk: (m.text, m.pinned, m.forgotten, m.use_count, m.edited)
        for m in Memory.objects.filter(adventure=adventure)
        if m.source_start != 1
    }
    assert after == snapshot, "every other memory, and all the player set, stays"
    assert Memory.objects.get(pk=by_block[1].pk).stale
    memory_pass.run(adventure.pk)
    rewritten = Memory.objects.get(pk=by_block[1].pk)
    assert not rewritten.stale and "ABUSIVE" not in rewritten.text
    passages = [
        r.body["messages"][-1]["content"]
        for r in memory_llm.chat_requests()
        if r.body["messages"][0]["content"].startswith("You write memories")
    ]
    assert "ABUSIVE" not in passages[-1] and "Action 3:" in passages[-1] and "Action 5:" in passages[-1]
    assert Memory.objects.filter(adventure=adventure).count() == 13
    memory_pass.run(adventure.pk)  # embeds the rewritten memory
    from stories.accounts import ai_settings

    ai_settings.ai_settings_update(user_id=adventure.owner_id, memory_top_k=20)
    answer = alice_api.post(
        f"/api/adventures/{adventure.pk}/turns/", {"mode": "do", "text": "rest"}, format="json"
    ).json()
    assert "ABUSIVE" not in str(memory_llm.chat_requests()[-1].body["messages"]), "the next prompt is clean"
    assert by_block[13].pk in {m["id"] for m in answer["memories"]}, "the pin is still sent"


def test_hiding_a_take_while_its_reply_is_written_is_refused_with_a_message_and_works_after(moderator, story):
    from django.contrib.messages import get_messages

    from stories.tree.generation import generation_claim, generation_release

    offending = Action.objects.get(text="ABUSIVE-WORDS here")
    token = generation_claim(adventure_id=story)
    try:
        response = moderator.post(
            reverse("admin:stories_action_changelist"),
            {"action": "hide", "_selected_action": [offending.pk]},
            follow=True,
        )
        assert response.status_code == 200
        shown = [str(m) for m in get_messages(response.wsgi_request)] or [str(m) for m in response.context["messages"]]
        assert any("being written" in m and "not changed" in m for m in shown), shown
        offending.refresh_from_db()
        assert not offending.hidden, "nothing changed while the reply is written"
    finally:
        generation_release(adventure_id=story, token=token)
    moderator.post(reverse("admin:stories_action_changelist"), {"action": "hide", "_selected_action": [offending.pk]})
    offending.refresh_from_db()
    assert offending.hidden


@pytest.mark.django_db(transaction=True)
def test_hiding_waits_for_the_adventure_lock_before_touching_the_take(story):
    """Every tree write locks the adventure first; a hide that locked the take first could
    deadlock against the player's edit of it (the edit holds the adventure, then needs the take)."""
    import threading

    from django.db import connection, transaction

    from stories import moderation
    from stories.tree import writes
    from tests.stories.test_delete_races import _someone_waits_on_a_lock
    from tests.support.processes import wait_for

    offending = Action.objects.get(text="ABUSIVE-WORDS here")
    outcome = {}

    def moderator_hides():
        try:
            moderation.action_set_hidden(action_id=offending.pk, hidden=True)
            outcome["hidden"] = True
        finally:
            connection.close()

    hider = threading.Thread(target=moderator_hides)
    with transaction.atomic():
        writes.lock(story)  # the player's edit holds the adventure...
        hider.start()
        wait_for(lambda: outcome or _someone_waits_on_a_lock(), timeout=20, what="the hide to finish or to wait")
        assert not outcome, "the hide went ahead while the player's edit held the adventure"
        # ...and now writes the take, which the hide must not hold
        Action.objects.filter(pk=offending.pk).update(text="ABUSIVE-WORDS, edited")
    hider.join(30)
    offending.refresh_from_db()
    assert outcome == {"hidden": True} and offending.hidden and offending.text == "ABUSIVE-WORDS, edited"


def test_the_admin_names_its_lists_in_english(moderator):
    home = moderator.get(reverse("admin:index")).content.decode()
    for plural in ("Memories", "Branches", "Agent memories"):
        assert plural in home, plural
    for wrong in ("Memorys", "Branchs", "memorys"):
        assert wrong not in home, wrong
