"""A database outage is a 503 with Retry-After, never a 500: the embedded
Postgres is stopped during play (once in the middle of a turn) and started
again, and nothing the player wrote is lost."""

import pytest
from django.db import connection

from config import embedded
from stories.models import Action

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.alone]


@pytest.fixture
def postgres(settings):
    """Stop and start the session's embedded Postgres; always started again."""

    class Control:
        def stop(self):
            embedded.stop_postgres(settings.DATA_DIR)

        def start(self):
            embedded.ensure_postgres(settings.DATA_DIR)
            connection.close()  # the old connection died with the server

    control = Control()
    yield control
    if embedded.postgres_pid(settings.DATA_DIR) is None:
        control.start()


def _answers_503(response):
    assert response.status_code == 503, (response.status_code, response.content[:300])
    assert int(response["Retry-After"]) > 0
    return response


def test_while_postgres_is_down_every_route_answers_503_and_a_cut_turn_keeps_the_action(
    alice_plays, fake_llm, postgres, client, alice
):
    api = alice_plays
    aid = api.post("/api/adventures/", {"title": "Outage", "opening": "The lights flicker."}, format="json").json()[
        "id"
    ]
    assert api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "look"}, format="json").status_code == 201
    client.force_login(alice)

    # The server goes away while the model is writing the reply.
    def reply_then_outage(body, n):
        postgres.stop()
        return "The reply nobody stored."

    fake_llm.reply = reply_then_outage
    cut = _answers_503(
        api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "run for the door"}, format="json")
    )
    body = cut.json()
    assert body["error"] == "unavailable" and "try again" in body["detail"]
    assert [a["text"] for a in body["stored_actions"]] == ["run for the door"]
    assert "retry" in body["hint"]

    # Down: reads, writes, the web pages and the admin answer 503 (JSON under /api/), never 500.
    assert _answers_503(api.get("/api/adventures/")).json()["error"] == "unavailable"
    _answers_503(api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "again"}, format="json"))
    _answers_503(api.get(f"/api/adventures/{aid}/memories/"))
    _answers_503(api.patch("/api/settings/", {"temperature": 0.5}, format="json"))
    page = _answers_503(client.get("/play/"))
    assert b"Back in a moment" in page.content
    health = client.get("/healthz")
    assert health.status_code == 503 and health.json()["database"]["ok"] is False

    postgres.start()
    fake_llm.reply = lambda body, n: "The door gives way."
    story = api.get(f"/api/adventures/{aid}/story/").json()["actions"]
    assert story[-1]["text"] == "run for the door", "the player's action survived the outage"
    assert not Action.objects.filter(text="again").exists(), "nothing half-written while it was down"
    retried = api.post(f"/api/adventures/{aid}/retry/")
    assert retried.status_code == 201 and retried.json()["actions"][0]["text"] == "The door gives way."
    assert client.get("/healthz").json()["database"]["ok"] is True
