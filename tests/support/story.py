"""Building stories for tests without a model: the tree's own write functions."""

import json
import re

from stories.models import Branch
from stories.tree import writes


def memory_reply(body, n):
    """The fake model as a summarizer: memories name the block, summaries keep the current text."""
    system = body["messages"][0]["content"]
    user = body["messages"][-1]["content"]
    if system.startswith("You write memories"):
        passage = user.split("Passage:\n", 1)[1]
        return f"Mira remembered this: {passage.split()[0]} {passage.split()[-1]}"
    if system.startswith("You keep the memories of each character"):
        return cast_reply(user)
    if system.startswith("You keep the running summary"):
        current = user.split("Current summary:\n", 1)[1].split("\n\nWhat happened since:", 1)[0]
        lines = user.split("What happened since:\n", 1)[1].splitlines()
        return f"{current} Later, {len(lines)} more things happened."
    return f"The story goes on ({n})."


def cast_reply(user: str) -> str:
    """The fake model as the cast's writer (plumbing, not a reader): it reads a member as present for
    the sentences that name it, and each remembers the last two of them."""
    cast = [n.strip() for n in user.split("The cast: ", 1)[1].split("\n", 1)[0].split(",")]
    passage = user.split("The passage:\n", 1)[1]
    sentences = re.findall(r"^(\d+)\. (.*)$", passage, re.M)
    scene, memories = [], []
    for number, sentence in sentences:
        scene.append(
            {"sentence": int(number), "present": [n for n in cast if re.search(rf"\b{re.escape(n)}\b", sentence)]}
        )
    for name in cast:
        mine = [s for _, s in sentences if re.search(rf"\b{re.escape(name)}\b", s)]
        if mine:
            memories.append({"character": name, "kind": "witnessed", "importance": 0.6, "text": " ".join(mine[-2:])})
    return "```json\n" + json.dumps({"scene": scene, "memories": memories}) + "\n```"


def is_memory_request(recorded) -> bool:
    return recorded.body.get("messages", [{}])[0].get("content", "").startswith("You write memories")


def grow(adventure, upto, *, run=None, kind="story"):
    """Place story actions until the head path has ``upto`` actions, optionally running ``run(depth)`` after each."""
    adventure.refresh_from_db()
    head = Branch.objects.get(pk=adventure.head_branch_id)
    while head.tip_depth < upto:
        writes.place(
            adventure_id=adventure.pk,
            branch_id=head.pk,
            kind=kind,
            text=f"Action {head.tip_depth + 1}: Mira walks past stone {head.tip_depth + 1} near the well.",
        )
        head.refresh_from_db()
        if run:
            run(head.tip_depth)
    return head
