"""alice's and bob's worlds: one of everything that has an id."""

import pytest
from django.contrib.auth import get_user_model

from memory.models import CardClaim, CardProposal
from stories.models import Membership


def make_world(api, *, title, secret, agent, world_name):
    """An adventure with a turn, a fork, a card, a memory and an import job (of its export), and a world
    with a token and an agent."""
    adventure = api.post(
        "/api/adventures/",
        {
            "title": title,
            "opening": "You hold the key.",
            "cards": [{"name": "Key", "keys": ["key"], "entry": secret}],
        },
        format="json",
    ).json()
    aid = adventure["id"]
    assert (
        api.post(f"/api/adventures/{aid}/turns/", {"mode": "do", "text": "turn the key"}, format="json").status_code
        == 201
    )
    action = api.get(f"/api/adventures/{aid}/story/").json()["actions"][-1]
    branch = api.post(
        f"/api/adventures/{aid}/actions/{action['id']}/fork/", {"name": "b", "checkout": False}, format="json"
    ).json()
    card = api.get(f"/api/adventures/{aid}/cards/").json()[0]
    memory = api.post(
        f"/api/adventures/{aid}/memories/", {"text": f"{title}: the key is hidden."}, format="json"
    ).json()
    world = api.post("/api/worlds/", {"name": world_name}, format="json").json()
    token = api.post(f"/api/worlds/{world['id']}/tokens/", {"name": "t"}, format="json").json()
    api.post(
        f"/api/worlds/{world['id']}/events/",
        {"type": "say", "actor": agent, "text": "meet at the old mill"},
        format="json",
    )
    agent_memory = api.get(f"/api/worlds/{world['id']}/agents/{agent}/memories/").json()[0]
    job = api.post("/api/adventures/import/", api.get(f"/api/adventures/{aid}/export/").json(), format="json").json()
    scenario = api.post(f"/api/adventures/{aid}/scenario/").json()  # private: the key is no share link
    starter = api.get("/api/scenarios/", {"limit": 1}).json()[0]
    api.post(f"/api/scenarios/{starter['key']}/report/", {"reason": "other", "text": f"{title} reports"}, format="json")
    claim = CardClaim.objects.create(  # what the story changed on the card (read by the pass in play)
        adventure_id=aid, card_id=card["id"], action_id=action["id"], slot="status", value="lost", text=secret
    )
    proposal = CardProposal.objects.create(adventure_id=aid, name=f"{agent.title()}son", evidence=[action["id"]])
    # a story played together: a member who watches, an invitation to another user, a link
    users = get_user_model().objects
    friend = users.create_user(username=f"{agent}-friend", password="friend-pass-123")
    Membership.objects.create(adventure_id=aid, user=friend, role="watcher")
    invitee = users.create_user(username=f"{agent}-invitee", password="invitee-pass-123")
    invite = api.post(f"/api/adventures/{aid}/invites/", {"username": invitee.username}, format="json").json()
    link = api.post(f"/api/adventures/{aid}/invites/", {"role": "watcher"}, format="json").json()
    return {
        "invite_id": invite["id"],
        "user_id": friend.pk,
        "code": link["token"],  # an invitation link's
        "claim_id": claim.pk,
        "proposal_id": proposal.pk,
        "scenario_key": scenario["key"],
        "number": 1,  # the first version of that scenario
        "field": "plot_essentials",  # the adventure text whose versions are read
        "job_id": job["id"],
        "adventure_id": aid,
        "action_id": action["id"],
        "branch_id": branch["id"],
        "card_id": card["id"],
        "memory_id": memory["id"],
        "world_id": world["id"],
        "token_id": token["id"],
        "agent_id": agent,
        "agent_memory_id": agent_memory["id"],
        "raw_token": token["token"],
    }


@pytest.fixture
def alices_world(alice_plays):
    ids = make_world(
        alice_plays, title="Alice's secret", secret="A silver key.", agent="ann", world_name="Alice's town"
    )
    memory = alice_plays.post(
        f"/api/adventures/{ids['adventure_id']}/memories/", {"text": "Alice hid the key."}, format="json"
    ).json()
    return {**ids, "memory_id": memory["id"]}


@pytest.fixture
def bobs_world(bob_api, fake_llm):
    bob_api.patch(
        "/api/settings/", {"endpoint_url": fake_llm.url, "api_key": "sk-bob", "model": "fake-model"}, format="json"
    )
    return make_world(bob_api, title="Bob's tale", secret="A brass key.", agent="bea", world_name="Bob's town")
