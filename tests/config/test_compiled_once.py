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


def test_the_recent_story_compiled_once_reads_what_the_orm_reads_for_every_reader_fork_and_cut(
    alice_plays, alice, bob, charlie
):
    """A turn's recent story (stories.tree.lineage.recent) is read through a query compiled once per
    shape, the reader's id going into an array (seen_by @> ARRAY[reader]): each reader gets their own
    secrets and nobody else's, on the main line and on a fork, with or without a cut below a depth."""
    from stories.models import Action, Branch
    from stories.tree import lineage

    aid, cards, code = _story(alice_plays)
    _joined(bob, code, cards["Sela"])
    for text in ("I wade in", "I call to the far bank", "I climb out"):
        played = alice_plays.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": text}, format="json")
        assert played.status_code == 201, played.json()
    main = Branch.objects.get(adventure_id=aid, internal=False)
    nodes = list(Action.objects.filter(branch=main, live=True).order_by("depth"))
    assert len(nodes) >= 7
    told = {nodes[2].pk: [bob.id], nodes[3].pk: [charlie.id], nodes[5].pk: [alice.id, bob.id]}
    for pk, readers in told.items():
        Action.objects.filter(pk=pk).update(seen_by=readers)
    fork = Branch.objects.create(adventure_id=aid, parent=main, fork_depth=4, lineage=[[main.pk, 4]], tip_depth=5)
    Action.objects.create(adventure_id=aid, branch=fork, depth=5, kind="do", text="I turn back", seen_by=[bob.id])

    def by_orm(branch, count, below, viewer):
        qs = lineage.story(branch, viewer=viewer)
        if below is not None:
            qs = qs.filter(depth__lt=below)
        return [a.pk for a in reversed(list(qs.order_by("-depth")[:count]))]

    for branch in (main, fork):
        for viewer in (None, lineage.EVERY, alice.id, bob.id, charlie.id):
            for below in (None, 4, 6):
                for count in (2, 50):
                    read = lineage.recent(branch, count=count, below_depth=below, viewer=viewer)
                    assert [a.pk for a in read] == by_orm(branch, count, below, viewer), (branch, viewer, below, count)
                    assert all(a.text for a in read)
    seen = {who: {a.pk for a in lineage.recent(main, count=50, viewer=who.id)} for who in (alice, bob, charlie)}
    assert nodes[2].pk in seen[bob] and nodes[2].pk not in seen[alice] | seen[charlie]
    assert nodes[3].pk in seen[charlie] and nodes[3].pk not in seen[alice] | seen[bob]
    assert nodes[5].pk in seen[alice] & seen[bob] and nodes[5].pk not in seen[charlie]


def test_a_row_read_through_a_compiled_query_is_the_instance_the_orm_makes(alice_plays, alice):
    """Rows of a model read whole are made without from_db's field-by-field setting: each is the
    instance Django makes (every field, saved rows, the database it came from), it saves as an
    update, its related objects load, and a changed foreign key forgets the related object read."""
    from stories.models import Action, Branch
    from stories.tree import lineage

    aid, _, _ = _story(alice_plays)
    played = alice_plays.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "I wade in"}, format="json")
    assert played.status_code == 201, played.json()
    main = Branch.objects.get(adventure_id=aid, internal=False)
    read = lineage.recent(main, count=50)
    orm = {a.pk: a for a in Action.objects.filter(branch=main, live=True)}
    assert read and {a.pk for a in read} == set(orm)
    for action in read:
        fields = {f.attname: getattr(action, f.attname) for f in Action._meta.concrete_fields}
        assert fields == {f.attname: getattr(orm[action.pk], f.attname) for f in Action._meta.concrete_fields}
        assert (action._state.adding, action._state.db) == (False, "default")
        assert action.adventure.pk == aid and action.branch == main
    newest = read[-1]
    newest.text = "I wade in, slowly"
    newest.save(update_fields=["text"])
    assert Action.objects.get(pk=newest.pk).text == "I wade in, slowly"
    assert Action.objects.filter(adventure_id=aid).count() == len(orm), "saved as an update"
    other = Branch.objects.create(adventure_id=aid, parent=main, fork_depth=1, lineage=[[main.pk, 1]], tip_depth=1)
    newest.branch_id = other.pk
    assert newest.branch == other, "the related object read before is forgotten when its key changes"
