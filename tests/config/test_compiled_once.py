"""The access query compiled once (config.compiled_once) answers exactly what Django's own run of the
same queryset answers, for every party and shape: the adventure's fields, the member's role and
character, the party's turn mode, the last prompt, and the owner's AI settings loaded with it (a
turn reads them with no query more)."""

import pytest

from config.compiled_once import CompiledOnce
from stories.adventures import _access_query, access_adventure
from stories.models import Adventure
from tests.stories.test_turn_modes import _joined, _story

pytestmark = pytest.mark.django_db

ANNOTATIONS = ("member_role", "member_actor", "together", "turn_mode", "last_prompt")


def _as_django(shape, adventure_id, user_id):
    return next(iter(_access_query(shape, adventure_id=adventure_id, user_id=user_id)), None)


def _read(adventure):
    fields = {f.attname: getattr(adventure, f.attname) for f in Adventure._meta.concrete_fields}
    return fields, {name: getattr(adventure, name, "-") for name in ANNOTATIONS}


def test_the_compiled_access_query_answers_as_django_does_for_every_party_and_shape(
    alice_plays, alice, bob, charlie, django_user_model, django_assert_num_queries
):
    aid, cards, code = _story(alice_plays)
    _joined(bob, code, cards["Sela"])
    alice_plays.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "I wade in"}, format="json")
    stranger = django_user_model.objects.create_user("dora", password="pw-long-enough-1")
    compiled = CompiledOnce(_access_query)
    answered = 0
    for user in (alice, bob, charlie, stranger):
        for shape in ((True, False), (True, True), (False, False), (False, True)):
            mine, theirs = compiled.first(shape, adventure_id=aid, user_id=user.id), _as_django(shape, aid, user.id)
            assert (mine is None) == (theirs is None), (user.username, shape)
            if mine is None:
                continue
            answered += 1
            assert _read(mine) == _read(theirs), (user.username, shape)
            if shape[1]:
                with django_assert_num_queries(0):  # the owner's settings came with the row
                    settings = mine.owner.ai_settings
                assert settings.pk == theirs.owner.ai_settings.pk and settings.model == theirs.owner.ai_settings.model
    assert answered == 2 + 4, "the owner in every shape, the member where a member is asked"
    # and the site's access reads the member's character and role from it
    member = access_adventure(user_id=bob.id, adventure_id=aid, for_play=True, may="play")
    assert (member.viewer, member.actor, member.turn_mode is None, member.together) == ("player", "Sela", True, True)
    assert member.last_prompt, "the last turn's prompt fingerprint"


def test_an_api_token_is_looked_up_by_its_text_through_the_compiled_query(alice, bob, client):
    """Every API request's token is read through a query compiled once with a text value: each key
    finds its own user, a key that is not one (quotes, a marker's text, another's key cut short) finds
    nobody and gets the API's 401."""
    from rest_framework.authtoken.models import Token

    keys = {user.username: Token.objects.create(user=user).key for user in (alice, bob)}
    for name, key in keys.items():
        answer = client.get("/api/adventures/", HTTP_AUTHORIZATION=f"Token {key}")
        assert answer.status_code == 200, name
    for wrong in ("x'OR'1'='1", "-1999990000", keys["alice"][:-1], keys["bob"] + "a"):
        answer = client.get("/api/adventures/", HTTP_AUTHORIZATION=f"Token {wrong}")
        assert answer.status_code == 401 and "invalid token" in answer.json()["detail"], wrong
    from stories.accounts.auth import _TOKEN

    assert _TOKEN.first(key=keys["bob"]).user == bob and _TOKEN.first(key=keys["alice"]).user_id == alice.pk
