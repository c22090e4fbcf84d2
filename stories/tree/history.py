"""Undo and redo, the tree's writes for history. Undo takes back a whole turn: the newest node, and
the player's action before it when that node is the model's reply to it (a continue, or an action
whose reply failed, is a turn of one node). What it took goes on the branch's redo stack
(``RedoTurn`` rows: each node's kind, text and whether a moderator hid it); redo places the newest
of them again as new nodes (the memory pass remembers them again), hidden as they were.

Each is decided and done in one transaction under the adventure row lock with the generation check
(``writes.lock``): two at once never take back or bring back one turn twice, and nothing written in
between can make them remove other nodes than they record. Any other write to the branch (a turn,
an edit, a take, a delete, a hide) ends its stack (``writes.rewritten_notify``, ``tree_sql``), so a
redo lands only on the very end it was taken from."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction

from config.errors import Forbidden
from stories.models import Action, Branch, RedoTurn
from stories.tree import lineage, sql, writes
from stories.tree.storage import detach_borrowers

REDO_MAX = 50  # turns kept to redo, per branch
PLAYER_KINDS = (Action.Kind.DO, Action.Kind.SAY, Action.Kind.STORY)


def node_undo(*, adventure_id: int) -> int:
    """Remove the newest node (with all its takes) from the head branch's story. Returns the
    removed depth. Other branches keep their stories; the redo stack is the caller's."""
    with transaction.atomic():
        branch = writes.lock(adventure_id).branch
        depth = branch.tip_depth
        if depth == 0:
            raise writes.TreeError("there is nothing to undo")
        node = lineage.node_at_even_hidden(branch, depth)
        if node.kind == Action.Kind.START:
            raise writes.TreeError("the opening cannot be undone; edit it instead")
        if depth > branch.fork_depth:
            detach_borrowers(branch, depth)
            Action.objects.filter(branch=branch, depth=depth).delete()
        else:
            # The node belongs to an ancestor: read one node less of it.
            branch.fork_depth = depth - 1
            branch.lineage = [[a, min(cap, depth - 1)] for a, cap in branch.lineage]
            branch.save(update_fields=["fork_depth", "lineage"])
        writes.tip_set(branch, depth - 1)
        writes.rewritten_notify(adventure_id, branch.pk, depth, "removed", ends_redo=False)
    return depth


def turn_undo(*, adventure_id: int, member_id: int | None = None) -> dict:
    """Take back the newest turn of the branch played and keep it to redo. Returns the depth the
    story now ends at and what was removed. Conflict at the opening or while a reply is written.
    ``member_id``: a member asks (not the owner): only a turn they wrote is theirs to undo."""
    with transaction.atomic():
        branch = writes.lock(adventure_id).branch
        tip = lineage.node_at_even_hidden(branch, branch.tip_depth)
        if tip is None or tip.kind == Action.Kind.START:
            raise writes.TreeError("there is nothing to undo: the story is at its opening")
        nodes = [tip]
        before = lineage.node_at_even_hidden(branch, tip.depth - 1) if tip.is_model_output else None
        if before is not None and before.kind in PLAYER_KINDS:
            nodes.insert(0, before)
        if member_id is not None:
            turn_authors_only(nodes, member_id=member_id, doing="undo")
        for _ in nodes:
            node_undo(adventure_id=adventure_id)
        kept = [
            {"kind": n.kind, "text": n.text, "hidden": n.hidden, "author": n.author_id, "actor": n.actor}
            | {"seen_by": n.seen_by, "heard_by": n.heard_by}
            for n in nodes
        ]
        RedoTurn.objects.create(branch=branch, from_depth=nodes[0].depth, nodes=kept)
        past = RedoTurn.objects.filter(branch=branch).order_by("-id").values_list("pk", flat=True)[REDO_MAX:]
        RedoTurn.objects.filter(pk__in=list(past)).delete()
    return {"removed_depth": nodes[0].depth, "removed": len(nodes), "tip_depth": nodes[0].depth - 1, "can_redo": True}


def turn_authors_only(nodes: list[Action], *, member_id: int, doing: str) -> None:
    """A member may undo, redo or retry only a turn whose player's node they wrote."""
    players = [n for n in nodes if n.kind in PLAYER_KINDS]
    if not players or any(n.author_id != member_id for n in players):
        raise Forbidden(f"only the turn's author and the story's owner can {doing} it")


def turn_redo(*, adventure_id: int, member_id: int | None = None) -> dict:
    """Bring back the turn undo took last, onto the end it was taken from. Returns the nodes placed
    that readers see (a hidden one is placed back hidden, never shown) and whether more can be
    redone. Conflict when nothing is kept to redo (none was undone here, or the story changed
    since) or while a reply is written."""
    with transaction.atomic():
        branch = writes.lock(adventure_id).branch
        turn = RedoTurn.objects.filter(branch=branch).order_by("-id").first()
        if turn is None or turn.from_depth != branch.tip_depth + 1:
            RedoTurn.objects.filter(branch=branch).delete()
            raise writes.TreeError(
                "there is nothing to redo: no turn was undone on this branch, or its story has changed since "
                "(a new turn, an edit, a retry or a delete ends what undo kept)"
            )
        if member_id is not None and not any(n.get("author") == member_id for n in turn.nodes):
            raise Forbidden("only the turn's author and the story's owner can redo it")
        authors = {n.get("author") for n in turn.nodes} - {None}
        authors &= set(get_user_model().objects.filter(pk__in=authors).values_list("pk", flat=True))
        placed = [
            writes.place(
                adventure_id=adventure_id,
                branch_id=branch.pk,
                kind=node["kind"],
                text=node["text"],
                redone_hidden=bool(node.get("hidden")),
                teller=sql.Teller(
                    author_id=node.get("author") if node.get("author") in authors else None,
                    actor=node.get("actor") or "",
                    seen_by=node.get("seen_by"),
                    heard_by=node.get("heard_by"),
                ),
            )
            for node in turn.nodes
        ]
        turn.delete()
        more = RedoTurn.objects.filter(branch=branch).exists()
    shown = [a for a in placed if not a.hidden]
    return {"actions": shown, "tip_depth": placed[-1].depth, "can_redo": more}


def can_redo(branch: Branch) -> bool:
    """Whether redo would bring a turn back onto ``branch``'s end now."""
    return RedoTurn.objects.filter(branch=branch, from_depth=branch.tip_depth + 1).exists()
