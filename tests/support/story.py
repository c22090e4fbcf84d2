"""Building stories for tests without a model: the tree's own write functions."""

from stories import tree
from stories.models import Branch


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


def is_memory_request(recorded) -> bool:
    return recorded.body.get("messages", [{}])[0].get("content", "").startswith("You write memories")


def grow(adventure, upto, *, run=None, kind="story"):
    """Place story actions until the head path has ``upto`` actions, optionally running ``run(depth)`` after each."""
    adventure.refresh_from_db()
    head = Branch.objects.get(pk=adventure.head_branch_id)
    while head.tip_depth < upto:
        tree.place(adventure_id=adventure.pk, branch_id=head.pk, kind=kind,
                   text=f"Action {head.tip_depth + 1}: Mira walks past stone {head.tip_depth + 1} near the well.")
        head.refresh_from_db()
        if run:
            run(head.tip_depth)
    return head
