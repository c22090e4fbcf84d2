"""Secrets in a story played together: a player acts privately or whispers to named characters; the
secret and the narrator's answer reach only those it was told to, by every route, in every prompt
and in memory (the leak sweep), and the shared bank, summary and claims are built without it."""

import pytest

from memory.models import Memory
from memory.story import memory_pass
from stories.models import Action
from tests.conftest import api_client_for
from tests.security.test_ownership import all_routes, fill
from tests.stories.test_members import _card, _join_by_name
from tests.support.fake_llm import Reply
from tests.support.story import cast_reply

pytestmark = pytest.mark.django_db

# the queries a route reads, by its last word: each route is asked plain and with each of its own
QUERIES = {
    "insights": ("", "?turn=last"),
    "search": ("?q=stone ring",),
    "export": ("", "?type=markdown"),
    "character": ("", "?file=json"),
    "memories": ("", "?character=%d"),
    "cast": ("", "?character=%d"),
}
BOBS = ("third stone", "owl on its bow")  # bob's whisper to Mira (alice), and the narrator's answer to it
CHARLIES = ("silver ring", "hums with a cold light")  # charlie's private act, and its answer


def _echo(body, n):
    """The fake model: memories and summaries say what they were given (a leak shows), turns go on."""
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    if system.startswith("You write memories"):
        return "Remembered: " + user.split("Passage:\n", 1)[1].replace("\n", " ")
    if system.startswith("You keep the running summary"):
        return "So far: " + user.split("What happened since:\n", 1)[1].replace("\n", " ")[-400:]
    if system.startswith("You keep the memories of each character"):
        return cast_reply(user)
    return f"The story goes on ({n})."


@pytest.fixture
def table(owner, memory_llm, bob_api, charlie):
    """alice's story (she is Mira), bob playing Sela, charlie playing Oric; Bram is of the cast."""
    memory_llm.reply = _echo
    alice = api_client_for(owner)
    aid = alice.post(
        "/api/adventures/",
        {
            "title": "The Ford",
            "opening": "Night over the fortress by the ford.",
            "persona_name": "Mira",
            "cards": [
                {"name": "Sela", "type": "character", "keys": ["Sela"], "entry": "A scout."},
                {"name": "Oric", "type": "character", "keys": ["Oric"], "entry": "A captain."},
                {"name": "Bram", "type": "character", "keys": ["Bram"], "entry": "A smith."},
            ],
        },
        format="json",
    ).json()["id"]
    carol = api_client_for(charlie)
    _join_by_name(alice, bob_api, aid, character={"card": _card(alice, aid, "Sela")})
    _join_by_name(alice, carol, aid, character={"card": _card(alice, aid, "Oric")})
    return {"aid": aid, "alice": alice, "bob": bob_api, "charlie": carol, "llm": memory_llm}


def _turn(t, who, body, *, answer=None):
    """``who`` plays ``body``; the prompts the model was sent for it (turns only, not memory work)."""
    llm = t["llm"]
    if answer:
        llm.queue(Reply(text=answer))  # the turn's call is the next: no memory work runs inside a test's transaction
    before = len(llm.chat_requests())
    played = t[who].post(f"/api/adventures/{t['aid']}/turns/", body, format="json")
    assert played.status_code == 201, played.json()
    prompts = [
        "\n".join(m["content"] for m in r.body["messages"])
        for r in llm.chat_requests()[before:]
        if not r.body["messages"][0]["content"].startswith(("You write memories", "You keep"))
    ]
    assert len(prompts) == 1
    return played.json(), prompts[0]


def _has(text, secret):
    return any(s.lower() in text.lower() for s in secret)


def test_a_whisper_and_a_private_act_reach_only_those_told_by_every_route_prompt_and_memory(table):
    t, aid = table, table["aid"]
    _, first = _turn(t, "charlie", {"mode": "do", "text": "I light the lantern for Bram"})
    whispered, _ = _turn(
        t,
        "bob",
        {"mode": "say", "text": "The gate key is under the third stone", "to": ["mira"]},
        answer="Mira hears it; the key has an owl on its bow.",
    )
    assert [a["told_to"] for a in whispered["actions"]] == ["whispered to Mira", "whispered to Mira"]
    private, _ = _turn(
        t,
        "charlie",
        {"mode": "do", "text": "I pocket the silver ring", "private": True},
        answer="The ring hums with a cold light.",
    )
    assert [a["told_to"] for a in private["actions"]] == ["told privately", "told privately"]
    prompts = {"alice": [], "bob": [], "charlie": []}
    for who, text in [
        ("alice", "I walk to the gate with Sela"),
        ("bob", "I watch the road"),
        ("charlie", "I look at Bram"),
        ("alice", "We ride at dawn"),
        ("bob", "I sharpen my knife"),
    ]:
        prompts[who].append(_turn(t, who, {"mode": "do", "text": text})[1])
    assert _has(prompts["alice"][0], BOBS) and not _has(prompts["alice"][0], CHARLIES)  # told to Mira
    assert "(whispered, known only to Sela and Mira)" in prompts["alice"][0]
    assert _has(prompts["bob"][0], BOBS) and not _has(prompts["bob"][0], CHARLIES)
    assert _has(prompts["charlie"][0], CHARLIES) and not _has(prompts["charlie"][0], BOBS)
    assert "(told privately, known only to Oric)" in prompts["charlie"][0]

    memory_pass.run(aid)  # 13 nodes: the shared bank's first blocks, the secrets' own memories
    secret_memories = Memory.objects.filter(adventure_id=aid, seen_by__isnull=False)
    assert {m.character.name if m.character else None for m in secret_memories} == {None, "Sela", "Oric"}
    kept = secret_memories.count()
    memory_pass.run(aid)  # a pass run again remembers nothing twice
    assert secret_memories.count() == kept
    assert not any(_has(m.text, BOBS + CHARLIES) for m in Memory.objects.filter(adventure_id=aid, seen_by=None))
    prompt = _turn(t, "bob", {"mode": "do", "text": "Where is the gate key hidden?"})[1]
    assert not _has(prompt, CHARLIES)

    # the leak sweep: every page and route of the story, as alice (told bob's, not charlie's) and bob
    ids = _ids(t)
    routes = [r for r, _ in all_routes() if r.startswith(("api/adventures/<int:adventure_id>/", "play/<int:"))]
    for who, unseen in [("alice", CHARLIES), ("bob", CHARLIES), ("charlie", BOBS)]:
        web = _web(t[who])
        for route in routes:
            if route.endswith(("/live/", "/turns/", "/retry/")):
                continue  # the live stream is read on the real server (tests/play/test_streaming.py)
            for query in QUERIES.get(route.split("/")[-2], ("",)):
                url = fill(route, ids) + (query % ids["card_id"] if "%" in query else query)
                client = t[who] if route.startswith("api/") else web
                response = client.get(url)
                assert response.status_code < 500, f"GET {url} as {who} -> {response.status_code}"
                body = b"".join(response.streaming_content) if response.streaming else response.content
                assert not _has(body.decode(errors="replace"), unseen), f"GET {url} shows {who} a secret"
    for who, theirs in [("bob", BOBS), ("charlie", CHARLIES), ("alice", BOBS)]:
        story = t[who].get(f"/api/adventures/{aid}/story/").json()["actions"]
        assert _has(str(story), theirs)  # what they were told stays theirs to read
    secret_id = Action.objects.filter(adventure_id=aid, text__contains="silver ring").get().pk
    assert t["alice"].get(f"/api/adventures/{aid}/actions/{secret_id}/").status_code == 404
    admin = _web(t["bob"]).get(f"/admin/stories/action/{secret_id}/change/")  # no moderator: the admin's door
    assert admin.status_code == 302 and "/login/" in admin["Location"]


def _ids(t):
    aid = t["aid"]
    alice = t["alice"]
    head = alice.get(f"/api/adventures/{aid}/story/").json()
    secret = Action.objects.filter(adventure_id=aid, text__contains="silver ring").get()
    charlie_memory = Memory.objects.filter(adventure_id=aid, seen_by=[secret.author_id], character=None).get()
    return {
        "adventure_id": aid,
        "action_id": secret.pk,
        "branch_id": head["branch"],
        "card_id": _card(alice, aid, "Oric"),
        "memory_id": charlie_memory.pk,
        "claim_id": 1,
        "proposal_id": 1,
        "invite_id": 1,
        "user_id": secret.author_id,
        "field": "plot_essentials",
    }


def _web(api):
    from django.test import Client

    client = Client()
    client.force_login(api.user)
    return client


def test_a_member_reports_a_node_and_a_moderator_sees_it_whoever_it_was_told_to_and_hides_it_from_all(
    table, django_user_model
):
    t, aid = table, table["aid"]
    _turn(t, "bob", {"mode": "say", "text": "The gate key is under the third stone", "to": ["Mira"]}, answer="Noted.")
    mine = [a for a in t["bob"].get(f"/api/adventures/{aid}/story/").json()["actions"] if "third stone" in a["text"]]
    alices = next(a for a in t["alice"].get(f"/api/adventures/{aid}/story/").json()["actions"] if a["kind"] == "ai")
    unseen = t["charlie"].post(
        f"/api/adventures/{aid}/reports/", {"reason": "harassment", "action": mine[0]["id"]}, format="json"
    )
    assert unseen.status_code == 404  # a secret not told to charlie is no node of his to report
    reported = t["alice"].post(
        f"/api/adventures/{aid}/reports/",
        {"reason": "harassment", "text": "bob keeps whispering this", "action": mine[0]["id"]},
        format="json",
    )
    assert reported.status_code == 201, reported.json()
    twice = t["alice"].post(
        f"/api/adventures/{aid}/reports/", {"reason": "spam", "action": mine[0]["id"]}, format="json"
    )
    assert twice.status_code == 409
    bad = t["charlie"].post(f"/api/adventures/{aid}/reports/", {"reason": "boring"}, format="json")
    assert bad.status_code == 400 and "reason" in str(bad.json())
    assert alices["id"]  # the owner's own story reads on

    memory_pass.run(aid)
    assert Memory.objects.filter(adventure_id=aid, text__contains="third stone", seen_by__isnull=False).exists()
    moderator = _web_staff(django_user_model)
    queue = moderator.get("/admin/stories/storyreport/")
    assert queue.status_code == 200 and "third stone" in queue.content.decode()  # moderation sees the secret
    report_id = reported.json()["id"]
    hidden = moderator.post(
        "/admin/stories/storyreport/", {"action": "hide_node", "_selected_action": [report_id]}, follow=True
    )
    assert hidden.status_code == 200
    for who in ("alice", "bob"):
        story = t[who].get(f"/api/adventures/{aid}/story/").json()["actions"]
        assert not any("third stone" in a["text"] for a in story), who
    assert not Memory.objects.filter(adventure_id=aid, text__contains="third stone").exists()


def _web_staff(django_user_model):
    from django.contrib.auth.models import Group
    from django.test import Client

    user = django_user_model.objects.create_user(username="mod", password="mod-pass-123", is_staff=True)
    user.groups.add(Group.objects.get(name="Moderators"))
    client = Client()
    client.force_login(user)
    return client
