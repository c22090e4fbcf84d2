"""Characters who remember: each character of the cast keeps its own memory of the scenes it was in,
the prompt says who knows what, and those memories follow undo, forks, edits, export and import."""

import json
import re

import pytest

from memory.models import Cursor, Memory
from memory.story import memory_pass
from memory.story.steps import eviction
from stories.models import Adventure, Branch
from tests.support.story import memory_reply

pytestmark = pytest.mark.django_db

# The narrator's replies, in order: Bram leaves (depth 5); Aria hides the crown in front of Cora (depth 9).
NARRATION = [
    "Bram grumbles about the cold and stamps his boots.",  # 3
    "Bram says he must ride to the harbor before dark. Bram leaves the hall.",  # 5
    "Aria lifts the old crown from the altar and turns it in the firelight.",  # 7
    "Aria hides the crown beneath the altar stone while Cora watches.",  # 9
    "Cora promises Aria to keep the secret of the altar stone.",  # 11
    "The fire burns low and the wind howls over the roof.",  # 13
    "Bram returns, shaking snow from his cloak.",  # 15
]
PLAYER = [
    ("say", "Good evening, friends."),  # 2
    ("do", "ask where he is going"),  # 4
    ("do", "watch the door close"),  # 6
    ("do", "stay silent"),  # 8
    ("do", "nod slowly"),  # 10
    ("do", "warm your hands by the fire"),  # 12
    ("do", "look toward the door"),  # 14
]
HIDING = "hides the crown"


@pytest.fixture
def narrator(memory_llm):
    """The fake model: the story's narrator from NARRATION, the memory writers as in every memory test."""
    told = iter(NARRATION)

    def reply(body, n):
        if body["messages"][0]["content"].startswith("You are the narrator"):
            return next(told, "The night goes on.")
        return memory_reply(body, n)

    memory_llm.reply = reply
    return memory_llm


@pytest.fixture
def hall(owner, narrator, alice_api):
    """An adventure in the hall of Tarn with Bram, Aria and Cora in the cast, played to depth 13 and
    remembered (blocks 1-6 and 7-12)."""
    made = alice_api.post(
        "/api/adventures/",
        {
            "title": "The Crown of Tarn",
            "persona_name": "Mira",
            "persona_pronouns": "she/her",
            "opening": "The great hall of Tarn is cold. Bram, Aria and Cora wait by the hearth.",
        },
        format="json",
    )
    assert made.status_code == 201, made.json()
    aid = made.json()["id"]
    cards = {}
    for name in ("Bram", "Aria", "Cora"):
        card = alice_api.post(
            f"/api/adventures/{aid}/cards/",
            {"type": "character", "name": name, "entry": f"{name} of Tarn."},
            format="json",
        )
        assert card.status_code == 201, card.json()
        assert card.json()["in_cast"] is True, "a character card joins the cast by default"
        cards[name] = card.json()["id"]
    for mode, text in PLAYER[:6]:
        turn = alice_api.post(f"/api/adventures/{aid}/turns/", {"mode": mode, "text": text}, format="json")
        assert turn.status_code == 201, turn.json()
    memory_pass.run(aid)
    return aid, cards


def knows(alice_api, aid, card_id):
    listed = alice_api.get(f"/api/adventures/{aid}/memories/?character={card_id}")
    assert listed.status_code == 200, listed.json()
    return [m["text"] for m in listed.json()]


def prompt_part(request, name):
    prompt = "\n\n".join(m["content"] for m in request.body["messages"])
    header = f"[What {name} knows]"
    if header not in prompt:
        return None
    return prompt.split(header, 1)[1].split("\n\n", 1)[0]


def test_an_absent_character_is_not_told_what_happened_while_a_witness_is(hall, alice_api, narrator):
    aid, cards = hall
    assert any(HIDING in text for text in knows(alice_api, aid, cards["Cora"])), "Cora saw the crown hidden"
    assert any(HIDING in text for text in knows(alice_api, aid, cards["Aria"])), "Aria hid it"
    bram = knows(alice_api, aid, cards["Bram"])
    assert bram and not any(HIDING in text or "altar" in text for text in bram), bram
    assert any("harbor" in text for text in bram), "Bram remembers his own leaving"
    own = [m["text"] for m in alice_api.get(f"/api/adventures/{aid}/memories/").json()]
    assert len(own) == 2 and not any(m in own for m in knows(alice_api, aid, cards["Cora"])), (
        "the adventure's own bank holds only its own memories"
    )

    mode, text = PLAYER[6]
    assert (
        alice_api.post(f"/api/adventures/{aid}/turns/", {"mode": mode, "text": text}, format="json").status_code == 201
    )  # Bram returns
    turn = alice_api.post(
        f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "ask Bram and Cora about the crown"}, format="json"
    )
    assert turn.status_code == 201, turn.json()
    asked = narrator.chat_requests()[-1]
    bram_part, cora_part = prompt_part(asked, "Bram"), prompt_part(asked, "Cora")
    assert bram_part is not None and "harbor" in bram_part and HIDING not in bram_part
    assert cora_part is not None and HIDING in cora_part
    assert prompt_part(asked, "Aria") is None, "Aria is not named in the recent story"
    assert "Each character knows only what the story showed them" in asked.body["messages"][-1]["content"]
    parts = {p["name"]: p for p in turn.json()["context"]["parts"]}
    assert "knows" in parts
    insights = alice_api.get(f"/api/adventures/{aid}/insights/").json()
    reasons = [p["reason"] for p in insights["parts"] if p["name"] == "knows"]
    assert any(r.startswith("What Bram knows") for r in reasons) and any(
        r.startswith("What Cora knows") for r in reasons
    )


def test_undo_withdraws_the_hiding_from_every_memory_and_a_fork_before_it_never_had_it(hall, alice_api):
    aid, cards = hall
    main = Branch.objects.get(pk=alice_api.get(f"/api/adventures/{aid}/").json()["head_branch"])
    story = alice_api.get(f"/api/adventures/{aid}/story/").json()
    at_8 = next(a for a in story["actions"] if a["depth"] == 8)
    fork = alice_api.post(f"/api/adventures/{aid}/actions/{at_8['id']}/fork/", {"name": "before"}, format="json")
    assert fork.status_code == 201, fork.json()
    memory_pass.run(aid)
    assert not any(HIDING in t for t in knows(alice_api, aid, cards["Cora"])), "the fork never saw the hiding"
    assert not any(HIDING in t for t in knows(alice_api, aid, cards["Aria"]))

    alice_api.post(f"/api/adventures/{aid}/branches/{main.pk}/checkout/")
    assert any(HIDING in t for t in knows(alice_api, aid, cards["Cora"])), "the main line still holds it"
    while alice_api.get(f"/api/adventures/{aid}/").json()["head_depth"] > 8:
        assert alice_api.post(f"/api/adventures/{aid}/undo/").status_code == 200
    for name in ("Aria", "Cora"):
        assert not any(HIDING in t for t in knows(alice_api, aid, cards[name])), name
    assert not Memory.objects.filter(adventure_id=aid, branch=main, text__contains=HIDING).exists()


def test_a_block_written_again_writes_no_character_memory_twice_and_keeps_the_players_edit(hall, alice_api):
    aid, cards = hall
    edited = Memory.objects.get(adventure_id=aid, character_id=cards["Cora"], source_start=7)
    response = alice_api.patch(
        f"/api/adventures/{aid}/memories/{edited.pk}/",
        {"text": "Cora swore on her mother to keep the altar's secret."},
        format="json",
    )
    assert response.status_code == 200 and response.json()["edited"] is True
    # the player deletes the block's own memory and the pass writes the block again
    own = Memory.objects.get(adventure_id=aid, character__isnull=True, source_start=7)
    assert alice_api.delete(f"/api/adventures/{aid}/memories/{own.pk}/").status_code == 204
    Cursor.objects.filter(adventure_id=aid).update(memory_depth=0, memory_branch=None)
    memory_pass.run(aid)
    rows = list(Memory.objects.filter(adventure_id=aid, source_start=7).values_list("character_id", "text"))
    holders = [holder for holder, _ in rows]
    assert sorted(holders, key=lambda h: h or 0) == [None, cards["Aria"], cards["Cora"]], rows
    assert dict(rows)[cards["Cora"]] == "Cora swore on her mother to keep the altar's secret."


def test_editing_an_action_rewrites_who_was_there(hall, alice_api):
    """An edit that brings Bram back to watch the hiding gives Bram a memory of it (a character who
    left comes back when the story says so); the other characters' memories of the block are written
    again from the edited text."""
    aid, cards = hall
    story = alice_api.get(f"/api/adventures/{aid}/story/").json()
    hiding = next(a for a in story["actions"] if a["depth"] == 9)
    assert not any(HIDING in t for t in knows(alice_api, aid, cards["Bram"]))
    edited = alice_api.patch(
        f"/api/adventures/{aid}/actions/{hiding['id']}/",
        {"text": "Bram comes back in. Aria hides the crown beneath the altar stone while Bram watches from the door."},
        format="json",
    )
    assert edited.status_code == 200, edited.json()
    before = {m["id"]: m for m in alice_api.get(f"/api/adventures/{aid}/memories/?character={cards['Cora']}").json()}
    assert [m["stale"] for m in before.values() if m["source_start"] == 7] == [True]
    memory_pass.run(aid)
    assert any(HIDING in t for t in knows(alice_api, aid, cards["Bram"])), "Bram saw it in the edited story"
    cora = Memory.objects.get(adventure_id=aid, character_id=cards["Cora"], source_start=7)
    assert not cora.stale and "while Cora watches" not in cora.text


def test_export_and_import_carry_every_characters_memories_with_the_players_pins_and_edits(hall, alice_api, narrator):
    aid, cards = hall
    cora = Memory.objects.get(adventure_id=aid, character_id=cards["Cora"], source_start=7)
    alice_api.patch(f"/api/adventures/{aid}/memories/{cora.pk}/", {"pinned": True}, format="json")
    bram = Memory.objects.get(adventure_id=aid, character_id=cards["Bram"], source_start=1)
    alice_api.patch(
        f"/api/adventures/{aid}/memories/{bram.pk}/", {"text": "Bram rode for the harbor at dusk."}, format="json"
    )
    alice_api.patch(f"/api/adventures/{aid}/cards/{cards['Aria']}/", {"in_cast": False}, format="json")
    exported = alice_api.get(f"/api/adventures/{aid}/export/").json()
    assert len(exported["memories"]) == 7  # two blocks: the adventure's own, and 3 + 2 characters'

    imported = alice_api.post("/api/adventures/import/", exported, format="json")
    assert imported.status_code == 202, imported.json()
    new = imported.json()["adventure_id"]
    cast = {m["name"]: m for m in alice_api.get(f"/api/adventures/{new}/cast/").json()}
    assert cast["Mira"]["protagonist"] and cast["Aria"]["in_cast"] is False
    assert (cast["Bram"]["memories"], cast["Aria"]["memories"], cast["Cora"]["memories"]) == (1, 2, 2)
    new_cora = alice_api.get(f"/api/adventures/{new}/memories/?character={cast['Cora']['character']}").json()
    assert any(m["pinned"] and HIDING in m["text"] for m in new_cora)
    new_bram = alice_api.get(f"/api/adventures/{new}/memories/?character={cast['Bram']['character']}").json()
    assert [(m["text"], m["edited"]) for m in new_bram] == [("Bram rode for the harbor at dusk.", True)]
    calls = len(narrator.chat_requests())
    memory_pass.run(new)
    assert not [r for r in narrator.chat_requests()[calls:] if r.path.endswith("/chat/completions")], (
        "the carried blocks are not written again"
    )
    assert Memory.objects.filter(adventure_id=new, embedding__isnull=True).count() == 0, "the pass embeds them"


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda m: m.update(character=99), "'character' must be the place of a character card"),
        (lambda m: m.update(branch=12345), "known 'branch'"),
        (lambda m: m.update(kind="gossip"), '].kind: "gossip" is not a valid choice'),
        (lambda m: m.update(importance=3), "].importance: must be a number from 0 to 1"),
        (lambda m: m.update(text=""), "].text: must be 1 to"),
    ],
)
def test_an_import_with_a_bad_memory_is_refused_whole_with_what_to_fix(hall, alice_api, change, message):
    aid, _ = hall
    exported = alice_api.get(f"/api/adventures/{aid}/export/").json()
    change(exported["memories"][-1])
    before = alice_api.get("/api/adventures/").json()
    refused = alice_api.post("/api/adventures/import/", exported, format="json")
    assert refused.status_code == 400 and message in str(refused.json()), refused.json()
    assert alice_api.get("/api/adventures/").json() == before, "nothing of the import was stored"


def test_the_memory_api_lists_writes_and_refuses_characters_per_character(hall, alice_api, bob_api):
    aid, cards = hall
    written = alice_api.post(
        f"/api/adventures/{aid}/memories/",
        {"text": "Cora fears the dark crypt.", "character": cards["Cora"]},
        format="json",
    )
    assert written.status_code == 201 and written.json()["character"] == cards["Cora"]
    assert written.json()["kind"] == "note"
    assert "Cora fears the dark crypt." in knows(alice_api, aid, cards["Cora"])
    own = [m["text"] for m in alice_api.get(f"/api/adventures/{aid}/memories/").json()]
    assert "Cora fears the dark crypt." not in own
    place = alice_api.post(f"/api/adventures/{aid}/cards/", {"type": "place", "name": "Tarn"}, format="json").json()
    for bad, status in ((place["id"], 404), (999999, 404), (10**30, 404), (-4943554083, 404), ("bram", 400)):
        answer = alice_api.get(f"/api/adventures/{aid}/memories/?character={bad}")
        assert answer.status_code == status and "character" in answer.json()["detail"], answer.json()
    refused = alice_api.post(f"/api/adventures/{aid}/memories/", {"text": "x", "character": place["id"]}, format="json")
    assert refused.status_code == 404 and "not a character card" in refused.json()["detail"]
    assert bob_api.get(f"/api/adventures/{aid}/cast/").status_code == 404
    assert bob_api.get(f"/api/adventures/{aid}/memories/?character={cards['Cora']}").status_code == 404


def test_one_model_call_reads_the_scene_and_writes_every_characters_memory_of_a_block(hall, narrator):
    calls = [
        r
        for r in narrator.chat_requests()
        if r.body["messages"][0]["content"].startswith("You keep the memories of each character")
    ]
    assert len(calls) == 2, "blocks 1-6 and 7-12, one call each"
    first = calls[0].body["messages"][-1]["content"]
    assert "The cast: Bram, Aria, Cora" in first
    assert "1. The great hall of Tarn is cold." in first and "7. Bram leaves the hall." in first
    assert "present" in calls[0].body["messages"][0]["content"], "the model is asked who perceives each sentence"


def _scene_writer(narrator, answer):
    """The narrator's model answers the cast's call with ``answer(numbered sentences, cast)``."""

    def reply(body, n):
        if not body["messages"][0]["content"].startswith("You keep the memories of each character"):
            return memory_reply(body, n)
        user = body["messages"][-1]["content"]
        cast = user.split("The cast: ", 1)[1].split("\n", 1)[0].split(", ")
        numbered = re.findall(r"^(\d+)\. (.*)$", user.split("The passage:\n", 1)[1], re.M)
        return answer([(int(k), text) for k, text in numbered], cast)

    narrator.reply = reply


def test_the_models_reading_of_the_scene_decides_who_remembers_what(owner, narrator, alice_api):
    """The model says Cora overheard the plan from the stairs (the offline reading has her gone) and
    that Bram, in the room, was asleep for it: Cora's memory holds it, written by the model; Bram has none."""

    def answer(numbered, cast):
        plan = [k for k, text in numbered if "the plan" in text]
        scene = [{"sentence": k, "present": ["Cora"] if k in plan else ["Bram"]} for k, _ in numbered]
        return json.dumps(
            {"scene": scene, "memories": [{"character": "Cora", "kind": "heard", "text": "Cora overheard the plan."}]}
        )

    _scene_writer(narrator, answer)
    aid = _played(alice_api, ["Cora goes upstairs.", "Aria tells you the plan: the vault opens at midnight."])
    cora = Memory.objects.filter(adventure_id=aid, character__name="Cora", source_start=1)
    assert [m.text for m in cora] == ["Cora overheard the plan."] and not cora[0].offline
    bram = " ".join(Memory.objects.filter(adventure_id=aid, character__name="Bram").values_list("text", flat=True))
    assert "vault" not in bram


@pytest.mark.parametrize(
    "answer",
    [
        lambda numbered, cast: json.dumps({"memories": [{"character": "Cora", "text": "Cora saw it all."}]}),
        lambda numbered, cast: json.dumps({"scene": [{"sentence": 1, "present": cast}], "memories": []}),
        lambda numbered, cast: json.dumps({"scene": [{"sentence": "one", "present": "Cora"}], "memories": []}),
    ],
    ids=["no scene", "sentences missing", "wrong types"],
)
def test_a_scene_answer_that_is_missing_or_garbled_falls_back_to_the_offline_reading(
    owner, narrator, alice_api, answer
):
    _scene_writer(narrator, answer)
    aid = _played(alice_api, ["Cora goes upstairs.", "Aria tells you the plan: the vault opens at midnight."])
    cora = " ".join(Memory.objects.filter(adventure_id=aid, character__name="Cora").values_list("text", flat=True))
    aria = Memory.objects.filter(adventure_id=aid, character__name="Aria", source_start=1)
    assert "Cora saw it all" not in cora and "vault" not in cora, "the offline reading: Cora left"
    assert aria and all(m.offline for m in aria) and "vault opens at midnight" in " ".join(m.text for m in aria)


def _played(alice_api, replies):
    """An adventure in the hall with Bram, Aria and Cora, its first block's replies ``replies``, remembered."""
    from stories.models import Action

    made = alice_api.post(
        "/api/adventures/",
        {"title": "T", "opening": "Bram, Aria and Cora sit in the hall.", "persona_name": "Mira"},
        format="json",
    ).json()
    for name in ("Bram", "Aria", "Cora"):
        alice_api.post(f"/api/adventures/{made['id']}/cards/", {"type": "character", "name": name}, format="json")
    for text in ["listen", "wait", "nod", "wait", "nod", "wait"]:
        assert (
            alice_api.post(
                f"/api/adventures/{made['id']}/turns/", {"mode": "do", "text": text}, format="json"
            ).status_code
            == 201
        )
    for depth, text in zip((3, 5), replies):
        Action.objects.filter(adventure_id=made["id"], depth=depth, live=True).update(text=text)
    memory_pass.run(made["id"])
    return made["id"]


def test_a_garbled_answer_is_written_offline_and_flagged(owner, narrator, alice_api):
    narrator.reply = lambda body, n: (
        "I cannot answer in JSON, sorry."
        if body["messages"][0]["content"].startswith("You keep the memories of each character")
        else memory_reply(body, n)
    )
    made = alice_api.post("/api/adventures/", {"title": "T", "opening": "Cora sweeps the hall."}, format="json").json()
    alice_api.post(f"/api/adventures/{made['id']}/cards/", {"type": "character", "name": "Cora"}, format="json")
    from stories.models import Adventure
    from tests.support.story import grow

    grow(Adventure.objects.get(pk=made["id"]), 12)
    memory_pass.run(made["id"])
    cora = Memory.objects.filter(adventure_id=made["id"], character__isnull=False, source_start=1).order_by("part")
    assert cora and all(m.offline for m in cora) and "Cora sweeps the hall." in cora[0].text


def scene(text_by_kind, *names, keys=None):
    """Each named member's part of one block of story ``text_by_kind`` [(kind, text)...]."""
    from memory.story import presence, scene
    from stories.models import Action, StoryCard

    cards = [StoryCard(pk=i + 1, type="character", name=n, keys=(keys or {}).get(n, [])) for i, n in enumerate(names)]
    actions = [Action(kind=k, text=t, depth=i + 1) for i, (k, t) in enumerate(text_by_kind)]
    return {
        w.member.name: " ".join(w.sentences)
        for w in presence.present(cast=scene.members(cards), actions=actions, before=[], name="Mira")
    }


@pytest.mark.parametrize(
    "story, absent, present",
    [
        (
            [("story", "Bram and Cora ride off toward the hills."), ("story", "Aria buries the gold.")],
            {"Bram", "Cora"},
            set(),
        ),
        (
            [("story", "Bram waves and leaves the hall."), ("story", "Aria shows you the ring Bram left behind.")],
            {"Bram"},
            set(),
        ),
        (
            [
                ("story", "Bram leaves for the market."),
                ("story", "Bram returns with bread."),
                ("story", "Aria buries the gold."),
            ],
            set(),
            {"Bram"},
        ),
        (
            [
                ("story", "Aria whispers to Bram."),
                ("do", "leave the hall with Cora"),
                ("story", "Cora buries the gold."),
            ],
            {"Bram"},
            {"Cora"},
        ),
        (
            [("story", "Aria and Bram talk."), ("story", "Aria says the elder's son buries the gold.")],
            {"Rusk"},
            {"Bram"},
        ),
        # the narration opens somewhere else: those left behind do not see what happens there
        (
            [
                ("story", "Bram and Cora sit by the hearth."),
                ("do", "ask Bram for the map"),
                ("story", "Out behind the stables, where nobody can hear, Aria buries the gold."),
            ],
            {"Bram", "Cora"},
            {"Aria"},
        ),
        # the player goes somewhere with a verb no list of "go out" pairs holds
        (
            [
                ("story", "Bram and Cora sit by the hearth."),
                ("do", "go to the kitchen"),
                ("story", "Aria is there, kneading dough. She buries the gold under the flagstones."),
            ],
            {"Bram", "Cora"},
            {"Aria"},
        ),
        # a departure told with a pronoun
        (
            [
                ("story", "Bram sharpens his axe by the fire. He slips out the back door."),
                ("story", "Aria buries the gold."),
            ],
            {"Bram"},
            {"Aria"},
        ),
        # asleep, or behind headphones: present and perceiving nothing
        (
            [
                ("story", "Bram is asleep by the fire, snoring. Cora sits in the corner with her headphones on."),
                ("story", "Aria buries the gold."),
            ],
            {"Bram", "Cora"},
            {"Aria"},
        ),
        # asked about while absent, heard over the intercom: talked about is not present
        (
            [
                ("say", "Aria, where is Bram?"),
                ("story", "Cora's voice crackles over the intercom. Aria shrugs and buries the gold."),
            ],
            {"Bram", "Cora"},
            {"Aria"},
        ),
        # coming out of another room to greet the protagonist is an arrival
        (
            [
                ("story", "Bram leaves for the market."),
                ("story", "Later Bram hurries out of the kitchen to greet you."),
                ("story", "Aria buries the gold."),
            ],
            set(),
            {"Bram", "Aria"},
        ),
        # whispered: only those taking part hear it
        (
            [
                ("story", "Bram and Cora sit by the fire."),
                ("story", "Aria leans close and whispers that she buries the gold."),
            ],
            {"Bram", "Cora"},
            {"Aria"},
        ),
        # who stays behind when the protagonist goes with someone else
        (
            [
                ("story", "Bram and Cora wait in the hall."),
                ("do", "ride to the pier with Cora"),
                ("story", "Bram stays in the hall. At the pier, Cora buries the gold."),
            ],
            {"Bram"},
            {"Cora"},
        ),
    ],
)
def test_who_is_in_the_scene_when_the_gold_is_buried(story, absent, present):
    parts = scene(story, "Aria", "Bram", "Cora", "Rusk", keys={"Rusk": ["the elder"]})
    for name in absent:
        assert "buries the gold" not in parts.get(name, ""), (name, parts)
    for name in present:
        assert "buries the gold" in parts.get(name, ""), (name, parts)


def test_a_moderators_hide_takes_the_hidden_text_out_of_every_characters_part(hall, alice_api):
    from stories import moderation
    from stories.models import Action

    aid, cards = hall

    def cora_part():
        parts = alice_api.get(f"/api/adventures/{aid}/insights/").json()["parts"]
        return " ".join(p["text"] for p in parts if p["name"] == "knows" and p["reason"].startswith("What Cora"))

    assert HIDING in cora_part(), "Cora is named in the recent story and saw the hiding"
    hiding = Action.objects.get(adventure_id=aid, depth=9, live=True)
    moderation.action_set_hidden(action_id=hiding.pk, hidden=True)
    assert HIDING not in cora_part(), "the stale memory leaves the prompt at once"
    memory_pass.run(aid)
    assert not Memory.objects.filter(adventure_id=aid, text__contains=HIDING).exists(), "written again without it"
    assert HIDING not in cora_part()


def test_regenerating_a_characters_memory_writes_it_again_from_its_own_part(hall, alice_api):
    aid, cards = hall
    cora = Memory.objects.get(adventure_id=aid, character_id=cards["Cora"], source_start=7)
    Memory.objects.filter(pk=cora.pk).update(text="garbled")
    again = alice_api.post(f"/api/adventures/{aid}/memories/{cora.pk}/regenerate/")
    assert again.status_code == 200, again.json()
    assert HIDING in again.json()["text"] and again.json()["character"] == cards["Cora"]
    # out of the cast, Cora's memories stay but are not written again
    alice_api.patch(f"/api/adventures/{aid}/cards/{cards['Cora']}/", {"in_cast": False}, format="json")
    refused = alice_api.post(f"/api/adventures/{aid}/memories/{cora.pk}/regenerate/")
    assert refused.status_code == 409 and "Cora" in refused.json()["detail"]
    assert Memory.objects.get(pk=cora.pk).text == again.json()["text"]


def test_what_a_character_knows_is_ranked_for_the_moment_with_pins_first(hall, alice_api, narrator):
    aid, cards = hall
    for text in (
        "Cora mended the torn banner of Tarn.",
        "Cora fed the hounds at dawn.",
        "Cora counted the candles in the chapel.",
        "Cora polished the silver cups for the feast.",
        "Cora found a wolf track by the gate.",
    ):
        alice_api.post(f"/api/adventures/{aid}/memories/", {"text": text, "character": cards["Cora"]}, format="json")
    pinned = alice_api.post(
        f"/api/adventures/{aid}/memories/",
        {"text": "Cora is afraid of the dark crypt.", "character": cards["Cora"]},
        format="json",
    ).json()
    alice_api.patch(f"/api/adventures/{aid}/memories/{pinned['id']}/", {"pinned": True}, format="json")
    memory_pass.run(aid)  # embeds them
    turn = alice_api.post(
        f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "ask Cora where the crown is hidden"}, format="json"
    )
    assert turn.status_code == 201, turn.json()
    part = next(p for p in turn.json()["context"]["parts"] if p["name"] == "knows")
    lines = part["text"].split("[What Cora knows]\n", 1)[1].splitlines()  # (the rule may stand before it)
    assert len(lines) == 4, "the best 4 of Cora's 8 memories"
    assert lines[0] == "- Cora is afraid of the dark crypt.", "pins first"
    assert any(HIDING in line for line in lines[1:3]), lines
    assert all(item["character"] == cards["Cora"] for item in part["items"])


def test_a_name_that_is_also_a_word_counts_only_as_a_name():
    parts = scene([("story", "Aria says you will find the gold buried under the oak.")], "Will", "Aria")
    assert "Will" not in parts and "buried under the oak" in parts["Aria"], parts


def test_each_characters_bank_is_evicted_on_its_own_past_the_capacity(hall, alice_api, alice):
    from stories.accounts import ai_settings

    aid, cards = hall
    ai_settings.ai_settings_update(user_id=alice.pk, memory_bank_capacity=2)
    for n in range(3):
        alice_api.post(
            f"/api/adventures/{aid}/memories/", {"text": f"Cora note {n}.", "character": cards["Cora"]}, format="json"
        )
    report = memory_pass.PassReport()
    eviction.evict(
        adventure=Adventure.objects.get(pk=aid),
        head=Branch.objects.get(pk=Adventure.objects.get(pk=aid).head_branch_id),
        report=report,
    )
    kept = {
        name: Memory.objects.filter(adventure_id=aid, character_id=cards[name], forgotten=False).count()
        for name in cards
    }
    assert report.evicted == 3 and kept == {"Bram": 1, "Aria": 2, "Cora": 2}, (report.evicted, kept)
    assert Memory.objects.filter(adventure_id=aid, character__isnull=True, forgotten=False).count() == 2, (
        "the adventure's own bank is not pushed out by Cora's"
    )


def test_a_character_talked_about_while_elsewhere_learns_nothing_of_the_scene(owner, narrator, alice_api):
    """Through the API: Tobias is asked after and heard over the intercom while the protagonist and
    Maren talk; a sleeper in the room hears nothing; Tobias's and the sleeper's memories of the block
    hold none of what Maren said, Maren's hold all of it."""
    made = alice_api.post(
        "/api/adventures/", {"title": "Night desk", "opening": "The precinct is quiet."}, format="json"
    ).json()
    aid = made["id"]
    cards = {
        name: alice_api.post(
            f"/api/adventures/{aid}/cards/", {"type": "character", "name": name}, format="json"
        ).json()["id"]
        for name in ("Maren", "Tobias", "Oskar")
    }
    for mode, text in [
        ("do", "sit down across from Maren"),
        ("say", "Maren, where is Tobias?"),
        ("do", "look at the old man on the bench"),
        ("say", "Keep your voice down."),
        ("do", "lean in"),
        ("say", "Tell me everything."),
    ]:
        assert (
            alice_api.post(f"/api/adventures/{aid}/turns/", {"mode": mode, "text": text}, format="json").status_code
            == 201
        )
    # the narrator's replies, as a model writes them (set on the stored actions)
    from stories.models import Action

    replies = [
        "Maren shrugs. \"Tobias won't be back until Monday.\" Tobias's voice crackles over the intercom, asking "
        "for the night log.",
        "Oskar is asleep on the bench, snoring softly, his hat over his eyes.",
        "Maren nods and tells you the ledger is hidden behind the boiler in the basement.",
    ]
    for depth, text in zip((3, 7, 11), replies):
        Action.objects.filter(adventure_id=aid, depth=depth, live=True).update(text=text)
    memory_pass.run(aid)

    def remembers(name):
        rows = alice_api.get(f"/api/adventures/{aid}/memories/?character={cards[name]}").json()
        return " ".join(m["text"] for m in rows if m["source_start"] is not None)

    assert "hidden behind the boiler" in remembers("Maren")
    assert "boiler" not in remembers("Tobias") and "boiler" not in remembers("Oskar")


def test_a_card_that_joins_the_cast_later_gains_memories_of_the_blocks_it_was_in(owner, narrator, alice_api):
    """Aria gets her card after two blocks were remembered: the next pass gives her memories of the
    block she was in (the vault), none of the one she had left, and touches no memory the player edited."""
    from stories.models import Action

    made = alice_api.post(
        "/api/adventures/",
        {"title": "T", "opening": "Bram and Aria sit in the hall.", "persona_name": "Mira"},
        format="json",
    ).json()
    aid = made["id"]
    bram = alice_api.post(f"/api/adventures/{aid}/cards/", {"type": "character", "name": "Bram"}, format="json")
    for text in ["listen"] * 6:
        alice_api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": text}, format="json")
    for depth, text in (
        (3, "Aria tells you the vault opens at midnight."),
        (7, "Aria leaves the hall."),
        (9, "Bram shows you the hidden ledger."),
    ):
        Action.objects.filter(adventure_id=aid, depth=depth, live=True).update(text=text)
    memory_pass.run(aid)
    assert Memory.objects.filter(adventure_id=aid, character__isnull=True, source_start__isnull=False).count() == 2
    edited = Memory.objects.filter(adventure_id=aid, character_id=bram.json()["id"], source_start=1).first()
    alice_api.patch(f"/api/adventures/{aid}/memories/{edited.pk}/", {"text": "Bram's own words."}, format="json")

    aria = alice_api.post(f"/api/adventures/{aid}/cards/", {"type": "character", "name": "Aria"}, format="json")
    memory_pass.run(aid)
    rows = alice_api.get(f"/api/adventures/{aid}/memories/?character={aria.json()['id']}").json()
    assert 1 in {m["source_start"] for m in rows}, rows
    assert "vault opens at midnight" in " ".join(m["text"] for m in rows)
    assert "ledger" not in " ".join(m["text"] for m in rows), "she had left"
    assert Memory.objects.get(pk=edited.pk).text == "Bram's own words."
    memory_pass.run(aid)
    assert len(alice_api.get(f"/api/adventures/{aid}/memories/?character={aria.json()['id']}").json()) == len(rows)


READING_CASES = {
    # the narration opens somewhere else: those left in the hall see nothing of it
    "a move told by the narration": (
        "Bram and Cora sit by the hearth in the hall.",
        ["ask Bram for the map", "listen"],
        ["Bram shrugs and stares at the fire.", "Out behind the stables, where nobody can hear, Aria buries the gold."],
        {"Bram", "Cora"},
        {"Aria"},
    ),
    "a departure told with a pronoun": (
        "Bram sharpens his axe by the fire. Aria sits at the table.",
        ["wait", "wait"],
        ["He slips out the back door without a word.", "Aria buries the gold under the hearth."],
        {"Bram"},
        {"Aria"},
    ),
    "a sleeper in the room": (
        "Bram is asleep by the fire, snoring. Aria sits at the table.",
        ["wait", "wait"],
        ["Aria glances at Bram.", "Aria buries the gold under the hearth."],
        {"Bram"},
        {"Aria"},
    ),
    "an arrival out of another room": (
        "Aria waits in the hall.",
        ["call for Bram", "wait"],
        ["Bram hurries out of the kitchen to greet you.", "Aria buries the gold under the hearth."],
        set(),
        {"Bram", "Aria"},
    ),
    "someone found where the protagonist goes": (
        "Cora mends a net in the hall.",
        ["go down to the cellar", "wait"],
        ["Aria buries the gold beneath the flagstones. Bram, sorting bottles in the corner, watches her.", "Dust."],
        {"Cora"},
        {"Aria", "Bram"},
    ),
    "a word said in a loud room": (
        "The tavern is packed and the band is playing. Bram and Cora sit at the bar.",
        ["find Aria", "listen"],
        ["Aria waves from a corner table.", "Aria tells you that she buries the gold under the hearth tonight."],
        {"Bram", "Cora"},
        {"Aria"},
    ),
}


@pytest.mark.parametrize("case", list(READING_CASES))
def test_through_the_api_only_who_perceived_a_scene_remembers_it(case, owner, narrator, alice_api):
    """Each class of the scene reading, played through the API: the narrator's replies are stored as
    the model would write them, the post-turn pass writes the cast's memories, and the memory API
    shows the fact to those in the scene and able to perceive it, and to no one else."""
    from stories.models import Action

    opening, acts, replies, absent, present = READING_CASES[case]
    aid = alice_api.post(
        "/api/adventures/", {"title": case, "opening": opening, "persona_name": "Mira"}, format="json"
    ).json()["id"]
    cards = {
        name: alice_api.post(
            f"/api/adventures/{aid}/cards/", {"type": "character", "name": name}, format="json"
        ).json()["id"]
        for name in ("Aria", "Bram", "Cora")
    }
    for text in [*acts, "wait", "wait", "wait", "wait"]:  # two blocks: the first is remembered
        assert (
            alice_api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": text}, format="json").status_code
            == 201
        )
    for depth, text in zip((3, 5), replies):
        Action.objects.filter(adventure_id=aid, depth=depth, live=True).update(text=text)
    # the player takes their model away: the pass reads the scene and writes the memories offline
    assert alice_api.patch("/api/settings/", {"endpoint_url": "", "api_key": ""}, format="json").status_code == 200
    memory_pass.run(aid)

    def remembers(name):
        rows = alice_api.get(f"/api/adventures/{aid}/memories/?character={cards[name]}").json()
        return " ".join(m["text"] for m in rows)

    for name in present:
        assert "buries the gold" in remembers(name), (name, remembers(name))
    for name in absent:
        assert "buries the gold" not in remembers(name), (name, remembers(name))
