import os
import re

import pytest
from django.core.management import call_command
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memory import embedder, embeddings
from memory.models import Memory
from memory.story import memory_pass, retrieval, summarize
from stories.adventures import story_create
from stories.models import Branch

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo_only(demo, settings):
    """No key of the player's own: turns use the demo model, memory work stays offline."""
    settings.DEMO_TURNS_PER_DAY = 100
    fake_llm = demo
    fake_llm.reply = lambda body, n: (
        f"You follow the river north. The ferryman Tobias asks you for {n} copper coins to cross. "
        f"Rain starts falling on the old stone bridge."
    )
    return fake_llm


def test_with_no_key_the_offline_default_forms_and_recalls_memories(bob_api, demo_only):
    created = bob_api.post(
        "/api/adventures/", {"title": "River", "persona_name": "Ada", "opening": "You wake."}, format="json"
    ).json()
    aid = created["id"]
    for n in range(8):
        turn = bob_api.post(
            f"/api/adventures/{aid}/turns/", {"mode": "do", "text": f"pay Tobias {n} coins"}, format="json"
        )
        assert turn.status_code == 201
        memory_pass.run(aid)
    bank_rows = list(Memory.objects.filter(adventure_id=aid).order_by("source_start"))
    assert [(m.source_start, m.source_end) for m in bank_rows] == [(1, 6), (7, 12)]
    for memory in bank_rows:
        assert memory.offline and memory.embedding_model == embedder.LOCAL_MODEL
        assert len(memory.text.split()) <= 50
        assert not re.search(r"\byou\b", memory.text, re.I) and "Ada" in memory.text
    # a prompt too small for the whole story: the memories stand in for what it leaves out
    bob_api.patch("/api/settings/", {"context_tokens": 300}, format="json")
    turn = bob_api.post(
        f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "ask Tobias about the bridge"}, format="json"
    ).json()
    assert turn["memories"], "recall works with the local embedder"
    assert all(0 < m["similarity"] <= 1 for m in turn["memories"])
    memory_part = next(p for p in turn["context"]["parts"] if p["name"] == "memories")
    assert memory_part["items"][0]["id"] == turn["memories"][0]["id"]
    # the demo key only ever served turns
    assert all(r.path.endswith("/chat/completions") for r in demo_only.requests)
    assert len(demo_only.chat_requests()) == 9


def test_the_offline_summarizer_names_the_protagonist_and_keeps_facts():
    from stories.models import Action

    actions = [
        Action(kind="story", text="You walk. You see the Copper Gate of Vell, sealed since 1042."),
        Action(kind="ai", text="It is quiet. Your lantern flickers."),
    ]
    text = summarize.offline_memory(actions=actions, name="Ada")
    assert "Copper Gate" in text and "Ada" in text and not re.search(r"\byou\b", text, re.I)


def test_recall_is_one_ranked_query_and_counts_use_only_on_real_turns(alice, django_assert_num_queries):
    adventure = story_create(owner_id=alice.pk, title="t", opening="A quiet harbor at dusk.")
    head = Branch.objects.get(pk=adventure.head_branch_id)
    texts = ["Ada sold her boat to the harbor master.", "A storm sank three ships.", "Ada hid a key in the lighthouse."]
    for text in texts:
        Memory.objects.create(adventure=adventure, branch=head, depth=1, text=text)
    embeddings.embed_pending(adventure=adventure, report=memory_pass.PassReport())
    embedder.embed_local(["warm-up"])
    from stories.tree import lineage

    story = lineage.recent(head, count=50)  # a turn has read these already
    # settings (active model) + the ranked SELECT that counts the use (a turn has read its cards already)
    with django_assert_num_queries(2):
        items = retrieval.recall_for_turn(
            adventure=adventure, branch=head, user_id=alice.pk, top_k=2, story=story, record_use=True, cards=[]
        ).items
    assert len(items) == 2
    with django_assert_num_queries(2):
        retrieval.recall_for_turn(
            adventure=adventure, branch=head, user_id=alice.pk, top_k=2, story=story, record_use=False, cards=[]
        )
    counts = dict(Memory.objects.values_list("text", "use_count"))
    assert sum(counts.values()) == 2, "the dry run changed no use count"


def test_pinned_memories_always_come_back_and_count_toward_top_k(alice):
    adventure = story_create(owner_id=alice.pk, title="t", opening="Sailing.")
    head = Branch.objects.get(pk=adventure.head_branch_id)
    pinned = Memory.objects.create(
        adventure=adventure, branch=head, depth=1, text="Ada is allergic to honey.", pinned=True
    )
    for n in range(5):
        Memory.objects.create(adventure=adventure, branch=head, depth=1, text=f"Sailing fact {n} about the sea.")
    embeddings.embed_pending(adventure=adventure, report=memory_pass.PassReport())
    items = retrieval.recall_for_turn(
        adventure=adventure, branch=head, user_id=alice.pk, top_k=3, record_use=False
    ).items
    assert items[0].id == pinned.pk and items[0].pinned and len(items) == 3


def test_the_memory_api_lists_writes_edits_pins_forgets_and_deletes(alice_api, alice):
    aid = alice_api.post("/api/adventures/", {"title": "T", "opening": "Go."}, format="json").json()["id"]
    made = alice_api.post(f"/api/adventures/{aid}/memories/", {"text": "Ada owes the ferryman a favor."}, format="json")
    assert made.status_code == 201 and made.json()["hand_written"] is True
    mid = made.json()["id"]
    memory_pass.run(aid)
    assert alice_api.get(f"/api/adventures/{aid}/memories/{mid}/").json()["embedded"] is True
    edited = alice_api.patch(
        f"/api/adventures/{aid}/memories/{mid}/", {"text": "Ada owes the ferryman two favors."}, format="json"
    ).json()
    assert edited["embedded"] is False, "a new text clears the vector until it is embedded again"
    memory_pass.run(aid)
    assert Memory.objects.get(pk=mid).embedding is not None
    assert alice_api.patch(f"/api/adventures/{aid}/memories/{mid}/", {"pinned": True}, format="json").json()["pinned"]
    unchanged = alice_api.patch(f"/api/adventures/{aid}/memories/{mid}/", {}, format="json")
    assert unchanged.status_code == 200 and unchanged.json()["pinned"], "an empty patch changes nothing"
    too_long = alice_api.post(f"/api/adventures/{aid}/memories/", {"text": "x" * 1001}, format="json")
    assert too_long.status_code == 400 and "text" in too_long.json()
    assert alice_api.get(f"/api/adventures/{aid}/memories/{mid}/source/").json() == []
    assert alice_api.delete(f"/api/adventures/{aid}/memories/{mid}/").status_code == 204
    assert alice_api.get(f"/api/adventures/{aid}/memories/").json() == []
    assert alice_api.post(f"/api/adventures/{aid}/memories/run/").status_code == 202


def test_the_summary_api_keeps_the_players_text(alice_api, owner, memory_llm):
    aid = alice_api.post("/api/adventures/", {"title": "T", "opening": "Go."}, format="json").json()["id"]
    put = alice_api.put(f"/api/adventures/{aid}/summary/", {"story_summary": "Ada lost her map."}, format="json")
    assert put.status_code == 200 and put.json()["story_summary"] == "Ada lost her map."
    regenerated = alice_api.post(f"/api/adventures/{aid}/summary/regenerate/")
    assert regenerated.status_code == 200
    assert regenerated.json()["story_summary"].startswith("Ada lost her map.")


def test_rewrite_memories_is_a_dry_run_unless_told_to_write(adventure, memory_llm, capsys):
    from tests.memory.conftest import grow

    grow(adventure, 12)
    memory_pass.run(adventure.pk)
    Memory.objects.filter(adventure=adventure).update(text="old wording")
    call_command("rewrite_memories")
    assert set(Memory.objects.values_list("text", flat=True)) == {"old wording"}
    assert "would rewrite 2 of 2" in capsys.readouterr().out
    call_command("rewrite_memories", "--write")
    assert "old wording" not in set(Memory.objects.values_list("text", flat=True))
    assert all(m.embedding is None for m in Memory.objects.all()), "new texts are re-embedded by the next pass"


def test_a_turn_with_a_full_bank_runs_a_pinned_number_of_queries(owner, memory_llm):
    """An N+1 on the hot path fails here. Eleven statements: auth, access (with the owner's
    settings and the last turn's prompt fingerprint), the claim, the action placed (the row lock, the
    generation check, tip and node in one), story, cards, the embedding call's log row, recall (ranked
    SELECT counting the use), the summary of the story before the window (the prefix-cache layout),
    the model call's log row, the reply placed (the same statement frees the claim). No transaction
    wraps a placement (on a real server each was BEGIN, two statements and COMMIT); the test's own
    savepoints are not counted."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from memory.models import Memory
    from stories.tree import writes
    from tests.conftest import api_client_for

    api = api_client_for(owner)
    aid = api.post("/api/adventures/", {"title": "T", "opening": "Dawn."}, format="json").json()["id"]
    adventure = owner.adventures.get(pk=aid)
    for n in range(20):
        writes.place(adventure_id=aid, branch_id=adventure.head_branch_id, kind="story", text=f"Event {n} happens.")
        Memory.objects.create(
            adventure=adventure, branch_id=adventure.head_branch_id, depth=n + 1, text=f"Memory {n} about the harbor."
        )
    embeddings.embed_pending(adventure=adventure, report=memory_pass.PassReport())
    api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "warm up"}, format="json")
    from django.db.models import Sum

    used_before = Memory.objects.filter(adventure=adventure).aggregate(n=Sum("use_count"))["n"]
    with CaptureQueriesContext(connection) as queries:
        response = api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "look"}, format="json")
    statements = [q["sql"] for q in queries.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
    assert len(statements) == 11, "\n".join(s[:120] for s in statements)
    assert response.status_code == 201 and len(response.json()["memories"]) == 5
    used = Memory.objects.filter(adventure=adventure).aggregate(n=Sum("use_count"))["n"] - used_before
    assert used == 5, "recall counted each memory it used once"
    # with a card, what the story changed on it is read in the same first step: one statement more
    from memory.models import CardClaim
    from stories.models import StoryCard
    from stories.tree import lineage

    harbor = StoryCard.objects.create(
        adventure=adventure, type="place", name="The harbor", keys=["harbor"], entry="Grey."
    )
    evidence = lineage.node_at(lineage.head(adventure), 5)
    CardClaim.objects.create(
        adventure=adventure, card=harbor, action=evidence, slot="status", value="destroyed", text="The harbor burns."
    )
    api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "warm up"}, format="json")
    with CaptureQueriesContext(connection) as queries:
        response = api.post(
            f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "look at the harbor"}, format="json"
        )
    statements = [q["sql"] for q in queries.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
    assert len(statements) == 12, "\n".join(s[:120] for s in statements)
    assert response.status_code == 201
    narrator = [r for r in memory_llm.chat_requests() if "narrator" in r.body["messages"][0]["content"]][-1]
    assert "Since passage 5: destroyed." in "\n".join(m["content"] for m in narrator.body["messages"])


def test_each_memory_gets_its_own_vector_whatever_the_batch_and_the_order_of_lengths():
    """The local model embeds texts in batches of like length (a batch is padded to its longest):
    every text still gets the vector it gets alone, at its own place."""
    texts = [
        "Mira hides the silver key under the third stone of the well.",
        "Rain.",
        "Tobias the ferryman asks for four copper coins, then for five, and the river keeps rising "
        "while the lanterns of the village go out one by one behind them.",
        "The wolf is gone.",
    ] * 10  # 40 texts: more than one batch
    texts = [f"{n}: {text}" for n, text in enumerate(texts)]
    together = embedder.embed_local(texts)
    for text, vector in zip(texts, together):
        alone = embedder.embed_local([text])[0]
        assert sum(a * b for a, b in zip(vector, alone)) > 0.9999, text
    assert len({tuple(v) for v in together}) == len(texts), "no two texts share one vector"


def test_a_query_runs_on_int8_kernels_close_to_the_memories_vectors_and_the_kernels_are_made_once():
    """A query (one text, a player or an agent waiting) runs on the shipped model quantized for int8
    kernels (about twice as fast); memories keep the shipped kernels. The two agree closely enough that
    a memory is found by the words that describe it, as before."""
    local = embedder._local()
    assert local.query_session is not local.session, "queries have kernels of their own"
    path = embedder._int8_kernels_path()
    made = os.path.getmtime(path)
    assert embedder._int8_kernels_path() == path and os.path.getmtime(path) == made, "made once, then reused"
    memories = [
        "Mira hides the silver key under the third stone of the well.",
        "Tobias the ferryman asks for four copper coins to cross the river.",
        "The wolf pack circles the farm at night and the dogs will not stop barking.",
        "Aunt Sela bakes honey bread for the festival on Friday.",
    ]
    stored = embedder.embed_local(memories)
    for text, vector in zip(memories, stored):
        query = embedder.embed_query_local(text, keep_end=256)
        similarity = sum(a * b for a, b in zip(query, vector))
        assert 0.97 < similarity < 0.99999, f"{similarity}: {text}"
    questions = ["where is the key hidden?", "how much does the ferry cost?", "what happens at night on the farm?"]
    for expected, question in enumerate(questions):
        query = embedder.embed_query_local(question, keep_end=embedder.LOCAL_QUERY_WORDPIECES)
        scores = [sum(a * b for a, b in zip(query, vector)) for vector in stored]
        assert scores.index(max(scores)) == expected, (question, scores)


def test_with_no_place_to_make_the_int8_kernels_queries_run_on_the_shipped_ones(tmp_path, monkeypatch, caplog):
    import tempfile

    blocked = tmp_path / "a-file-not-a-folder"
    blocked.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(blocked))
    local = embedder._Local()
    vector = local.embed(["where is the key hidden?"], query=True)[0]
    assert local.query_session is local.session and len(vector) == embedder.LOCAL_DIMS
    assert "int8 query kernels are unavailable" in caplog.text


_WORDS = st.sampled_from(
    ["the", "knight's", "Zürich", "ünïcödé", "東京に", "rode—on", "well...", "\u200b", "x" * 30, "don't!", "42,000", ""]
)


@settings(max_examples=200, deadline=None)
@example([("the", " ")] * 20 + [("\u200b", " ")] * 40)  # a tail of words the tokenizer drops whole
@given(st.lists(st.tuples(_WORDS, st.sampled_from([" ", "\n", "  ", "\t"])), max_size=120))
def test_a_turns_query_reads_the_same_word_pieces_from_its_tail_as_from_the_whole_text(parts):
    """A turn's query tokenizes only the end of its four actions (memory.embedder.query_encoding); whatever
    the words (accents, marks, CJK, characters the tokenizer drops), the pieces the model reads are
    those of the whole text's newest sixteen."""
    text = "".join(word + space for word, space in parts)
    keep = embedder.LOCAL_QUERY_WORDPIECES
    tokenizer = embedder._local().query_tokenizer(keep)
    assert embedder.query_encoding(text, keep, tokenizer).ids == tokenizer.encode(text).ids


@pytest.mark.parametrize(
    "bad, says",
    [
        ([], "empty"),
        ([0.1] * 4001, "over 4000 dimensions"),
        ([1e6] * 384, "not a number within ±65504"),  # past what a halfvec holds
    ],
)
def test_vectors_an_endpoint_sends_that_no_memory_can_hold_store_none_and_say_why(owner, memory_llm, bad, says):
    """The pass writes a batch's vectors in one statement: a vector no memory can hold fails the
    batch with the endpoint's fault named (never a database error that stops the pass: it was), the
    next pass stores them all, and a memory whose text changed after it was read keeps no vector of
    the old text."""
    from memory.story.report import PassReport
    from tests.support.fake_llm import Reply

    adventure = story_create(owner_id=owner.pk, title="T", opening="Dawn.")
    branch = Branch.objects.get(adventure=adventure)
    memories = [
        Memory.objects.create(adventure=adventure, branch=branch, depth=1, text=f"Memory {n} of the harbor.")
        for n in range(3)
    ]
    data = [{"object": "embedding", "index": i, "embedding": bad} for i in range(3)]
    memory_llm.queue(Reply(body={"object": "list", "data": data, "model": "fake-embed"}, when=lambda b: "input" in b))
    report = PassReport()
    embeddings.embed_pending(adventure=adventure, report=report)
    assert report.embedded == 0 and says in " ".join(report.errors), report.errors
    assert not Memory.objects.filter(adventure=adventure, embedding__isnull=False).exists()

    report = PassReport()
    embeddings.embed_pending(adventure=adventure, report=report)
    assert report.embedded == 3 and not report.errors
    assert Memory.objects.filter(adventure=adventure, embedding_model="fake-embed").count() == 3

    Memory.objects.filter(adventure=adventure).update(embedding=None, embedding_model="")
    Memory.objects.filter(pk=memories[1].pk).update(text="Rewritten meanwhile.")
    model, vectors = embedder.embed(user_id=owner.pk, texts=[m.text for m in memories])
    stored = embeddings.vectors_set([(m.pk, m.text, v) for m, v in zip(memories, vectors)], model=model)
    assert stored == 2
    assert list(
        Memory.objects.filter(adventure=adventure, embedding__isnull=False).order_by("pk").values_list("pk", flat=True)
    ) == [memories[0].pk, memories[2].pk]


@pytest.mark.parametrize("bad", [[], [1e6] * 384, [0.1] * 4001, ["x"] * 384])
def test_a_query_vector_no_memory_can_be_ranked_by_falls_back_to_pins_and_says_so(owner, memory_llm, bad):
    """The turn's query embedding from the player's endpoint: a vector no memory can be ranked by
    (empty, past a halfvec's numbers, too long, not numbers) is the endpoint's fault, told as recall
    falling back to pinned memories; never a failed turn."""
    from tests.conftest import api_client_for
    from tests.support.fake_llm import Reply

    api = api_client_for(owner)
    aid = api.post("/api/adventures/", {"title": "T", "opening": "Dawn."}, format="json").json()["id"]
    adventure = owner.adventures.get(pk=aid)
    Memory.objects.create(adventure=adventure, branch_id=adventure.head_branch_id, depth=1, text="PIN-Q", pinned=True)
    data = [{"object": "embedding", "index": 0, "embedding": bad}]
    memory_llm.queue(Reply(body={"object": "list", "data": data, "model": "fake-embed"}, when=lambda b: "input" in b))
    answer = api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "look"}, format="json")
    assert answer.status_code == 201, answer.content
    assert "only pinned memories were used" in answer.json()["recall_note"]
    assert [m["text"] for m in answer.json()["memories"]] == ["PIN-Q"]
