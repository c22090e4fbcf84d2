"""Bad input gets a clear 4xx naming what to fix, and loses nothing already stored."""

import json

import pytest

from stories.models import ACTION_TEXT_MAX, Action

pytestmark = pytest.mark.django_db


@pytest.fixture
def adventure_id(alice_plays):
    return alice_plays.post("/api/adventures/", {"title": "T", "opening": "You wake."}, format="json").json()["id"]


@pytest.mark.parametrize(
    "body, field, says",
    [
        ({"mode": "do", "text": ""}, "text", "write something"),
        ({"mode": "do", "text": "   "}, "text", "write something"),
        ({"mode": "do", "text": "x" * (ACTION_TEXT_MAX + 1)}, "text", f"no more than {ACTION_TEXT_MAX}"),
        ({"mode": "shout", "text": "hi"}, "mode", "not a valid choice"),
        ({"mode": "continue", "text": "hi"}, "text", "continue takes no text"),
        ({"text": "hi"}, "mode", "required"),
    ],
)
def test_bad_turns_get_field_errors_and_store_nothing(alice_plays, adventure_id, fake_llm, body, field, says):
    before = Action.objects.count()
    response = alice_plays.post(f"/api/adventures/{adventure_id}/turns/", body, format="json")
    assert response.status_code == 400
    assert says in " ".join(response.json()[field])
    assert Action.objects.count() == before and fake_llm.requests == []


def test_malformed_json_is_a_400(alice_plays, adventure_id):
    response = alice_plays.post(
        f"/api/adventures/{adventure_id}/turns/", data="{not json", content_type="application/json"
    )
    assert response.status_code == 400 and "JSON parse error" in response.json()["detail"]


def test_a_body_over_the_limit_is_413(alice_plays, adventure_id, settings):
    settings.REQUEST_BODY_MAX_BYTES = 10_000
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    big = json.dumps({"mode": "do", "text": "x" * 20_000})
    response = alice_plays.post(f"/api/adventures/{adventure_id}/turns/", data=big, content_type="application/json")
    assert response.status_code == 413 and "over the limit" in response.json()["detail"]


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"title": ""}, "title"),
        ({"title": "x" * 201}, "title"),
        ({"title": "ok", "cards": [{"name": ""}]}, "cards"),
        ({"title": "ok", "cards": [{"name": "c", "keys": ["k"] * 30}]}, "cards"),
        ({"title": "ok", "opening": "x" * (ACTION_TEXT_MAX + 1)}, "opening"),
    ],
)
def test_bad_adventures_are_refused(alice_api, payload, field):
    response = alice_api.post("/api/adventures/", payload, format="json")
    assert response.status_code == 400 and field in response.json()


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"temperature": 3}, "temperature"),
        ({"context_tokens": 10}, "context_tokens"),
        ({"memory_top_k": -1}, "memory_top_k"),
        ({"endpoint_url": "not a url"}, "endpoint_url"),
    ],
)
def test_bad_settings_are_refused_and_keep_what_was_stored(alice_plays, payload, field):
    before = alice_plays.get("/api/settings/").json()
    response = alice_plays.patch("/api/settings/", payload, format="json")
    assert response.status_code == 400 and field in response.json()
    assert alice_plays.get("/api/settings/").json() == before


def test_tree_rules_answer_409_with_the_reason_and_unknown_ids_404(alice_plays, adventure_id):
    undo = alice_plays.post(f"/api/adventures/{adventure_id}/undo/")
    assert undo.status_code == 409 and "the story is at its opening" in undo.json()["detail"]
    opening = alice_plays.get(f"/api/adventures/{adventure_id}/story/").json()["actions"][0]
    deleted = alice_plays.delete(f"/api/adventures/{adventure_id}/actions/{opening['id']}/")
    assert deleted.status_code == 409 and "opening cannot be deleted" in deleted.json()["detail"]
    retry = alice_plays.post(f"/api/adventures/{adventure_id}/retry/")
    assert retry.status_code == 409 and "no reply to retry" in retry.json()["detail"]
    head = alice_plays.get(f"/api/adventures/{adventure_id}/branches/").json()[0]
    gone = alice_plays.delete(f"/api/adventures/{adventure_id}/branches/{head['id']}/")
    assert gone.status_code == 409 and "switch to another branch" in gone.json()["detail"]
    take = alice_plays.post(
        f"/api/adventures/{adventure_id}/actions/{opening['id']}/takes/", {"take_id": 10**9}, format="json"
    )
    assert take.status_code == 404 and "take_id" in take.json()["detail"]


def test_story_page_parameters_are_checked(alice_plays, adventure_id):
    assert alice_plays.get(f"/api/adventures/{adventure_id}/story/?limit=0").status_code == 400
    assert alice_plays.get(f"/api/adventures/{adventure_id}/story/?limit=9999").status_code == 400
    assert alice_plays.get(f"/api/adventures/{adventure_id}/story/?before=abc").status_code == 400


def test_unknown_api_urls_are_json_404s(alice_api):
    response = alice_api.get("/api/nothing-here/")
    assert response.status_code == 404 and response.json() == {"detail": "Not found.", "error": "not_found"}


@pytest.mark.parametrize(
    "mutate, says",
    [
        (lambda d: d.update(format="other"), "format: must be 'everlore.adventure'"),
        (lambda d: d["actions"].append({"branch": 999999, "depth": 9, "kind": "do", "text": "x"}), "unknown 'branch'"),
        (
            lambda d: d["actions"].__setitem__(1, {**d["actions"][1], "kind": "evil"}),
            'actions[1].kind: "evil" is not a valid choice',
        ),
        (lambda d: d["actions"].pop(1), "contiguous story"),
        (lambda d: d.update(head=424242), "'head' must name a branch"),
    ],
)
def test_a_broken_import_is_refused_whole(alice_plays, adventure_id, fake_llm, mutate, says):
    alice_plays.post(f"/api/adventures/{adventure_id}/turns/", {"mode": "do", "text": "go"}, format="json")
    data = alice_plays.get(f"/api/adventures/{adventure_id}/export/").json()
    mutate(data)
    count = Action.objects.count()
    response = alice_plays.post("/api/adventures/import/", data, format="json")
    assert response.status_code == 400 and says in response.json()["detail"]
    assert Action.objects.count() == count
    assert len(alice_plays.get("/api/adventures/").json()) == 1
