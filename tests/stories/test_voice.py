"""The player's voice: an action typed in the first person, as AI Dungeon players type it, is told to
the model, in the exports and in memories in the second person ("I lift my lantern" is "You lift your
lantern"); the page keeps what the player typed."""

import pytest

from memory.story import memory_pass
from stories.adventures import story_create
from stories.models import Action
from stories.prompt import voice
from stories.tree import writes
from tests.support.story import is_memory_request

# (typed, told to the model after "> ")
DO_TABLE = [
    (
        "I lift my lantern and look at the dark wayside lantern ahead",
        "You lift your lantern and look at the dark wayside lantern ahead",
    ),
    ("i open the door", "You open the door"),
    ("I'm tired, so I sit down.", "You're tired, so you sit down."),
    ("I’m sure I’d know her anywhere", "You’re sure you’d know her anywhere"),
    ("I've got to hide myself in the old mine", "You've got to hide yourself in the old mine"),
    ("I'll wait. Then I run.", "You'll wait. Then you run."),
    ("I am the heir and I was right", "You are the heir and you were right"),
    ("ask Ingrid whether I was wrong", "You ask Ingrid whether you were wrong"),
    ("give Ingrid my map; she thanks me", "You give Ingrid your map; she thanks you"),
    ("walk with Ivo, and I lead us to the mine shaft", "You walk with Ivo, and you lead us to the mine shaft"),
    ('say "I am here, give me my sword" and wait', 'You say "I am here, give me my sword" and wait'),
    ("tell him “I never lied to you” and leave", "You tell him “I never lied to you” and leave"),
    ("point at the blade. That sword is mine.", "You point at the blade. That sword is yours."),
    ("Look around", "You look around"),
    ("you draw your sword", "You draw your sword"),
    ("draw your sword", "You draw your sword"),
    ("sign the I.O.U. with my name", "You sign the I.O.U. with your name"),
    ("ask Ian about my father", "You ask Ian about your father"),
]


@pytest.mark.parametrize("typed,told", DO_TABLE)
def test_a_do_action_in_the_first_person_is_told_in_the_second(typed, told):
    action = Action(kind=Action.Kind.DO, text=typed)
    assert voice.told(action) == f"> {told}"


@pytest.mark.parametrize(
    "typed,said",
    [("I am here", '> You say "I am here"'), ('"Give me my sword!"', '> You say "Give me my sword!"')],
)
def test_what_the_player_says_keeps_its_own_i(typed, said):
    assert voice.told(Action(kind=Action.Kind.SAY, text=typed)) == said


def test_narration_is_told_as_written():
    text = "I am the wind, the old narrator said; my tale is mine."
    assert voice.told(Action(kind=Action.Kind.STORY, text=text)) == text


@pytest.mark.parametrize(
    "typed,memory",
    [
        ("I lift my lantern", "Mira chose to lift your lantern."),
        ("I'm going to hide myself", "You're going to hide yourself"),
        ("you draw your sword.", "Mira chose to draw your sword."),
    ],
)
def test_a_memory_reads_the_act_as_the_protagonists(typed, memory):
    assert voice.told_of(Action(kind=Action.Kind.DO, text=typed), name="Mira") == memory


@pytest.mark.django_db
def test_a_first_person_turn_reaches_the_model_the_exports_and_the_memories_in_the_second(
    alice, alice_plays, fake_llm, settings
):
    api = alice_plays
    created = api.post("/api/adventures/", {"title": "Wayside", "opening": "Night on the road."}, format="json")
    aid = created.json()["id"]
    typed = "I lift my lantern and look at the dark wayside lantern ahead"
    turn = api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": typed}, format="json")
    assert turn.status_code == 201, turn.content

    prompt = "\n".join(m["content"] for m in fake_llm.chat_requests()[-1].body["messages"])
    assert "> You lift your lantern and look at the dark wayside lantern ahead" in prompt
    assert "You I " not in prompt and "my lantern" not in prompt

    story = api.get(f"/api/adventures/{aid}/story/").json()
    assert typed in [a["text"] for a in story["actions"]], "the page keeps what the player typed"

    for kind in ("text", "markdown"):
        answer = api.get(f"/api/adventures/{aid}/story/export/", {"type": kind})
        export = b"".join(answer.streaming_content).decode()
        assert "You lift your lantern" in export and "You I " not in export and "my lantern" not in export, kind

    # the memory writer reads the act in the second person too (it turns "you" into the protagonist)
    adventure = story_create(owner_id=alice.pk, title="Road", opening="Night.", persona_name="Mira")
    for n in range(8):
        writes.place(
            adventure_id=adventure.pk, branch_id=adventure.head_branch_id, kind="do", text=f"I lift my lantern {n}"
        )
        writes.place(
            adventure_id=adventure.pk, branch_id=adventure.head_branch_id, kind="story", text=f"The road bends {n}."
        )
    from tests.support.story import memory_reply

    fake_llm.reply = memory_reply
    from stories.accounts import ai_settings

    ai_settings.ai_settings_update(user_id=alice.pk, embedding_model="fake-embed")
    memory_pass.run(adventure.pk)
    passages = [r.body["messages"][-1]["content"] for r in fake_llm.chat_requests() if is_memory_request(r)]
    assert passages, "the pass asked for a memory"
    assert all("my lantern" not in p and "lift your lantern" in p for p in passages), passages[0]
