"""What the AI is told is what is true now: hidden content leaves exports and
the owner's reads, takes report their real count, pinned memories are always
sent, and a recall that could not embed its query says so."""

import pytest

from memory import embedder, embeddings
from memory.models import Memory
from stories import moderation
from stories.models import Action

pytestmark = pytest.mark.django_db


@pytest.fixture
def story_id(alice_plays, fake_llm):
    aid = alice_plays.post("/api/adventures/", {"title": "Harbor", "opening": "You arrive."}, format="json").json()[
        "id"
    ]
    for text in ("look around", "SECRET-WORDS here", "walk on"):
        assert (
            alice_plays.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": text}, format="json").status_code
            == 201
        )
    return aid


def test_a_hidden_action_leaves_the_export_and_stays_hidden_after_import(alice_plays, story_id):
    hidden = Action.objects.get(text="SECRET-WORDS here")
    moderation.action_set_hidden(action_id=hidden.pk, hidden=True)
    exported = alice_plays.get(f"/api/adventures/{story_id}/export/").json()
    assert "SECRET-WORDS" not in str(exported)
    placeholder = [a for a in exported["actions"] if a.get("hidden")]
    assert len(placeholder) == 1 and placeholder[0]["text"] == "" and placeholder[0]["depth"] == hidden.depth
    imported = alice_plays.post("/api/adventures/import/", exported, format="json")
    assert imported.status_code == 202, imported.json()
    story = alice_plays.get(f"/api/adventures/{imported.json()['adventure_id']}/story/").json()["actions"]
    assert [a["text"] for a in story] == [
        a["text"] for a in alice_plays.get(f"/api/adventures/{story_id}/story/").json()["actions"]
    ]
    assert Action.objects.filter(adventure_id=imported.json()["adventure_id"], hidden=True, text="").count() == 1


def test_the_owner_cannot_read_or_change_a_hidden_action(alice_plays, story_id):
    hidden = Action.objects.get(text="SECRET-WORDS here")
    moderation.action_set_hidden(action_id=hidden.pk, hidden=True)
    url = f"/api/adventures/{story_id}/actions/{hidden.pk}/"
    for response in (
        alice_plays.get(url),
        alice_plays.patch(url, {"text": "unhidden?"}, format="json"),
        alice_plays.get(url + "takes/"),
    ):
        assert response.status_code == 404 and "SECRET" not in response.content.decode()
    assert Action.objects.get(pk=hidden.pk).text == "SECRET-WORDS here"


def test_the_takes_list_reports_each_takes_real_count(alice_plays, story_id):
    for _ in range(2):
        assert alice_plays.post(f"/api/adventures/{story_id}/retry/").status_code == 201
    last = alice_plays.get(f"/api/adventures/{story_id}/story/").json()["actions"][-1]
    takes = alice_plays.get(f"/api/adventures/{story_id}/actions/{last['id']}/takes/").json()["takes"]
    assert len(takes) == 3 and [t["take_count"] for t in takes] == [3, 3, 3]
    assert last["take_count"] == 3


def test_every_pin_is_sent_even_past_top_k_and_at_top_k_zero(alice_plays, story_id, fake_llm):
    from stories.accounts import ai_settings

    adventure_branch = Action.objects.filter(adventure_id=story_id).first().branch
    for n in range(4):
        Memory.objects.create(
            adventure_id=story_id, branch=adventure_branch, depth=1, text=f"PIN-{n} matters", pinned=True
        )
    Memory.objects.create(adventure_id=story_id, branch=adventure_branch, depth=1, text="UNPINNED note")
    for top_k, unpinned in ((2, False), (0, False)):
        ai_settings.ai_settings_update(user_id=alice_plays.user.pk, memory_top_k=top_k)
        answer = alice_plays.post(
            f"/api/adventures/{story_id}/turns/", {"mode": "do", "text": "think"}, format="json"
        ).json()
        prompt = str(fake_llm.chat_requests()[-1].body["messages"])
        assert all(f"PIN-{n} matters" in prompt for n in range(4)), top_k
        assert ("UNPINNED" in prompt) is unpinned
        assert sorted(m["text"] for m in answer["memories"]) == [f"PIN-{n} matters" for n in range(4)]


def test_pins_count_toward_top_k(alice_plays, story_id, fake_llm):
    from stories.accounts import ai_settings

    branch = Action.objects.filter(adventure_id=story_id).first().branch
    Memory.objects.create(adventure_id=story_id, branch=branch, depth=1, text="PIN-A matters", pinned=True)
    for n in range(3):
        memory = Memory.objects.create(adventure_id=story_id, branch=branch, depth=1, text=f"plain memory {n}")
        model, (vector,) = embedder.embed(user_id=alice_plays.user.pk, texts=[memory.text])
        assert embeddings.vector_set(memory_id=memory.pk, expected_text=memory.text, vector=vector, model=model)
    ai_settings.ai_settings_update(user_id=alice_plays.user.pk, memory_top_k=2)
    answer = alice_plays.post(
        f"/api/adventures/{story_id}/turns/", {"mode": "do", "text": "think"}, format="json"
    ).json()
    assert [m["text"] for m in answer["memories"]][:1] == ["PIN-A matters"] and len(answer["memories"]) == 2


def test_a_failed_query_embedding_says_recall_fell_back_to_pins(alice_plays, story_id, fake_llm):
    from stories.accounts import ai_settings
    from tests.support.fake_llm import Reply

    ai_settings.ai_settings_update(user_id=alice_plays.user.pk, embedding_model="fake-embed")
    branch = Action.objects.filter(adventure_id=story_id).first().branch
    Memory.objects.create(adventure_id=story_id, branch=branch, depth=1, text="PIN-B matters", pinned=True)
    fake_llm.queue(Reply(status=401, when=lambda body: "input" in body))
    answer = alice_plays.post(
        f"/api/adventures/{story_id}/turns/", {"mode": "do", "text": "think"}, format="json"
    ).json()
    assert "only pinned memories were used" in answer["recall_note"]
    assert "embedding model failed" in answer["recall_note"] and "sk-" not in answer["recall_note"]
    assert answer["context"]["recall_note"] == answer["recall_note"]
    assert [m["text"] for m in answer["memories"]] == ["PIN-B matters"]
    fake_llm.queue(Reply(status=401, when=lambda body: "input" in body))
    insights = alice_plays.get(f"/api/adventures/{story_id}/insights/").json()
    assert "only pinned memories were used" in insights["recall_note"]
    healthy = alice_plays.post(
        f"/api/adventures/{story_id}/turns/", {"mode": "do", "text": "think"}, format="json"
    ).json()
    assert healthy["recall_note"] == ""


def block_memory(api, story_id, branch):
    """A memory of actions 1-6, embedded with the owner's model (so recall ranks it)."""
    memory = Memory.objects.create(
        adventure_id=story_id,
        branch=branch,
        depth=6,
        source_start=1,
        source_end=6,
        text="BLOCK-MEMORY: the harbor, a secret, a walk",
    )
    model, (vector,) = embedder.embed(user_id=api.user.pk, texts=[memory.text])
    assert embeddings.vector_set(memory_id=memory.pk, expected_text=memory.text, vector=vector, model=model)
    return memory


def test_memories_of_a_story_already_in_the_prompt_word_for_word_are_not_sent(alice_plays, story_id, fake_llm):

    branch = Action.objects.filter(adventure_id=story_id).first().branch
    block_memory(alice_plays, story_id, branch)
    Memory.objects.create(adventure_id=story_id, branch=branch, depth=1, text="PINNED-C always", pinned=True)
    answer = alice_plays.post(
        f"/api/adventures/{story_id}/turns/", {"mode": "do", "text": "rest"}, format="json"
    ).json()
    prompt = str(fake_llm.chat_requests()[-1].body["messages"])
    assert "BLOCK-MEMORY" not in prompt and "PINNED-C always" in prompt
    assert "SECRET-WORDS here" in prompt, "the block's own words are there"
    assert "word for word" in next(p for p in answer["context"]["parts"] if p["name"] == "story")["reason"]
    assert [m["text"] for m in answer["memories"]] == ["PINNED-C always"], "the answer lists what was sent"


def test_memories_stand_in_for_the_story_the_prompt_has_no_room_for(alice_plays, story_id, fake_llm):
    from stories.accounts import ai_settings

    branch = Action.objects.filter(adventure_id=story_id).first().branch
    block_memory(alice_plays, story_id, branch)
    for n in range(12):
        alice_plays.post(
            f"/api/adventures/{story_id}/turns/", {"mode": "do", "text": f"wander far {n} " + "x " * 40}, format="json"
        )
    ai_settings.ai_settings_update(user_id=alice_plays.user.pk, context_tokens=400, memory_top_k=5)
    alice_plays.post(f"/api/adventures/{story_id}/turns/", {"mode": "do", "text": "remember"}, format="json")
    request = fake_llm.chat_requests()[-1].body
    prompt = str(request["messages"])
    assert "SECRET-WORDS here" not in prompt and "BLOCK-MEMORY" in prompt, prompt[:3000]
