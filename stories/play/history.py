"""Undo and redo a whole turn: the player's action and the reply to it go together, and what was
taken back can be brought back while the story has not moved on since.

Undo removes the newest node, and the player's action before it when that node is the model's
reply to it (a continue, or an action whose reply failed, is a turn of one node). What was
removed (each node's kind and text, its chosen take) goes on a redo stack kept in Redis per
branch for REDO_TTL_S; redo places it again as new nodes (the memory pass remembers them again).
A new turn, an edit or anything else that moves the story's end empties it: redo brings back
only onto the very end it was taken from."""

from __future__ import annotations

import json

from django.db import transaction

from config.errors import Conflict
from config.redis_pool import redis_client
from stories import lineage, tree
from stories.models import Action, Adventure

REDO_TTL_S = 3600
REDO_MAX = 50  # turns kept to redo, per branch


def _stack_key(adventure: Adventure, branch_id: int) -> str:
    return f"redo:{adventure.pk}:{adventure.created_at.timestamp()}:{branch_id}"


def undo_turn(*, adventure: Adventure) -> dict:
    """Take back the newest turn of the branch played. Returns the depth the story now ends at,
    the nodes removed, and whether there is something to redo."""
    with transaction.atomic():
        branch = lineage.head(adventure)
        tip = lineage.node_at(branch, branch.tip_depth)
        if tip is None or tip.kind == Action.Kind.START:
            raise Conflict("there is nothing to undo: the story is at its opening")
        nodes = [tip]
        before = lineage.node_at(branch, tip.depth - 1) if tip.is_model_output else None
        if before is not None and before.kind in (Action.Kind.DO, Action.Kind.SAY, Action.Kind.STORY):
            nodes.insert(0, before)
        for _ in nodes:
            tree.undo(adventure_id=adventure.pk)
        branch.refresh_from_db()
    turn = {"from_depth": nodes[0].depth, "nodes": [{"kind": n.kind, "text": n.text} for n in nodes]}
    client, key = redis_client(), _stack_key(adventure, branch.pk)
    stack = [t for t in json.loads(client.get(key) or b"[]") if t["from_depth"] > branch.tip_depth]
    stack = (stack + [turn])[-REDO_MAX:]
    client.set(key, json.dumps(stack), ex=REDO_TTL_S)
    return {"removed_depth": nodes[0].depth, "removed": len(nodes), "tip_depth": branch.tip_depth, "can_redo": True}


def redo_turn(*, adventure: Adventure) -> dict:
    """Bring back the turn undo took last, onto the end it was taken from."""
    branch = lineage.head(adventure)
    client, key = redis_client(), _stack_key(adventure, branch.pk)
    stack = json.loads(client.get(key) or b"[]")
    if not stack or stack[-1]["from_depth"] != branch.tip_depth + 1:
        client.delete(key)
        raise Conflict("there is nothing to redo: no turn was undone here, or the story has moved on since")
    turn = stack.pop()
    with transaction.atomic():
        placed = [
            tree.place(adventure_id=adventure.pk, branch_id=branch.pk, kind=node["kind"], text=node["text"])
            for node in turn["nodes"]
        ]
    client.set(key, json.dumps(stack), ex=REDO_TTL_S)
    return {"actions": placed, "tip_depth": placed[-1].depth, "can_redo": bool(stack)}
