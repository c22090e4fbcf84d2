import pytest

from stories import accounts, tree
from stories.adventures import adventure_create


def memory_reply(body, n):
    """The fake model as a summarizer: memories name the block, summaries keep the current text."""
    system = body["messages"][0]["content"]
    user = body["messages"][-1]["content"]
    if system.startswith("You write memories"):
        passage = user.split("Passage:\n", 1)[1]
        return f"Mira remembered this: {passage.split()[0]} {passage.split()[-1]}"
    if system.startswith("You keep the running summary"):
        current = user.split("Current summary:\n", 1)[1].split("\n\nWhat happened since:", 1)[0]
        lines = user.split("What happened since:\n", 1)[1].splitlines()
        return f"{current} Later, {len(lines)} more things happened."
    return f"The story goes on ({n})."


@pytest.fixture
def memory_llm(fake_llm):
    fake_llm.reply = memory_reply
    return fake_llm


@pytest.fixture
def owner(alice, memory_llm):
    """alice, whose own endpoint writes memories and summaries and embeds (bag-of-words vectors)."""
    accounts.ai_settings_update(user_id=alice.pk, api_key="sk-alice-SENTINEL-0001", endpoint_url=memory_llm.url,
                                model="fake-model", embedding_model="fake-embed")
    return alice


@pytest.fixture
def adventure(owner):
    return adventure_create(owner_id=owner.pk, title="The Salt Road", opening="Action 1: dawn on the flats.",
                            persona_name="Mira", persona_pronouns="she/her")


def grow(adventure, upto, *, run=None, kind="story"):
    """Place story actions until the head path has ``upto`` actions, optionally running the pass after each."""
    from stories.models import Branch

    adventure.refresh_from_db()
    head = Branch.objects.get(pk=adventure.head_branch_id)
    while head.tip_depth < upto:
        tree.place(adventure_id=adventure.pk, branch_id=head.pk, kind=kind,
                   text=f"Action {head.tip_depth + 1}: Mira walks past stone {head.tip_depth + 1} near the well.")
        head.refresh_from_db()
        if run:
            run(head.tip_depth)
    return head
