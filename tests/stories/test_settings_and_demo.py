import pytest
from django.db import connection

from stories.accounts import ai_settings, crypto
from stories.models import AISettings
from tests.conftest import ALICE_KEY

pytestmark = pytest.mark.django_db


def test_the_api_key_is_write_only_and_encrypted_at_rest(alice_plays):
    shown = alice_plays.get("/api/settings/").json()
    assert shown["has_api_key"] is True and shown["api_key_last4"] == ALICE_KEY[-4:]
    assert ALICE_KEY not in str(shown) and "api_key_encrypted" not in shown
    with connection.cursor() as cursor:
        cursor.execute("SELECT api_key_encrypted FROM stories_aisettings")
        (stored,) = cursor.fetchone()
    assert ALICE_KEY not in stored and crypto.decrypt(stored) == ALICE_KEY


def test_omitting_the_key_keeps_it_and_an_empty_key_removes_it(alice_plays):
    alice_plays.patch("/api/settings/", {"model": "other"}, format="json")
    assert alice_plays.get("/api/settings/").json()["has_api_key"] is True
    alice_plays.patch("/api/settings/", {"api_key": ""}, format="json")
    shown = alice_plays.get("/api/settings/").json()
    assert shown["has_api_key"] is False and shown["api_key_last4"] == ""


def test_keys_rotate_under_a_new_first_key(alice_plays, settings):
    from cryptography.fernet import Fernet

    old = list(settings.FIELD_ENCRYPTION_KEYS)
    settings.FIELD_ENCRYPTION_KEYS = [Fernet.generate_key().decode()] + old
    row = AISettings.objects.get(user=alice_plays.user)
    row.api_key_encrypted = crypto.rotate(row.api_key_encrypted)
    row.save()
    settings.FIELD_ENCRYPTION_KEYS = settings.FIELD_ENCRYPTION_KEYS[:1]
    assert ai_settings.connection_for_test(user_id=alice_plays.user.id).api_key == ALICE_KEY


def test_users_without_a_key_play_a_few_demo_turns_a_day(bob_api, demo):
    adventure = bob_api.post("/api/adventures/", {"title": "T", "opening": "Go."}, format="json").json()
    url = f"/api/adventures/{adventure['id']}/turns/"
    for _ in range(2):
        ok = bob_api.post(url, {"mode": "do", "text": "walk"}, format="json")
        assert ok.status_code == 201 and ok.json()["usage"]["demo"] is True
    assert demo.chat_requests()[-1].body["model"] == "demo-small"
    over = bob_api.post(url, {"mode": "do", "text": "walk"}, format="json")
    assert over.status_code == 429 and "demo turns" in over.json()["detail"]
    assert 0 < int(over["Retry-After"]) <= 86400
    assert len(demo.chat_requests()) == 2


def test_background_work_never_gets_the_demo_model(bob, demo):
    assert ai_settings.connection_for_background(user_id=bob.pk, purpose="summary") is None
    assert ai_settings.connection_for_background(user_id=bob.pk, purpose="embedding") is None


def test_background_work_uses_the_owners_own_settings(alice_plays):
    alice_plays.patch("/api/settings/", {"summary_model": "summarizer"}, format="json")
    conn = ai_settings.connection_for_background(user_id=alice_plays.user.id, purpose="summary")
    assert conn.model == "summarizer" and conn.api_key == ALICE_KEY and not conn.demo
    assert ai_settings.connection_for_background(user_id=alice_plays.user.id, purpose="embedding") is None
    assert ALICE_KEY not in repr(conn)
