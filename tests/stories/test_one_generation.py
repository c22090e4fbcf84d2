"""One reply is written at a time per adventure: while a turn, retry or
continue is generating, another one (and every edit, undo or branch switch of
that story) answers 409 and stores nothing; other adventures play on."""

import threading
from contextlib import contextmanager

import pytest

from stories.models import Action

pytestmark = pytest.mark.django_db(transaction=True)


def _post(api, url, body=None):
    return api.post(url, body or {}, format="json")


@contextmanager
def _reply_held_at_the_model(api, fake_llm, url, body, *, reply):
    """POST ``url`` on a thread and hold its reply at the model until the block ends; yields the
    dict that receives the response once the reply is written."""
    from django.db import connection

    writing, release = threading.Event(), threading.Event()

    def slow_reply(request_body, n):
        writing.set()
        release.wait(30)
        return reply

    fake_llm.reply = slow_reply
    first = {}

    def play_first():
        try:
            first["response"] = _post(api, url, body)
        finally:
            connection.close()

    thread = threading.Thread(target=play_first)
    thread.start()
    try:
        assert writing.wait(30), "the first turn never reached the model"
        yield first
    finally:
        release.set()
        thread.join(30)


def test_a_second_turn_while_a_reply_is_written_answers_409_and_stores_nothing(alice_plays, fake_llm):
    api = alice_plays
    aid = _post(api, "/api/adventures/", {"title": "One", "opening": "A bell rings."}).json()["id"]
    other = _post(api, "/api/adventures/", {"title": "Two", "opening": "A door."}).json()["id"]
    with _reply_held_at_the_model(
        api,
        fake_llm,
        f"/api/adventures/{aid}/turns/",
        {"mode": "do", "text": "ring it"},
        reply="The bell falls silent.",
    ) as first:
        refused = [
            _post(api, f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "ring it again"}),
            _post(api, f"/api/adventures/{aid}/turns/", {"mode": "continue", "text": ""}),
            _post(api, f"/api/adventures/{aid}/retry/"),
            _post(api, f"/api/adventures/{aid}/undo/"),
        ]
        opening = Action.objects.get(adventure_id=aid, depth=1)
        refused.append(
            api.patch(f"/api/adventures/{aid}/actions/{opening.pk}/", {"text": "A bell tolls."}, format="json")
        )
        for response in refused:
            assert response.status_code == 409, (response.status_code, response.content)
            assert "being written" in response.json()["detail"]
        fake_llm.reply = lambda body, n: "The door opens."
        assert _post(api, f"/api/adventures/{other}/turns/", {"mode": "do", "text": "knock"}).status_code == 201, (
            "another adventure plays on"
        )
    assert first["response"].status_code == 201
    texts = list(Action.objects.filter(adventure_id=aid).order_by("depth").values_list("text", flat=True))
    assert texts == ["A bell rings.", "ring it", "The bell falls silent."], "nothing of the refused requests was stored"
    # done writing: the adventure takes turns and edits again
    assert _post(api, f"/api/adventures/{aid}/undo/").status_code == 200
    assert _post(api, f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "listen"}).status_code == 201


def test_a_failed_generation_frees_the_adventure_at_once(alice_plays, fake_llm):
    from tests.support.fake_llm import Reply

    api = alice_plays
    aid = _post(api, "/api/adventures/", {"title": "Fail", "opening": "Rain."}).json()["id"]
    fake_llm.queue(Reply(status=401))
    assert _post(api, f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "wait"}).status_code == 424
    assert _post(api, f"/api/adventures/{aid}/retry/").status_code == 201


def test_a_branch_switch_while_a_reply_is_written_answers_409_and_the_reply_lands_where_it_was_asked(
    alice_plays, fake_llm
):
    from stories.models import Adventure, Branch

    api = alice_plays
    aid = _post(api, "/api/adventures/", {"title": "Forked", "opening": "A fork in the road."}).json()["id"]
    main = Adventure.objects.get(pk=aid).head_branch_id
    opening = Action.objects.get(adventure_id=aid, depth=1)
    side = _post(api, f"/api/adventures/{aid}/actions/{opening.pk}/fork/", {"name": "left", "checkout": False})
    assert side.status_code == 201, side.content
    side_id = side.json()["id"]
    with _reply_held_at_the_model(
        api,
        fake_llm,
        f"/api/adventures/{aid}/turns/",
        {"mode": "do", "text": "go right"},
        reply="The right road climbs.",
    ) as first:
        refused = [
            _post(api, f"/api/adventures/{aid}/branches/{side_id}/checkout/"),
            _post(api, f"/api/adventures/{aid}/actions/{opening.pk}/fork/", {"name": "back", "checkout": True}),
        ]
        for response in refused:
            assert response.status_code == 409, (response.status_code, response.content)
            assert "being written" in response.json()["detail"]
        assert Adventure.objects.get(pk=aid).head_branch_id == main, "the head did not move"
    assert first["response"].status_code == 201
    story = [a["text"] for a in api.get(f"/api/adventures/{aid}/story/").json()["actions"]]
    assert story == ["A fork in the road.", "go right", "The right road climbs."], "the reply is on the branch played"
    assert Branch.objects.filter(adventure_id=aid, name="back").count() == 0, "the refused fork stored nothing"
    assert _post(api, f"/api/adventures/{aid}/branches/{side_id}/checkout/").status_code == 200


def test_deleting_an_adventure_while_its_reply_is_written_answers_409_and_the_reply_lands(alice_plays, fake_llm, alice):
    """The delete used to answer 204 under a reply being written, and the turn's own request 500."""
    from django.test import Client

    from stories.models import Adventure

    api = alice_plays
    page = Client()
    page.force_login(alice)
    aid = _post(api, "/api/adventures/", {"title": "Doomed", "opening": "A candle."}).json()["id"]
    with _reply_held_at_the_model(
        api, fake_llm, f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "blow it out"}, reply="Darkness."
    ) as first:
        refused = api.delete(f"/api/adventures/{aid}/")
        assert refused.status_code == 409 and "being written" in refused.json()["detail"], refused.content
        from_page = page.post(f"/play/{aid}/delete/")
        assert from_page.status_code == 409 and b"being written" in from_page.content
        assert Adventure.objects.filter(pk=aid).exists()
    assert first["response"].status_code == 201, first["response"].content
    assert [a["text"] for a in api.get(f"/api/adventures/{aid}/story/").json()["actions"]][-1] == "Darkness."
    assert api.delete(f"/api/adventures/{aid}/").status_code == 204, "once written, the delete goes through"
    assert not Adventure.objects.filter(pk=aid).exists()


def test_a_reply_written_for_longer_than_a_claim_lasts_keeps_its_story_until_it_lands(
    alice_plays, fake_llm, monkeypatch
):
    """A claim lasts HOLD and is renewed while the reply is written (stories.tree.generation): a reply
    slower than several HOLDs still holds its story, and a turn sent meanwhile is refused every time."""
    import time
    from datetime import timedelta

    from stories.tree import generation

    monkeypatch.setattr(generation, "HOLD", timedelta(seconds=3))
    monkeypatch.setattr(generation, "RENEW_EVERY_S", 0.25)  # margin for a loaded test machine
    api = alice_plays
    aid = _post(api, "/api/adventures/", {"title": "Slow", "opening": "A long tale."}).json()["id"]
    url = f"/api/adventures/{aid}/turns/"
    with _reply_held_at_the_model(api, fake_llm, url, {"mode": "do", "text": "tell it"}, reply="It ends.") as first:
        held_until = time.monotonic() + 6.5  # over two HOLDs of writing
        tries = 0
        while time.monotonic() < held_until:
            refused = _post(api, url, {"mode": "do", "text": "interrupt"})
            assert refused.status_code == 409, (tries, refused.status_code, refused.content)
            tries += 1
    assert first["response"].status_code == 201 and tries > 3
    texts = list(Action.objects.filter(adventure_id=aid).order_by("depth").values_list("text", flat=True))
    assert texts == ["A long tale.", "tell it", "It ends."]
