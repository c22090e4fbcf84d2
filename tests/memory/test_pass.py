"""The post-turn pass follows the rules: which blocks, when, the summary, vectors, recall."""

import numpy as np
import pytest

from memory import embedder
from memory.models import Cursor, Memory
from memory.story import memories, memory_pass, retrieval
from memory.story.steps import eviction
from stories.models import Branch
from tests.memory.conftest import grow
from tests.support.fake_llm import Reply, bag_of_words_vector

pytestmark = pytest.mark.django_db


def blocks(adventure):
    return sorted(
        Memory.objects.filter(adventure=adventure, source_start__isnull=False).values_list("source_start", "source_end")
    )


def summary_requests(fake):
    return [r for r in fake.chat_requests() if r.body["messages"][0]["content"].startswith("You keep the running")]


def test_forty_actions_give_exactly_the_blocks_the_rules_say(adventure, memory_llm):
    history = {}
    summary_at = []

    def run(depth):
        before = len(summary_requests(memory_llm))
        memory_pass.run(adventure.pk)
        history[depth] = blocks(adventure)
        if len(summary_requests(memory_llm)) > before:
            summary_at.append(depth)
        if depth == 10:
            memories.summary_set(adventure=adventure, text="Mira owes Oren a silver coin.")

    grow(adventure, 40, run=run)
    assert history[11] == []
    assert history[12] == [(1, 6), (7, 12)], "the first two are written once the story reaches 12"
    assert history[17] == history[12] and history[18][-1] == (13, 18)
    assert blocks(adventure) == [(1, 6), (7, 12), (13, 18), (19, 24), (25, 30), (31, 36)]
    memory = Memory.objects.get(adventure=adventure, source_start=7)
    assert memory.text.startswith("Mira remembered this: Action Action 12") or "Mira" in memory.text
    assert memory.branch_id == adventure.head_branch_id and memory.depth == 12

    # the player's own summary at action 10 is the summary as of 10: rewrites come 15 actions after it
    assert summary_at == [25, 40]
    adventure.refresh_from_db()
    assert adventure.story_summary.startswith("Mira owes Oren a silver coin."), "the player's edit is kept"
    cursor = Cursor.objects.get(adventure=adventure)
    assert (cursor.memory_depth, cursor.summary_depth) == (36, 40)

    stored = list(Memory.objects.filter(adventure=adventure))
    assert all(m.embedding is not None and m.embedding_model == "fake-embed" for m in stored)
    assert len(stored[0].embedding) == 384
    for m in stored:  # each the vector the endpoint sent for its text (as a halfvec holds it)
        sent = bag_of_words_vector(m.text, 384)
        assert max(abs(a - b) for a, b in zip(m.embedding, sent)) < 1e-3, m.text


def test_recall_returns_the_same_top_k_as_brute_force_numpy(adventure, memory_llm):
    grow(adventure, 60, run=lambda d: memory_pass.run(adventure.pk) if d % 6 == 0 else None)
    head = Branch.objects.get(pk=adventure.head_branch_id)
    model, (query,) = embedder.embed(user_id=adventure.owner_id, texts=[retrieval.query_text(head)])
    # in id order: recall breaks ties of distance by id, and the stable sort below keeps this order
    rows = list(Memory.objects.filter(adventure=adventure).order_by("id"))
    assert len(rows) == 10
    bank_vectors = np.array([list(m.embedding) for m in rows], dtype=np.float32)
    q = np.array(query, dtype=np.float16).astype(np.float32)
    cosine = bank_vectors @ q / (np.linalg.norm(bank_vectors, axis=1) * np.linalg.norm(q))
    expected = [rows[i].pk for i in np.argsort(-cosine, kind="stable")[:5]]
    got = retrieval.rank(branch=head, vector=query, model=model, top_k=5)
    assert [m.id for m in got] == expected
    assert [m.similarity for m in got] == pytest.approx(sorted(cosine, reverse=True)[:5], abs=2e-3)


def test_a_failed_summary_call_leaves_the_cursor_and_the_next_run_writes_it_once(adventure, memory_llm, settings):
    grow(adventure, 12)
    memory_llm.queue(*[Reply(status=500)] * 3)  # the SDK tries three times
    report = memory_pass.run(adventure.pk)
    assert report.memories_created == 0 and "memory of actions 1-6" in report.errors[0]
    assert Cursor.objects.get(adventure=adventure).memory_depth == 0
    assert memory_pass.run(adventure.pk).memories_created == 2
    assert memory_pass.run(adventure.pk).memories_created == 0, "running again changes nothing"
    assert blocks(adventure) == [(1, 6), (7, 12)]


def test_at_most_five_memories_a_run_so_imports_catch_up_over_runs(adventure, memory_llm):
    grow(adventure, 48)
    assert memory_pass.run(adventure.pk).memories_created == 5
    assert memory_pass.run(adventure.pk).memories_created == 3
    assert len(blocks(adventure)) == 8


def test_eviction_forgets_least_recently_used_keeps_pins_and_can_be_restored(adventure, owner, alice_api):
    from datetime import timedelta

    from django.utils import timezone

    from stories.accounts import ai_settings

    ai_settings.ai_settings_update(user_id=owner.pk, memory_bank_capacity=3)
    head = Branch.objects.get(pk=adventure.head_branch_id)
    now = timezone.now()
    made = {}
    for name, used, count, pinned in [
        ("old-unused", None, 0, False),
        ("old-pinned", None, 0, True),
        ("used-long-ago", now - timedelta(days=3), 5, False),
        ("used-today-once", now - timedelta(hours=1), 1, False),
        ("used-today-twice", now - timedelta(hours=1), 2, False),
        ("fresh", now, 0, False),
    ]:
        m = Memory.objects.create(
            adventure=adventure, branch=head, depth=1, text=name, pinned=pinned, last_used_at=used, use_count=count
        )
        made[name] = m
    Memory.objects.filter(pk=made["old-unused"].pk).update(created_at=now - timedelta(days=9))
    Memory.objects.filter(pk=made["old-pinned"].pk).update(created_at=now - timedelta(days=9))
    report = memory_pass.PassReport()
    eviction.evict(adventure=adventure, head=head, report=report)
    forgotten = set(Memory.objects.filter(forgotten=True).values_list("text", flat=True))
    assert forgotten == {"old-unused", "used-long-ago", "used-today-once"}
    assert Memory.objects.filter(adventure=adventure, forgotten=False).count() == 3

    restored = alice_api.patch(
        f"/api/adventures/{adventure.pk}/memories/{made['used-long-ago'].pk}/", {"forgotten": False}, format="json"
    )
    assert restored.status_code == 200 and restored.json()["forgotten"] is False
    listed = alice_api.get(f"/api/adventures/{adventure.pk}/memories/").json()
    assert {m["text"]: m["forgotten"] for m in listed}["old-unused"] is True, "evicted memories stay visible"


def test_pins_may_exceed_capacity_but_nothing_else_does(adventure, owner):
    from stories.accounts import ai_settings

    ai_settings.ai_settings_update(user_id=owner.pk, memory_bank_capacity=2)
    head = Branch.objects.get(pk=adventure.head_branch_id)
    for n in range(4):
        Memory.objects.create(adventure=adventure, branch=head, depth=1, text=f"pin {n}", pinned=True)
    Memory.objects.create(adventure=adventure, branch=head, depth=1, text="plain")
    eviction.evict(adventure=adventure, head=head, report=memory_pass.PassReport())
    assert list(Memory.objects.filter(forgotten=True).values_list("text", flat=True)) == ["plain"]
    assert Memory.objects.filter(forgotten=False).count() == 4


def test_the_summarizer_gets_the_block_and_a_cast_brief(adventure, memory_llm):
    from stories.models import StoryCard

    adventure.plot_essentials = "The salt caravans leave at the new moon."
    adventure.persona_description = "a cartographer"
    adventure.save()
    StoryCard.objects.create(
        adventure=adventure, type="character", name="Oren", keys=["stone 7"], entry="Oren is the one-eyed innkeeper."
    )
    StoryCard.objects.create(adventure=adventure, type="place", name="Well", keys=["well"], entry="A dry well.")
    grow(adventure, 12)
    memory_pass.run(adventure.pk)
    request = [r for r in memory_llm.chat_requests() if "write memories" in r.body["messages"][0]["content"]][0]
    system, user = request.body["messages"][0]["content"], request.body["messages"][1]["content"]
    assert "past tense, third person" in system and 'never "you"' in system
    assert "Mira (she/her): a cartographer" in user
    assert "- Oren: Oren is the one-eyed innkeeper." in user, "characters whose keys appear are in the cast"
    assert user.index("- Well: A dry well.") < user.index("- Oren:"), "cards the block mentions, of any type, first"
    assert "Setting:\nThe salt caravans leave at the new moon." in user
    assert user.rstrip().endswith("Action 6: Mira walks past stone 6 near the well.")


def test_changing_the_embedding_model_clears_old_vectors_and_reembeds(adventure, memory_llm, alice_api):
    grow(adventure, 12)
    memory_pass.run(adventure.pk)
    assert set(Memory.objects.values_list("embedding_model", flat=True)) == {"fake-embed"}
    response = alice_api.patch("/api/settings/", {"embedding_model": ""}, format="json")
    assert response.status_code == 200
    assert all(m.embedding is None for m in Memory.objects.all())
    memory_pass.run(adventure.pk)
    assert set(Memory.objects.values_list("embedding_model", flat=True)) == {embedder.LOCAL_MODEL}


def test_a_block_a_moderator_hid_whole_is_skipped_and_the_pass_goes_on(adventure, memory_llm):
    from stories import moderation
    from stories.models import Action

    head = grow(adventure, 12)
    for action in Action.objects.filter(branch=head, depth__gte=7, depth__lte=12):
        moderation.action_set_hidden(action_id=action.pk, hidden=True)
    grow(adventure, 24)
    memory_pass.run(adventure.pk)
    assert blocks(adventure) == [(1, 6), (13, 18), (19, 24)], "no memory of hidden actions, none missing after"
    passages = [
        r.body["messages"][-1]["content"]
        for r in memory_llm.chat_requests()
        if r.body["messages"][0]["content"].startswith("You write memories")
    ]
    assert len(passages) == 3 and not any("stone 8 " in p for p in passages)
    assert Cursor.objects.get(adventure=adventure).memory_depth == 24
    grow(adventure, 30)
    memory_pass.run(adventure.pk)
    assert blocks(adventure)[-1] == (25, 30)


def test_the_cast_brief_follows_its_rules(adventure):
    from memory.story import summarize
    from stories.models import StoryCard

    cards = [
        StoryCard(adventure=adventure, type="place", name="Old Mill", keys=["mill"], entry="A ruin.\n\nBy the river."),
        StoryCard(adventure=adventure, type="character", name="Oren", keys=["oren"], entry="x " * 200),
        StoryCard(adventure=adventure, type="character", name="oren", keys=["innkeeper"], entry="a duplicate"),
        StoryCard(adventure=adventure, type="item", name="Lamp", keys=["lamp"], entry="brass"),
        *[
            StoryCard(adventure=adventure, type="character", name=f"Extra {n}", keys=[f"nobody{n}"], entry="e")
            for n in range(10)
        ],
    ]
    block = "At the mill you met Oren. " + "Filler words here. " * 3000  # the names come before the cut
    brief = summarize.cast_brief(adventure=adventure, text=block, cards=cards)
    lines = brief.split("Setting:")[0].strip().splitlines()[1:]
    assert len(lines) == 8 and lines[0].startswith("- Protagonist")
    assert lines[1] == "- Old Mill: A ruin. By the river.", "mentioned cards of any type first, on one line"
    assert lines[2].startswith("- Oren: x x") and lines[2].endswith("…") and len(lines[2]) <= 240
    assert not any(line.startswith("- oren:") for line in lines), "a name counts once, whatever its case"
    assert not any(line.startswith("- Lamp") for line in lines), "an item the block does not mention stays out"
    assert [line.split(":")[0] for line in lines[3:]] == [f"- Extra {n}" for n in range(5)]

    adventure.persona_name = ""
    adventure.persona_description = "a tired   courier\nfrom the coast"
    brief = summarize.cast_brief(adventure=adventure, text="nothing", cards=[])
    assert '- The player ("you" in the story): a tired courier from the coast' in brief
    assert (
        summarize.clean_memory("You found the key. Then you left.", name=summarize.protagonist(adventure))
        == "The player found the key. Then the player left."
    )


def test_the_summary_prompt_is_bounded_and_carries_the_cast(adventure, memory_llm):
    from stories.accounts import ai_settings
    from stories.models import StoryCard

    StoryCard.objects.create(adventure=adventure, type="character", name="Oren", keys=["stone"], entry="innkeeper")
    adventure.memory_bank_enabled = False  # the summary reads the raw story
    adventure.save(update_fields=["memory_bank_enabled"])
    grow(adventure, 200)
    memory_pass.run(adventure.pk)
    request = [r for r in memory_llm.chat_requests() if "running summary" in r.body["messages"][0]["content"]][-1]
    system, user = request.body["messages"][0]["content"], request.body["messages"][1]["content"]
    assert "Compress older events harder" in system
    assert "- Oren: innkeeper" in user
    happened = user.split("What happened since:\n", 1)[1]
    from stories.prompt import tokens

    assert tokens.count(happened) <= 2000 + 5 and "stone 200 " in happened and "stone 2 " not in happened
    assert ai_settings.ai_settings_of(user_id=adventure.owner_id)


def test_a_block_hidden_whole_after_its_memory_was_written_is_forgotten_and_comes_back_when_shown(
    adventure, memory_llm
):
    from stories import moderation
    from stories.models import Action

    head = grow(adventure, 24)
    memory_pass.run(adventure.pk)
    assert blocks(adventure) == [(1, 6), (7, 12), (13, 18), (19, 24)]
    block = list(Action.objects.filter(branch=head, depth__gte=7, depth__lte=12))
    for action in block:
        moderation.action_set_hidden(action_id=action.pk, hidden=True)
    memory_pass.run(adventure.pk)
    assert blocks(adventure) == [(1, 6), (13, 18), (19, 24)], "nothing of a hidden block is remembered"
    assert adventure.pk not in memory_pass.adventures_behind(), "and the sweeper has nothing left to do"
    for action in block:
        moderation.action_set_hidden(action_id=action.pk, hidden=False)
    memory_pass.run(adventure.pk)
    assert blocks(adventure) == [(1, 6), (7, 12), (13, 18), (19, 24)], "shown again, it is remembered again"
    assert Cursor.objects.get(adventure=adventure).memory_depth == 24


def test_a_pass_that_meets_a_reply_being_written_still_writes_embeds_and_counts_no_failure(adventure, memory_llm):
    """The summary's lock used to take the tree's generation check: a reply being written made the
    whole pass a failure with an empty report, skipping embedding and eviction."""
    from memory.models import PassRun
    from stories.tree.generation import generation_claim, generation_release

    grow(adventure, 20)
    token = generation_claim(adventure_id=adventure.pk)  # a player's reply is streaming meanwhile
    try:
        report = memory_pass.run_recorded(adventure.pk, worker="w1")
    finally:
        generation_release(adventure_id=adventure.pk, token=token)
    assert report.errors == [], report.errors
    assert report.memories_created == 3 and report.summary_written and report.embedded >= 3
    adventure.refresh_from_db()
    assert adventure.story_summary, "the summary was written beside the reply"
    assert Memory.objects.filter(adventure=adventure, embedding__isnull=True).count() == 0
    run = PassRun.objects.get(adventure=adventure, worker="w1")
    assert run.outcome == "ok" and run.memories_created == 3
    assert Cursor.objects.get(adventure=adventure).failures == 0


def test_a_step_that_fails_keeps_what_the_pass_did_before_and_after_it(adventure, memory_llm, monkeypatch):
    """One step's domain error is that step's: the report keeps the memories written before it,
    and embedding and eviction still run after it."""
    from config.errors import Conflict

    def refused(**kwargs):
        raise Conflict("the summary could not be written just now")

    monkeypatch.setattr(memory_pass, "update_summary", refused)
    grow(adventure, 20)
    report = memory_pass.run_recorded(adventure.pk, worker="w1")
    assert report.errors == ["the summary could not be written just now"]
    assert report.memories_created == 3 and report.embedded >= 3
    assert Memory.objects.filter(adventure=adventure, embedding__isnull=True).count() == 0


def test_a_pass_after_a_turn_with_nothing_due_reads_only_what_it_must(
    adventure, memory_llm, django_assert_max_num_queries
):
    """The pass runs after every turn, and most turns make nothing due (a block every six actions,
    a summary every fifteen): such a pass asks its questions in seven statements (the adventure with
    its head and its owner's settings in one, its record, its marks once, one read of what else is due:
    secrets, stale blocks, a cast, unembedded memories; the summary's snapshot, eviction's count, the
    record's end), and does nothing. A pass that finds a block due still writes it."""
    grow(adventure, 13, run=lambda depth: memory_pass.run_recorded(adventure.pk))
    grow(adventure, 14)
    made = Memory.objects.filter(adventure=adventure).count()
    with django_assert_max_num_queries(7):
        report = memory_pass.run_recorded(adventure.pk, worker="w1")
    assert (report.memories_created, report.summary_written, report.embedded, report.errors) == (0, False, 0, [])
    assert Memory.objects.filter(adventure=adventure).count() == made
    grow(adventure, 18)
    assert memory_pass.run_recorded(adventure.pk, worker="w1").memories_created == 1, "a due block is written"
    assert blocks(adventure)[-1] == (13, 18)


def test_a_story_with_a_cast_asks_no_more_of_a_pass_with_nothing_due_than_a_lone_one(
    adventure, memory_llm, django_assert_max_num_queries
):
    """A story with characters in its cast (every story played together) whose blocks were all
    remembered with them in it: a pass with nothing due asks the same seven statements as a lone
    story's (it once read the cast's backfill again on every pass: its marks never passed the blocks
    written after they were made). A card that joins the cast later is still read back."""
    from memory.models import CastMark
    from stories.models import StoryCard

    oren = StoryCard.objects.create(adventure=adventure, type="character", name="Oren", keys=["Oren"], in_cast=True)
    grow(adventure, 25, run=lambda depth: memory_pass.run_recorded(adventure.pk))
    assert blocks(adventure)[-1] == (19, 24)
    assert CastMark.objects.get(card=oren).depth == 24, "the blocks written with Oren in the cast are his"
    grow(adventure, 26)
    with django_assert_max_num_queries(7):
        report = memory_pass.run_recorded(adventure.pk, worker="w1")
    assert (report.memories_created, report.errors) == (0, [])

    late = StoryCard.objects.create(adventure=adventure, type="character", name="Wren", in_cast=True)
    memory_pass.run_recorded(adventure.pk)
    assert CastMark.objects.get(card=late).depth == 24, "a card that joins later is read back to the mark"
    oren.in_cast = False
    oren.save()
    memory_pass.run_recorded(adventure.pk)
    assert not CastMark.objects.filter(card=oren).exists(), "a card that leaves the cast loses its mark"
    with django_assert_max_num_queries(7):
        memory_pass.run_recorded(adventure.pk, worker="w1")


@pytest.mark.django_db(transaction=True)
def test_a_story_deleted_while_its_pass_waits_on_the_model_ends_the_pass_quietly(adventure, memory_llm):
    """A player deletes a story while its memory pass waits on the model: the pass ends, nothing of
    the story is written again, and the call stays in the player's debug log with no story (it once
    crashed on the log's row, and then again recording its crash)."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    from stories.models import Adventure, ProviderCall
    from tests.support.processes import wait_for

    grow(adventure, 12)
    memory_llm.latency = 1.0

    def run():
        try:
            return memory_pass.run_recorded(adventure.pk)
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(run)
        wait_for(lambda: memory_llm.in_flight == 1, timeout=20, what="the pass's model call")
        Adventure.objects.filter(pk=adventure.pk).delete()
        running.result(timeout=60)  # raises what the pass raised
    assert not Memory.objects.filter(adventure_id=adventure.pk).exists()
    logged = ProviderCall.objects.filter(user_id=adventure.owner_id, purpose="memory")
    assert logged.exists() and set(logged.values_list("adventure_id", flat=True)) == {None}


def test_memories_in_the_same_words_are_embedded_once_and_each_gets_the_vector(adventure, memory_llm):
    """Witnesses of one scene often remember it in the same words (a story played together has up to
    eight): the owner's endpoint is asked for each wording once, and every memory gets its vector."""
    from collections import Counter

    from memory import embeddings

    head = Branch.objects.get(pk=adventure.head_branch_id)
    texts = ["Mira saw the gate fall at dusk."] * 3 + ["Oren hid the brass key under the stair."]
    made = [Memory.objects.create(adventure=adventure, branch=head, depth=1, text=t) for t in texts]
    asked_before = len(memory_llm.requests)
    embeddings.embed_pending(adventure=adventure, report=memory_pass.PassReport())
    sent = Counter(
        text
        for r in memory_llm.requests[asked_before:]
        if r.path.endswith("/embeddings")
        for text in ([r.body["input"]] if isinstance(r.body["input"], str) else r.body["input"])
    )
    assert {t: sent[t] for t in set(texts)} == {t: 1 for t in set(texts)}
    stored = {m.pk: m for m in Memory.objects.filter(pk__in=[m.pk for m in made])}
    assert all(m.embedding is not None and m.embedding_model == "fake-embed" for m in stored.values())
    same = [list(stored[m.pk].embedding) for m in made[:3]]
    assert same[0] == same[1] == same[2] != list(stored[made[3].pk].embedding)


@pytest.mark.django_db(transaction=True)  # each change commits, and its pass is sent then
def test_a_turn_that_makes_nothing_due_sends_no_pass_and_nothing_is_left_undone(adventure, alice_api, memory_llm):
    """Most turns make nothing due (a block every six actions, a summary every fifteen): a turn's
    reply that grows the story short of the depth its last pass said the next block or summary
    comes due sends no pass; the turn that reaches it does, and so does any other change (an edit),
    and the turn after it. Played so, the story is remembered exactly as with a pass after every turn."""
    import redis
    from django.conf import settings

    from config.celery import PASSES

    broker = redis.Redis.from_url(settings.REDIS_URL)
    url = f"/api/adventures/{adventure.pk}/"

    def sent(method, path, body=None, *, run=True):
        broker.delete(PASSES)
        response = getattr(alice_api, method)(url + path, body or {}, format="json")
        assert response.status_code in (200, 201), response.json()
        queued = broker.llen(PASSES)
        broker.delete(PASSES)
        if queued and run:
            memory_pass.run_recorded(adventure.pk)  # the worker's part
        return queued

    grow(adventure, 30, run=lambda depth: memory_pass.run_recorded(adventure.pk))
    assert blocks(adventure)[-1] == (25, 30)
    # the next block is due at 36, the next summary at 45: the turns to 32 and 34 ask nothing
    assert [sent("post", "turns/", {"mode": "do", "text": "wait"}) for _ in range(3)] == [0, 0, 1]
    assert blocks(adventure)[-1] == (31, 36), "the turn that completed a block had its pass"
    assert sent("post", "turns/", {"mode": "do", "text": "wait"}) == 0
    first = alice_api.get(url + "story/").json()["actions"][-2]
    assert sent("patch", f"actions/{first['id']}/", {"text": "wait, listening"}, run=False) == 1, "an edit asks"
    assert sent("post", "turns/", {"mode": "do", "text": "wait"}) == 1, "until the edit's pass ran, turns ask too"
    assert sent("post", "turns/", {"mode": "do", "text": "wait"}) == 1, "the block of 37-42 is due"
    assert sent("post", "turns/", {"mode": "do", "text": "wait"}) == 0
    for _ in range(3):
        sent("post", "turns/", {"mode": "do", "text": "wait"})
    head = Branch.objects.get(pk=adventure.head_branch_id)
    assert head.tip_depth == 50
    assert blocks(adventure) == [(s, s + 5) for s in range(1, 49, 6)], "every block due was written"
    cursor = Cursor.objects.get(adventure=adventure)
    assert (cursor.memory_depth, cursor.summary_depth) == (48, 46), "the summary due at 45 came with the turn to 46"
