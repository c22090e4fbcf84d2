"""The issue's "done when": a player does everything through the API against a real
OpenAI-compatible HTTP server (the local fake)."""

import pytest

from stories.models import Action

pytestmark = pytest.mark.django_db


def story_texts(client, adventure_id):
    page = client.get(f"/api/adventures/{adventure_id}/story/?limit=200").json()
    return [a["text"] for a in page["actions"]]


def test_a_player_plays_a_whole_adventure_through_the_api(client, fake_llm):
    from rest_framework.test import APIClient

    api = APIClient()
    signup = api.post("/api/auth/signup/", {"username": "dana", "password": "a-long-pass-phrase-9"}, format="json")
    assert signup.status_code == 201, signup.json()
    api.credentials(HTTP_AUTHORIZATION=f"Token {signup.json()['token']}")

    settings = api.patch(
        "/api/settings/",
        {"endpoint_url": fake_llm.url, "api_key": "sk-dana-key-5678", "model": "fake-model", "context_tokens": 2048},
        format="json",
    )
    assert settings.status_code == 200
    assert settings.json()["has_api_key"] is True and settings.json()["api_key_last4"] == "5678"
    assert "api_key" not in settings.json()

    created = api.post(
        "/api/adventures/",
        {
            "title": "The Salt Road",
            "persona_name": "Mira",
            "persona_pronouns": "she/her",
            "persona_description": "a cartographer with a broken compass",
            "plot_essentials": "Mira must reach the coast before the salt caravans leave.",
            "authors_note": "Keep the tone wistful.",
            "opening": "You stand at the edge of the salt flats at dawn.",
            "cards": [
                {
                    "type": "character",
                    "name": "Oren",
                    "keys": ["Oren", "innkeeper"],
                    "entry": "Oren is the one-eyed innkeeper of the Last Well.",
                }
            ],
        },
        format="json",
    )
    assert created.status_code == 201, created.json()
    adventure_id = created.json()["id"]

    for n in range(30):
        mode = ["do", "say", "story"][n % 3]
        turn = api.post(
            f"/api/adventures/{adventure_id}/turns/", {"mode": mode, "text": f"step {n} toward Oren"}, format="json"
        )
        assert turn.status_code == 201, turn.json()
        kinds = [a["kind"] for a in turn.json()["actions"]]
        assert kinds == [mode, "ai"]
        assert turn.json()["usage"]["model"] == "fake-model"
    assert len(story_texts(api, adventure_id)) == 61
    last_turn = turn.json()
    cards_part = next(p for p in last_turn["context"]["parts"] if p["name"] == "cards")
    assert cards_part["items"][0]["key"] == "Oren" and "Oren" in cards_part["reason"]
    assert last_turn["context"]["total_tokens"] <= 2048

    # every request carried dana's key and the adventure's story
    chats = fake_llm.chat_requests()
    assert len(chats) == 30
    assert all(r.headers["authorization"] == "Bearer sk-dana-key-5678" for r in chats)
    assert "step 29 toward Oren" in chats[-1].body["messages"][-1]["content"]

    # retry keeps the old take and can go back to it
    before = story_texts(api, adventure_id)[-1]
    retried = api.post(f"/api/adventures/{adventure_id}/retry/")
    assert retried.status_code == 201
    new_take = retried.json()["actions"][0]
    assert new_take["take_count"] == 2 and story_texts(api, adventure_id)[-1] == new_take["text"] != before
    takes = api.get(f"/api/adventures/{adventure_id}/actions/{new_take['id']}/takes/").json()["takes"]
    assert [t["text"] for t in takes] == [before, new_take["text"]]
    selected = api.post(
        f"/api/adventures/{adventure_id}/actions/{new_take['id']}/takes/", {"take_id": takes[0]["id"]}, format="json"
    )
    assert selected.status_code == 200 and story_texts(api, adventure_id)[-1] == before

    # undo, edit
    # (the whole turn: the reply at 61 and the action at 60 it answered)
    assert api.post(f"/api/adventures/{adventure_id}/undo/").json() == {
        "removed_depth": 60,
        "removed": 2,
        "tip_depth": 59,
        "can_redo": True,
    }
    page = api.get(f"/api/adventures/{adventure_id}/story/?limit=1").json()
    edited = api.patch(
        f"/api/adventures/{adventure_id}/actions/{page['actions'][0]['id']}/",
        {"text": "You find Oren asleep behind the bar."},
        format="json",
    )
    assert edited.status_code == 200
    assert story_texts(api, adventure_id)[-1] == "You find Oren asleep behind the bar."

    # fork at depth 11, play on the fork, switch back: main is untouched
    main_story = story_texts(api, adventure_id)
    at_11 = api.get(f"/api/adventures/{adventure_id}/story/?before=12&limit=1").json()["actions"][0]
    fork = api.post(
        f"/api/adventures/{adventure_id}/actions/{at_11['id']}/fork/", {"name": "the cave path"}, format="json"
    )
    assert fork.status_code == 201 and fork.json()["is_head"] is True
    assert story_texts(api, adventure_id) == main_story[:11]
    api.post(f"/api/adventures/{adventure_id}/turns/", {"mode": "do", "text": "enter the cave"}, format="json")
    assert story_texts(api, adventure_id)[-2] == "enter the cave"
    branches = api.get(f"/api/adventures/{adventure_id}/branches/").json()
    main = next(b for b in branches if b["name"] == "main")
    assert api.post(f"/api/adventures/{adventure_id}/branches/{main['id']}/checkout/").status_code == 200
    assert story_texts(api, adventure_id) == main_story

    # export, re-import: the same tree and cards under a new id
    exported = api.get(f"/api/adventures/{adventure_id}/export/").json()
    imported = api.post("/api/adventures/import/", exported, format="json")
    assert imported.status_code == 202 and imported.json()["status"] == "done", imported.json()
    new_id = imported.json()["adventure_id"]
    assert story_texts(api, new_id) == main_story
    assert {b["name"] for b in api.get(f"/api/adventures/{new_id}/branches/").json()} == {"main", "the cave path"}
    assert api.get(f"/api/adventures/{new_id}/cards/").json()[0]["name"] == "Oren"

    # insights: a dry run that changes nothing and calls no model
    calls_before = len(fake_llm.requests)
    actions_before = Action.objects.count()
    insights = api.get(f"/api/adventures/{adventure_id}/insights/")
    assert insights.status_code == 200
    names = [p["name"] for p in insights.json()["parts"]]
    assert names[:3] == ["instructions", "plot_essentials", "story"] or "story" in names
    assert "authors_note" in names and "plot_essentials" in names
    assert len(fake_llm.requests) == calls_before and Action.objects.count() == actions_before

    debug = api.get("/api/debug/requests/").json()
    assert len(debug) == 30 and {d["outcome"] for d in debug} == {"ok"}
    assert "sk-dana-key-5678" not in str(debug)
