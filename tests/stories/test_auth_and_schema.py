import pytest
from django.core.management import call_command

from stories.accounts import ai_settings
from tests.conftest import ALICE_KEY

pytestmark = pytest.mark.django_db


def test_signup_login_logout_with_tokens():
    from rest_framework.test import APIClient

    api = APIClient()
    weak = api.post("/api/auth/signup/", {"username": "eve", "password": "123"}, format="json")
    assert weak.status_code == 400 and "password" in weak.json()
    made = api.post("/api/auth/signup/", {"username": "eve", "password": "correct-horse-battery"}, format="json")
    assert made.status_code == 201
    again = api.post("/api/auth/signup/", {"username": "EVE", "password": "correct-horse-battery"}, format="json")
    assert again.status_code == 400 and "taken" in str(again.json())
    wrong = api.post("/api/auth/login/", {"username": "eve", "password": "nope"}, format="json")
    assert wrong.status_code == 401 and wrong.json()["detail"] == "wrong username or password"

    fresh = APIClient()
    token = fresh.post(
        "/api/auth/login/", {"username": "eve", "password": "correct-horse-battery"}, format="json"
    ).json()["token"]
    fresh.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert fresh.get("/api/auth/me/").json()["username"] == "eve"
    assert fresh.post("/api/auth/logout/").status_code == 204
    assert fresh.get("/api/auth/me/").status_code in (401, 403)


def test_the_openapi_schema_lists_every_story_route(client):
    schema = client.get("/api/schema/?format=json").json()
    paths = set(schema["paths"])
    for path in [
        "/api/auth/signup/",
        "/api/settings/",
        "/api/settings/test/",
        "/api/adventures/",
        "/api/adventures/{adventure_id}/story/",
        "/api/adventures/{adventure_id}/turns/",
        "/api/adventures/{adventure_id}/retry/",
        "/api/adventures/{adventure_id}/undo/",
        "/api/adventures/{adventure_id}/actions/{action_id}/",
        "/api/adventures/{adventure_id}/actions/{action_id}/takes/",
        "/api/adventures/{adventure_id}/actions/{action_id}/fork/",
        "/api/adventures/{adventure_id}/branches/",
        "/api/adventures/{adventure_id}/branches/{branch_id}/checkout/",
        "/api/adventures/{adventure_id}/cards/",
        "/api/adventures/{adventure_id}/cards/import/",
        "/api/adventures/{adventure_id}/cards/export/",
        "/api/adventures/{adventure_id}/insights/",
        "/api/adventures/{adventure_id}/export/",
        "/api/adventures/import/",
        "/api/debug/requests/",
    ]:
        assert path in paths, path
    assert (
        "api_key" not in schema["components"]["schemas"]["AISettings"]["properties"]
        or schema["components"]["schemas"]["AISettings"]["properties"]["api_key"].get("writeOnly") is True
    )


def test_the_async_turn_routes_are_documented_for_players_with_both_answers(client):
    """The turn and retry views are async DRF views; the schema shows what a client gets (the 201 JSON or
    the event stream) and a player-facing summary, not the view's implementation notes."""
    schema = client.get("/api/schema/?format=json").json()
    for path, summary in [
        ("/api/adventures/{adventure_id}/turns/", "Play a turn"),
        ("/api/adventures/{adventure_id}/retry/", "Retry the last reply"),
    ]:
        operation = schema["paths"][path]["post"]
        assert operation["summary"] == summary
        assert "DRF" not in operation["description"] and "database step" not in operation["description"]
        assert set(operation["responses"]) >= {"201", "200"}
        assert "text/event-stream" in operation["responses"]["200"]["content"]
    assert "get" not in schema["paths"]["/api/adventures/{adventure_id}/turns/"]


def test_every_operation_of_the_api_docs_says_what_it_does_in_one_line(client):
    """No operation reaches the docs without a summary, and none shows a view's docstring meant for
    the code's readers."""
    schema = client.get("/api/schema/?format=json").json()
    bare = [
        (method.upper(), path)
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if not operation.get("summary")
    ]
    assert bare == [], f"operations without a summary (config/openapi_summaries.py): {bare}"
    for operations in schema["paths"].values():
        for operation in operations.values():
            text = operation.get("description", "")
            assert "db_step" not in text and "Prepared" not in text and "DRF" not in text, operation["summary"]


def test_rotate_keys_re_encrypts_so_old_keys_can_be_dropped(alice_plays, settings):
    from cryptography.fernet import Fernet

    new = Fernet.generate_key().decode()
    settings.FIELD_ENCRYPTION_KEYS = [new] + list(settings.FIELD_ENCRYPTION_KEYS)
    call_command("rotate_keys", stdout=open("/dev/null", "w"))
    settings.FIELD_ENCRYPTION_KEYS = [new]
    assert ai_settings.connection_for_test(user_id=alice_plays.user.id).api_key == ALICE_KEY


def test_branches_can_be_renamed_and_deleted_without_harming_forks(alice_plays, fake_llm):
    api = alice_plays
    aid = api.post("/api/adventures/", {"title": "T", "opening": "Dawn."}, format="json").json()["id"]
    for text in ("north", "east"):
        api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": text}, format="json")
    story = api.get(f"/api/adventures/{aid}/story/").json()["actions"]
    fork = api.post(f"/api/adventures/{aid}/actions/{story[2]['id']}/fork/", {"name": "side"}, format="json").json()
    fork_story = [a["text"] for a in api.get(f"/api/adventures/{aid}/story/").json()["actions"]]
    main = next(b for b in api.get(f"/api/adventures/{aid}/branches/").json() if b["name"] == "main")
    renamed = api.patch(f"/api/adventures/{aid}/branches/{main['id']}/", {"name": "trunk"}, format="json")
    assert renamed.status_code == 200 and renamed.json()["name"] == "trunk"
    assert api.delete(f"/api/adventures/{aid}/branches/{main['id']}/").status_code == 204
    assert [b["id"] for b in api.get(f"/api/adventures/{aid}/branches/").json()] == [fork["id"]]
    assert [a["text"] for a in api.get(f"/api/adventures/{aid}/story/").json()["actions"]] == fork_story
