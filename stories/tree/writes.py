"""Every write to the story tree, the one door to it: an imported tree, place, take (retry),
select take, undo, edit, delete, a moderator's hide, fork, checkout (the head's one write path),
rename and delete branches. How branches share rows is stories.tree.storage.

Each branch is an independent story; sharing rows with ancestors is storage, never semantics.
So before a node is rewritten on branch H:
  * if H borrows it from an ancestor, H first gets its own copy of the nodes to its fork (``materialize``);
  * if other branches borrow it from H, they first get a frozen copy of what they read
    (``detach_borrowers``, into an internal segment).
No operation on one branch ever changes the story another branch reads.

Every function here runs in one transaction holding the adventure row lock: an adventure's writes are serialized.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from config import jobs
from config.errors import Conflict, InvalidRequest, NotFound
from stories.models import Action, Adventure, Branch, RedoTurn
from stories.tree import lineage, sql
from stories.tree.generation import BUSY, generation_check, held_claim
from stories.tree.signals import head_moved, nodes_copied, story_rewritten  # noqa: F401 (the tree's signals)
from stories.tree.storage import copy_rows, detach_borrowers, materialize, own_for_rewrite

DEPTH_SHIFT_OFFSET = 1_000_000  # parks rows out of the way while depths are renumbered


class TreeError(Conflict):
    """A tree operation the story's current state does not allow (409); the message says why."""


@dataclass(frozen=True)
class Locked:
    adventure: Adventure
    branch: Branch | None


def lock(
    adventure_id: int, branch_id: int | None = None, *, tree_write: bool = True, read_branch: bool = True
) -> Locked:
    """The one way to take an adventure's row lock (which serializes its tree writes), and re-read a
    branch (``branch_id``, the head by default; none without ``read_branch``). Must run inside
    ``transaction.atomic()``. Raises NotFound for no such adventure, and Conflict while another
    request's reply is being written (stories.tree.generation) unless ``tree_write`` is False: a
    writer that only needs the lock order (the memory pass's summary, a card's count) and changes
    no node. ``sql.PLACE_SQL`` takes this lock in the statement that appends a turn's node."""
    adventure = Adventure.objects.select_for_update().filter(pk=adventure_id).first()
    if adventure is None:
        raise NotFound("no such adventure")
    if tree_write:
        generation_check(adventure)
    if not read_branch:
        return Locked(adventure, None)
    branch = Branch.objects.get(pk=branch_id or adventure.head_branch_id, adventure=adventure)
    return Locked(adventure, branch)


def rewritten_notify(
    adventure_id: int, branch_id: int, from_depth: int, change: str, *, ends_redo: bool = True
) -> None:
    """Nodes of the branch changed from ``from_depth`` on (``story_rewritten``; the memory pass is
    asked for). ``ends_redo``: the change ends what undo kept to redo on it (all but an undo)."""
    _story_changed(adventure_id)
    if ends_redo:
        RedoTurn.objects.filter(branch_id=branch_id).delete()
    story_rewritten.send(
        sender=Branch, adventure_id=adventure_id, branch_id=branch_id, from_depth=from_depth, change=change
    )


def _story_changed(adventure_id: int, *, grown_to: int | None = None) -> None:
    """Every change of a story's text or path asks for the memory pass (after commit; config.jobs)."""
    jobs.memory_pass_after_commit(adventure_id=adventure_id, grown_to=grown_to)


def _save_branch(branch: Branch, *fields: str) -> None:
    branch.save(update_fields=list(fields))


def tip_set(branch: Branch, depth: int) -> None:
    """The one write path of a branch's tip (the depth of the newest node on its path), but for
    the append statement (stories.tree.sql). The tree's modules only."""
    branch.tip_depth = depth
    _save_branch(branch, "tip_depth")


def _set_head(adventure: Adventure, branch: Branch, *, moved: bool = True) -> None:
    """The one write path of an adventure's head (the branch played). ``moved``: play switched
    branches, so memory shows that path's summary and the pass is asked for."""
    adventure.head_branch = branch
    adventure.save(update_fields=["head_branch", "updated_at"])
    if moved:
        _story_changed(adventure.pk)
        head_moved.send(sender=Branch, adventure_id=adventure.pk, branch_id=branch.pk)


# ---------------------------------------------------------------------------- creation and deletion


def adventure_start(*, adventure: Adventure, opening: str) -> Branch:
    """Give a new adventure its root branch (the head) and, if any, its opening."""
    with transaction.atomic():
        root = Branch.objects.create(adventure=adventure, name="main")
        _set_head(adventure, root, moved=False)
        if opening:
            Action.objects.create(adventure=adventure, branch=root, depth=1, kind=Action.Kind.START, text=opening)
            tip_set(root, 1)
    return root


def adventure_delete(*, adventure_id: int) -> None:
    """The adventure goes with its whole tree, cards and memories, under its row lock: a memory pass
    writing for it finishes before the delete gathers what to remove (and what it wrote goes too),
    and none starts while the delete runs. Conflict while a reply is being written (delete after)."""
    with transaction.atomic():
        lock(adventure_id, read_branch=False).adventure.delete()


def tree_import(
    *,
    adventure: Adventure,
    branches: list[dict],
    actions: list[dict],
    head: int,
    batch: int,
    progress=lambda done, total: None,
) -> dict[int, int]:
    """Write an imported tree into ``adventure`` (new, empty; inside the caller's transaction):
    ``branches`` parents first or in any order (a cycle is InvalidRequest), ``actions`` in
    batches of ``batch`` rows (a node with two live takes is InvalidRequest), then the head.
    The document was checked whole before (stories.import_doc). Returns file id -> branch id."""
    lock(adventure.pk, read_branch=False)
    new_ids: dict[int, int] = {}
    pending = list(branches)
    while pending:  # parents first
        ready = [b for b in pending if b["parent"] is None or b["parent"] in new_ids]
        if not ready:
            raise InvalidRequest("import: the branches' parents form a cycle")
        for b in ready:
            new_ids[b["id"]] = Branch.objects.create(
                adventure=adventure,
                parent_id=new_ids.get(b["parent"]),
                fork_depth=b["fork_depth"],
                lineage=[],
                tip_depth=b["tip_depth"],
                name=b["name"],
                internal=b["internal"],
            ).pk
        pending = [b for b in pending if b["id"] not in new_ids]
    for b in branches:
        Branch.objects.filter(pk=new_ids[b["id"]]).update(lineage=[[new_ids[a], cap] for a, cap in b["lineage"]])
    rows = [
        Action(
            adventure=adventure,
            branch_id=new_ids[a["branch"]],
            depth=a["depth"],
            kind=a["kind"],
            text="" if a["hidden"] else a["text"],
            live=a["live"],
            hidden=a["hidden"],
            edited_at=a["edited_at"],
            actor=a.get("actor") or "",
        )
        for a in actions
    ]
    try:
        with transaction.atomic():
            for start in range(0, len(rows), batch):
                Action.objects.bulk_create(rows[start : start + batch])
                progress(min(start + batch, len(rows)), len(rows))
    except IntegrityError:  # the one-live-take constraint
        raise InvalidRequest("import: a node has more than one live take") from None
    _set_head(adventure, Branch.objects.get(pk=new_ids[head]), moved=False)
    return new_ids


def place(
    *,
    adventure_id: int,
    branch_id: int | None,
    kind: str,
    text: str,
    ask_pass: bool = True,
    release: str = "",
    redone_hidden: bool | None = None,
    teller: sql.Teller = sql.OWNER,
) -> Action:
    """Append a node after the tip of ``branch_id`` (None: the head, as it stands under the lock);
    it ends what undo kept to redo on the branch. ``ask_pass``: False when the caller asks for the
    memory pass itself once a series of changes is done (a turn asks after its reply, or when it
    fails). ``release``: a generation's claim token, freed in the same write (its reply).
    ``redone_hidden``: a node redo brings back (stories.tree.history), hidden as it was.
    ``teller``: a member's turn or a secret. The returned ``branch`` is the branch as it stands after."""
    node = {"kind": kind, "text": text, "release": release, "hidden": bool(redone_hidden), "teller": teller}
    placed = sql.place_node(
        adventure_id=adventure_id, branch_id=branch_id, held=held_claim(), ends_redo=redone_hidden is None, **node
    )
    if not placed.adventure:
        raise NotFound("no such adventure")
    if not placed.free:
        raise Conflict(BUSY, code="generating")
    action = placed.action
    if action is None:
        if kind == Action.Kind.START and Branch.objects.filter(pk=branch_id or placed.head_branch_id).exists():
            raise TreeError("the story already has an opening")
        raise NotFound("no such branch in this adventure")
    if ask_pass:  # a node all may read, not brought back, only grew the path: the pass may skip it
        plain = redone_hidden is None and teller.secret() == sql.OWNER and kind != Action.Kind.START
        _story_changed(adventure_id, grown_to=action.depth if plain else None)
    return action


def take_add(*, adventure_id: int, branch_id: int, expected_tip_id: int, kind: str, text: str) -> Action:
    """Add a new live take of the tip node (a retry); earlier takes are kept.

    ``expected_tip_id`` is the live tip the new take was generated for; if the
    tree moved meanwhile, raises TreeError instead of writing."""
    with transaction.atomic():
        branch = lock(adventure_id, branch_id).branch
        tip = lineage.node_at_even_hidden(branch, branch.tip_depth)
        if tip is None or tip.pk != expected_tip_id:
            raise TreeError("the story changed while the model was writing; nothing was saved, try again")
        depth = tip.depth
        own_for_rewrite(branch, depth)
        Action.objects.filter(branch=branch, depth=depth, live=True).update(live=False)
        secret = {"seen_by": tip.seen_by, "heard_by": tip.heard_by}  # a secret's new take: told to the same few
        action = Action.objects.create(
            adventure_id=adventure_id, branch=branch, depth=depth, kind=kind, text=text, **secret
        )
        rewritten_notify(adventure_id, branch.pk, depth, "replaced")
    return action


def take_select(*, adventure_id: int, action_id: int) -> Action:
    """Make ``action_id`` the live take of its node on the head branch's path."""
    with transaction.atomic():
        branch = lock(adventure_id).branch
        action = _action_on_path(branch, action_id)
        if action.live and action.branch_id == branch.pk:
            return action
        copies = materialize(branch, action.depth)
        if copies:
            action = copies[action.pk]
        detach_borrowers(branch, action.depth)
        Action.objects.filter(branch=branch, depth=action.depth, live=True).update(live=False)
        Action.objects.filter(pk=action.pk).update(live=True)
        action.live = True
        rewritten_notify(adventure_id, branch.pk, action.depth, "replaced")
    return action


def edit(*, adventure_id: int, action_id: int, text: str) -> Action:
    """Replace the text of a node of the head branch's story (this branch only)."""
    with transaction.atomic():
        branch = lock(adventure_id).branch
        action = _action_on_path(branch, action_id)
        if not action.live:
            raise TreeError("only the selected take can be edited; select this take first")
        copies = materialize(branch, action.depth)
        if copies:
            action = copies[action.pk]
        detach_borrowers(branch, action.depth)
        now = timezone.now()
        Action.objects.filter(pk=action.pk).update(text=text, edited_at=now)
        action.refresh_from_db()
        rewritten_notify(adventure_id, branch.pk, action.depth, "edited")
    return action


def delete(*, adventure_id: int, action_id: int) -> int:
    """Remove a node (all its takes) from the head branch's story; later nodes
    move up one depth. Returns the removed depth."""
    with transaction.atomic():
        branch = lock(adventure_id).branch
        action = _action_on_path(branch, action_id)
        if action.kind == Action.Kind.START:
            raise TreeError("the opening cannot be deleted; edit it instead")
        depth = action.depth
        own_for_rewrite(branch, depth)
        Action.objects.filter(branch=branch, depth=depth).delete()
        # Two steps so the one-live-take-per-node index never sees a collision.
        later = Action.objects.filter(branch=branch, depth__gt=depth)
        later.update(depth=F("depth") + DEPTH_SHIFT_OFFSET)
        Action.objects.filter(branch=branch, depth__gt=DEPTH_SHIFT_OFFSET).update(
            depth=F("depth") - DEPTH_SHIFT_OFFSET - 1
        )
        tip_set(branch, branch.tip_depth - 1)
        rewritten_notify(adventure_id, branch.pk, depth, "removed")
    return depth


def _action_on_path(branch: Branch, action_id: int) -> Action:
    action = Action.objects.filter(pk=action_id, adventure_id=branch.adventure_id).first()
    if action is None or not lineage.on_path(branch, action.branch_id, action.depth):
        raise TreeError("that action is not part of the current branch's story; switch to its branch first")
    return action


# ---------------------------------------------------------------------------- branches


def fork(*, adventure_id: int, action_id: int, name: str = "", checkout: bool = True) -> Branch:
    """Start a new branch whose story is the head branch's story up to
    ``action_id`` (or, for an action on another branch, that branch's story).
    Forking at a losing take makes that take the new branch's node. Copies
    nothing but that one take."""
    with transaction.atomic():
        locked = lock(adventure_id)
        adventure, head = locked.adventure, locked.branch
        action = Action.objects.filter(pk=action_id, adventure_id=adventure_id).first()
        if action is None:
            raise NotFound("no such action in this adventure")
        source = (
            head if lineage.on_path(head, action.branch_id, action.depth) else Branch.objects.get(pk=action.branch_id)
        )
        depth = action.depth if action.live else action.depth - 1
        if action.live and action.kind in (Action.Kind.DO, Action.Kind.SAY, Action.Kind.STORY):
            reply = lineage.node_at_even_hidden(source, action.depth + 1)  # a player's action forks with its reply
            if reply is not None and reply.is_model_output:
                depth = reply.depth
        new = Branch.objects.create(
            adventure_id=adventure_id,
            parent=source,
            fork_depth=depth,
            lineage=[[source.pk, depth]] + [[a, min(cap, depth)] for a, cap in source.lineage],
            tip_depth=depth,
            name=name or f"fork at {depth}",
        )
        if not action.live:
            copy_rows([action], to_branch=new, carry=False)
            Action.objects.filter(branch=new, depth=action.depth).update(live=True)
            tip_set(new, action.depth)
        if checkout:
            _set_head(adventure, new)
    return new


def checkout(*, adventure_id: int, branch_id: int) -> Branch:
    """Make ``branch_id`` the head: play continues at its tip. Conflict while a reply is written
    (the reply would land on the branch the player left)."""
    with transaction.atomic():
        adventure = lock(adventure_id, read_branch=False).adventure
        branch = Branch.objects.filter(pk=branch_id, adventure=adventure, internal=False).first()
        if branch is None:
            raise NotFound("no such branch in this adventure")
        _set_head(adventure, branch)
    return branch


def hide(*, adventure_id: int, action_id: int, hidden: bool) -> Action:
    """A moderator hides (or shows again) one take. When it is the live take, every branch that
    reads it is told (``story_rewritten``, "hidden"): the story, prompts and the memory of its block
    leave it out (or read it again). Conflict while a reply is written; NotFound for an action
    of another adventure."""
    with transaction.atomic():
        lock(adventure_id, read_branch=False)
        action = Action.objects.filter(pk=action_id, adventure_id=adventure_id).first()
        if action is None:
            raise NotFound("no such action in this adventure")
        if action.hidden == hidden:
            return action
        Action.objects.filter(pk=action.pk).update(hidden=hidden)
        action.hidden = hidden
        if action.live:
            for branch in Branch.objects.filter(adventure_id=adventure_id):
                if lineage.on_path(branch, action.branch_id, action.depth):
                    rewritten_notify(adventure_id, branch.pk, action.depth, "hidden")
    return action


def branch_rename(*, adventure_id: int, branch_id: int, name: str) -> Branch:
    with transaction.atomic():
        branch = lock(adventure_id, branch_id).branch
        if branch.internal:
            raise NotFound("no such branch in this adventure")
        branch.name = name
        _save_branch(branch, "name")
    return branch


def branch_delete(*, adventure_id: int, branch_id: int) -> None:
    """Delete a branch and its own actions. Branches forked from it keep their
    stories. The head cannot be deleted."""
    with transaction.atomic():
        locked = lock(adventure_id, branch_id)
        branch = locked.branch
        if branch.internal:
            raise NotFound("no such branch in this adventure")
        if locked.adventure.head_branch_id == branch.pk:
            raise TreeError("this is the branch being played; switch to another branch before deleting it")
        detach_borrowers(branch, branch.fork_depth + 1)
        for other in Branch.objects.filter(adventure_id=adventure_id).exclude(pk=branch.pk):
            if any(a == branch.pk for a, _ in other.lineage):
                other.lineage = [[a, cap] for a, cap in other.lineage if a != branch.pk]
                _save_branch(other, "lineage")
        branch.delete()
        _drop_unread_segments(adventure_id)


def _drop_unread_segments(adventure_id: int) -> None:
    """Internal segments no other branch reads any more hold nothing anyone sees."""
    while True:
        branches = list(Branch.objects.filter(adventure_id=adventure_id))
        read = {a for b in branches for a, _ in b.lineage}
        unread = [b.pk for b in branches if b.internal and b.pk not in read]
        if not unread:
            return
        Branch.objects.filter(pk__in=unread).delete()
