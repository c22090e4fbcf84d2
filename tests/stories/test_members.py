"""Stories played together: invitations by username and by link, joining as a character, what a
member may and may not do, turns written as the member's character and paid by the owner, and a
removed member losing the story at once."""

import pytest

from stories.models import Action
from stories.party import members
from tests.conftest import ALICE_KEY, api_client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def story(alice_plays):
    made = alice_plays.post(
        "/api/adventures/",
        {
            "title": "The Ford",
            "opening": "The river runs high below the fortress.",
            "persona_name": "Mira",
            "cards": [
                {"name": "Sela", "type": "character", "keys": ["Sela"], "entry": "Sela is the best scout."},
                {"name": "Oric", "type": "character", "keys": ["Oric"], "entry": "Oric commands the army."},
            ],
        },
        format="json",
    )
    assert made.status_code == 201, made.json()
    return made.json()["id"]


def _card(api, aid, name):
    return next(c["id"] for c in api.get(f"/api/adventures/{aid}/cards/").json() if c["name"] == name)


def _join_by_name(owner_api, guest_api, aid, *, role="player", character=None):
    invited = owner_api.post(
        f"/api/adventures/{aid}/invites/", {"username": guest_api.user.username, "role": role}, format="json"
    )
    assert invited.status_code == 201, invited.json()
    mine = guest_api.get("/api/invites/").json()
    assert [i["adventure"]["title"] for i in mine] == ["The Ford"]
    body = {"character": character} if character else {}
    joined = guest_api.post(f"/api/invites/{invited.json()['id']}/accept/", body, format="json")
    assert joined.status_code == 201, joined.json()
    return joined.json()


def test_a_user_invited_by_name_joins_as_a_free_character_and_everyone_sees_who_plays(story, alice_plays, bob_api):
    mine = None
    alice_plays.post(f"/api/adventures/{story}/invites/", {"username": "bob"}, format="json")
    mine = bob_api.get("/api/invites/").json()[0]
    assert [c["name"] for c in mine["characters"]] == ["Sela", "Oric"]
    assert mine["adventure"] == {"id": story, "title": "The Ford", "owner": "alice"}

    sela = _card(alice_plays, story, "Sela")
    joined = bob_api.post(f"/api/invites/{mine['id']}/accept/", {"character": {"card": sela}}, format="json")
    assert joined.status_code == 201, joined.json()
    assert joined.json()["character"] == {"id": sela, "name": "Sela"}
    assert bob_api.get("/api/invites/").json() == []  # used up

    seen = bob_api.get(f"/api/adventures/{story}/members/").json()
    assert [(m["username"], m["role"], (m["character"] or {}).get("name")) for m in seen["members"]] == [
        ("alice", "owner", "Mira"),
        ("bob", "player", "Sela"),
    ]
    assert seen["you"]["username"] == "bob" and seen["players_max"] == 8
    assert [j["adventure"]["title"] for j in bob_api.get("/api/adventures/joined/").json()] == ["The Ford"]


def test_a_link_joins_anyone_signed_in_until_it_is_revoked_and_a_new_character_becomes_a_cast_card(
    story, alice_plays, bob_api, charlie
):
    link = alice_plays.post(f"/api/adventures/{story}/invites/", {}, format="json").json()
    assert link["url"].endswith(f"/join/{link['token']}/") and link["username"] is None
    assert "token" not in alice_plays.get(f"/api/adventures/{story}/invites/").json()[0]  # shown once

    preview = bob_api.get(f"/api/join/{link['token']}/").json()
    assert preview["adventure"]["title"] == "The Ford" and preview["role"] == "player"
    joined = bob_api.post(
        f"/api/join/{link['token']}/",
        {"character": {"name": "Tamsin", "description": "A ferry girl who hears everything."}},
        format="json",
    )
    assert joined.status_code == 201, joined.json()
    cards = {c["name"]: c for c in alice_plays.get(f"/api/adventures/{story}/cards/").json()}
    assert cards["Tamsin"]["type"] == "character" and cards["Tamsin"]["in_cast"] is True

    alice_plays.delete(f"/api/adventures/{story}/invites/{link['id']}/")
    carol = api_client_for(charlie)
    assert carol.get(f"/api/join/{link['token']}/").status_code == 404
    gone = carol.post(f"/api/join/{link['token']}/", {"character": {"name": "Ash"}}, format="json")
    assert gone.status_code == 404
    assert "Ash" not in {c["name"] for c in alice_plays.get(f"/api/adventures/{story}/cards/").json()}


def test_a_players_turn_is_told_as_their_character_and_spends_the_owners_key(story, alice_plays, bob_api, fake_llm):
    _join_by_name(alice_plays, bob_api, story, character={"card": _card(alice_plays, story, "Sela")})
    played = bob_api.post(f"/api/adventures/{story}/turns/", {"mode": "do", "text": "I climb the wall"}, format="json")
    assert played.status_code == 201, played.json()
    said = bob_api.post(f"/api/adventures/{story}/turns/", {"mode": "say", "text": "Up here!"}, format="json")
    assert said.status_code == 201, said.json()

    prompt = "\n".join(m["content"] for m in fake_llm.chat_requests()[-1].body["messages"])
    assert "> Sela: I climb the wall" in prompt and '> Sela says "Up here!"' in prompt
    assert "> You climb the wall" not in prompt
    assert fake_llm.chat_requests()[-1].headers["authorization"] == f"Bearer {ALICE_KEY}"
    actions = alice_plays.get(f"/api/adventures/{story}/story/").json()["actions"]
    assert [a["actor"] for a in actions if a["kind"] in ("do", "say")] == ["Sela", "Sela"]
    assert bob_api.get("/api/settings/").json().get("endpoint_url") in ("", None)  # bob's own, not alice's


def test_a_watcher_reads_the_story_but_cannot_play_and_no_member_reaches_the_owners_routes(story, alice_plays, bob_api):
    _join_by_name(alice_plays, bob_api, story, role="watcher")
    assert bob_api.get(f"/api/adventures/{story}/story/").status_code == 200
    refused = bob_api.post(f"/api/adventures/{story}/turns/", {"mode": "do", "text": "wave"}, format="json")
    assert refused.status_code == 403 and "watchers" in refused.json()["detail"]
    for method, path in [
        ("get", ""),
        ("patch", ""),
        ("delete", ""),
        ("get", "export/"),
        ("get", "cards/"),
        ("get", "insights/"),
        ("get", "memories/"),
        ("get", "invites/"),
        ("post", "invites/"),
    ]:
        answer = getattr(bob_api, method)(f"/api/adventures/{story}/{path}", {}, format="json")
        assert answer.status_code == 403, (method, path, answer.status_code)
        assert answer.json()["detail"] == "only the story's owner can do this"
    assert alice_plays.get(f"/api/adventures/{story}/").json()["title"] == "The Ford"  # nothing changed


def test_retry_and_undo_of_a_turn_belong_to_its_author_and_the_owner(story, alice_plays, bob_api, charlie):
    _join_by_name(alice_plays, bob_api, story, character={"card": _card(alice_plays, story, "Sela")})
    carol = api_client_for(charlie)
    _join_by_name(alice_plays, carol, story, character={"card": _card(alice_plays, story, "Oric")})
    assert (
        carol.post(f"/api/adventures/{story}/turns/", {"mode": "do", "text": "shout"}, format="json").status_code == 201
    )

    for path in ("retry/", "undo/"):
        refused = bob_api.post(f"/api/adventures/{story}/{path}")
        assert refused.status_code == 403 and "author" in refused.json()["detail"], path
    assert carol.post(f"/api/adventures/{story}/retry/").status_code == 201
    assert carol.post(f"/api/adventures/{story}/undo/").status_code == 200
    assert bob_api.post(f"/api/adventures/{story}/redo/").status_code == 403
    assert carol.post(f"/api/adventures/{story}/redo/").status_code == 200
    redone = Action.objects.filter(adventure_id=story, kind="do").get()
    assert (redone.actor, redone.author_id) == ("Oric", charlie.pk)  # redo keeps who wrote it
    assert alice_plays.post(f"/api/adventures/{story}/undo/").status_code == 200  # the owner may


def test_a_removed_member_and_one_who_left_lose_the_story_at_once(story, alice_plays, bob_api, charlie):
    _join_by_name(alice_plays, bob_api, story, character={"card": _card(alice_plays, story, "Sela")})
    carol = api_client_for(charlie)
    _join_by_name(alice_plays, carol, story, role="watcher")
    assert bob_api.delete(f"/api/adventures/{story}/members/{charlie.pk}/").status_code == 403  # not his to remove

    assert alice_plays.delete(f"/api/adventures/{story}/members/{bob_api.user.pk}/").status_code == 204
    assert bob_api.get(f"/api/adventures/{story}/story/").status_code == 404
    played = bob_api.post(f"/api/adventures/{story}/turns/", {"mode": "do", "text": "sneak"}, format="json")
    assert played.status_code == 404

    assert carol.delete(f"/api/adventures/{story}/members/{charlie.pk}/").status_code == 204  # leaves
    assert carol.get(f"/api/adventures/{story}/members/").status_code == 404
    assert [m["username"] for m in alice_plays.get(f"/api/adventures/{story}/members/").json()["members"]] == ["alice"]


def test_eight_players_at_most_one_character_each_and_an_owner_may_turn_a_watcher_into_a_player(
    story, alice_plays, django_user_model
):
    link = alice_plays.post(f"/api/adventures/{story}/invites/", {"role": "player"}, format="json").json()
    for n in range(members.PLAYERS_MAX - 1):
        guest = api_client_for(django_user_model.objects.create_user(username=f"guest{n}", password="x-pass-123"))
        assert (
            guest.post(f"/api/join/{link['token']}/", {"character": {"name": f"Guest {n}"}}, format="json").status_code
            == 201
        )
    late = api_client_for(django_user_model.objects.create_user(username="late", password="x-pass-123"))
    full = late.post(f"/api/join/{link['token']}/", {"character": {"name": "Late"}}, format="json")
    assert full.status_code == 409 and "at most 8 players" in full.json()["detail"]
    assert "Late" not in {c["name"] for c in alice_plays.get(f"/api/adventures/{story}/cards/").json()}

    watch = alice_plays.post(f"/api/adventures/{story}/invites/", {"role": "watcher"}, format="json").json()
    assert late.post(f"/api/join/{watch['token']}/", {}, format="json").status_code == 201
    promoted = alice_plays.patch(
        f"/api/adventures/{story}/members/{late.user.pk}/",
        {"role": "player", "character": _card(alice_plays, story, "Oric")},
        format="json",
    )
    assert promoted.status_code == 409  # still eight players
    guest0 = django_user_model.objects.get(username="guest0")
    assert (
        alice_plays.patch(
            f"/api/adventures/{story}/members/{guest0.pk}/", {"role": "watcher"}, format="json"
        ).status_code
        == 200
    )
    taken = alice_plays.patch(
        f"/api/adventures/{story}/members/{late.user.pk}/",
        {"role": "player", "character": _card(alice_plays, story, "Guest 1")},
        format="json",
    )
    assert taken.status_code == 409 and "another player plays Guest 1" in taken.json()["detail"]
    ok = alice_plays.patch(
        f"/api/adventures/{story}/members/{late.user.pk}/",
        {"role": "player", "character": _card(alice_plays, story, "Oric")},
        format="json",
    )
    assert ok.status_code == 200 and ok.json()["character"]["name"] == "Oric"


def test_invitations_say_what_to_fix(story, alice_plays, bob_api):
    unknown = alice_plays.post(f"/api/adventures/{story}/invites/", {"username": "nobody"}, format="json")
    assert unknown.status_code == 400 and "no player is named 'nobody'" in unknown.json()["detail"]
    self_invite = alice_plays.post(f"/api/adventures/{story}/invites/", {"username": "alice"}, format="json")
    assert self_invite.status_code == 400
    bad_role = alice_plays.post(f"/api/adventures/{story}/invites/", {"role": "king"}, format="json")
    assert bad_role.status_code == 400 and "role" in bad_role.json()
    invite = alice_plays.post(f"/api/adventures/{story}/invites/", {"username": "bob"}, format="json").json()
    no_character = bob_api.post(f"/api/invites/{invite['id']}/accept/", {}, format="json")
    assert no_character.status_code == 400 and "character" in no_character.json()["detail"]
    not_a_character = bob_api.post(
        f"/api/invites/{invite['id']}/accept/", {"character": {"card": 999999}}, format="json"
    )
    assert not_a_character.status_code == 400
    assert bob_api.post(f"/api/invites/{invite['id']}/decline/").status_code == 204
    assert bob_api.get("/api/invites/").json() == []
    assert bob_api.get(f"/api/adventures/{story}/story/").status_code == 404


def test_a_players_character_remembers_the_scenes_it_acted_in_and_an_absent_one_does_not(owner, memory_llm, bob_api):
    """The cast's reading is told a member's act as their character's, so the character played
    remembers it as its own; a character elsewhere does not."""
    from memory.story import memory_pass

    alice = api_client_for(owner)
    made = alice.post(
        "/api/adventures/",
        {
            "title": "The Ford",
            "opening": "Night over the fortress. Bram rode to the harbor at dusk.",
            "persona_name": "Mira",
            "cards": [
                {"name": "Sela", "type": "character", "keys": ["Sela"], "entry": "A scout."},
                {"name": "Bram", "type": "character", "keys": ["Bram"], "entry": "A smith."},
            ],
        },
        format="json",
    ).json()
    aid = made["id"]
    sela = _card(alice, aid, "Sela")
    _join_by_name(alice, bob_api, aid, character={"card": sela})
    played = ("I hide the crown under the altar stone", "I wait by the gate", "I climb the wall", "I rest", "I look")
    for text in (*played, "I sleep"):
        assert (
            bob_api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": text}, format="json").status_code
            == 201
        )
    memory_pass.run(aid)

    cast_calls = [
        r for r in memory_llm.chat_requests() if r.body["messages"][0]["content"].startswith("You keep the memories")
    ]
    assert (
        cast_calls
        and "Sela chose to hide the crown under the altar stone" in cast_calls[0].body["messages"][-1]["content"]
    )
    remembered = [m["text"] for m in alice.get(f"/api/adventures/{aid}/memories/?character={sela}").json()]
    assert any("Sela chose to climb the wall" in t for t in remembered), remembered
    bram = [
        m["text"] for m in alice.get(f"/api/adventures/{aid}/memories/?character={_card(alice, aid, 'Bram')}").json()
    ]
    assert not any("Sela chose" in t for t in bram), bram


def test_an_export_keeps_who_acted_and_its_import_tells_it_the_same(story, alice_plays, bob_api, fake_llm):
    _join_by_name(alice_plays, bob_api, story, character={"card": _card(alice_plays, story, "Sela")})
    bob_api.post(f"/api/adventures/{story}/turns/", {"mode": "do", "text": "I climb the wall"}, format="json")
    exported = alice_plays.get(f"/api/adventures/{story}/export/").json()
    assert [a.get("actor") for a in exported["actions"] if a["kind"] == "do"] == ["Sela"]
    text = b"".join(alice_plays.get(f"/api/adventures/{story}/story/export/").streaming_content).decode()
    assert "> Sela: I climb the wall" in text
    job = alice_plays.post("/api/adventures/import/", exported, format="json").json()
    assert job["status"] == "done", job  # a small import is done in the request
    copy = job["adventure_id"]
    actions = alice_plays.get(f"/api/adventures/{copy}/story/").json()["actions"]
    assert [a["actor"] for a in actions if a["kind"] == "do"] == ["Sela"]
    assert bob_api.get(f"/api/adventures/{copy}/story/").status_code == 404  # members are not copied


def test_who_may_follow_a_story_live_is_its_active_owner_and_active_members_while_it_is_shown(
    story, alice, alice_plays, bob_api, charlie
):
    """What a live page asks every minute and on every members event (play.api_live)."""
    from stories.models import Adventure

    _join_by_name(alice_plays, bob_api, story, character={"card": _card(alice_plays, story, "Sela")})
    bob = bob_api.user
    assert members.may_follow(adventure_id=story, user_id=alice.pk)
    assert members.may_follow(adventure_id=story, user_id=bob.pk)
    assert not members.may_follow(adventure_id=story, user_id=charlie.pk), "no member"
    assert not members.may_follow(adventure_id=story + 10_000, user_id=alice.pk), "no such story"

    type(bob).objects.filter(pk=bob.pk).update(is_active=False)
    assert not members.may_follow(adventure_id=story, user_id=bob.pk), "a suspended member"
    type(bob).objects.filter(pk=bob.pk).update(is_active=True)
    type(alice).objects.filter(pk=alice.pk).update(is_active=False)
    assert not members.may_follow(adventure_id=story, user_id=alice.pk), "a suspended owner"
    assert members.may_follow(adventure_id=story, user_id=bob.pk)
    type(alice).objects.filter(pk=alice.pk).update(is_active=True)

    Adventure.objects.filter(pk=story).update(hidden=True)
    assert not members.may_follow(adventure_id=story, user_id=alice.pk), "a hidden story"
    assert not members.may_follow(adventure_id=story, user_id=bob.pk)
