"""The story summary follows the tree: each summary hangs off the story node it
covers up to (like a memory), so a path's summary is its newest snapshot, and
undo, delete, edit, hide and branch switches show, at once and with no model
call, the summary as it stood at that point of that path.

``Adventure.story_summary`` is kept equal to the head path's summary by one
write path, ``summary_refresh``; every change of the tree or of a snapshot
calls it in the same transaction. The player's own text is a snapshot too
(``player=True``): no rewrite, undo or pass loses it, and rewrites start from it.
"""

from __future__ import annotations

from django.db import connection, transaction

from config.compiled_once import CompiledOnce
from memory.models import Cursor, SummarySnapshot
from stories.models import Adventure, Branch
from stories.prompt.context import SummaryFrame
from stories.tree import lineage, writes

SNAPSHOTS = SummarySnapshot._meta.db_table
CURSORS = Cursor._meta.db_table


def snapshot_on_path(branch: Branch, *, player_only: bool = False, up_to: int | None = None) -> SummarySnapshot | None:
    """The newest snapshot on ``branch``'s path (the player's newest with
    ``player_only``), at or below depth ``up_to`` when given."""
    up_to = branch.tip_depth if up_to is None else up_to
    if len(branch.lineage) > lineage.RECENT_COMPILED_ANCESTORS:
        query = _snapshot_query(
            (branch.lineage, player_only), adventure_id=branch.adventure_id, own=branch.pk, up_to=up_to
        )
        return next(iter(query), None)
    values = {"adventure_id": branch.adventure_id, "own": branch.pk, "up_to": up_to}
    for i, (ancestor_id, cap) in enumerate(branch.lineage):
        values[f"a{i}"], values[f"c{i}"] = ancestor_id, cap
    return _SNAPSHOT.first((len(branch.lineage), player_only), **values)


def _snapshot_query(shape, *, adventure_id, own, up_to, **ancestors):
    """``snapshot_on_path``'s query; ``shape``: (the lineage or its length, player_only)."""
    path, player_only = shape
    if isinstance(path, int):  # CompiledOnce's markers name the ancestors
        path = [[ancestors[f"a{i}"], ancestors[f"c{i}"]] for i in range(path)]
    branch = Branch(pk=own, adventure_id=adventure_id, lineage=path)
    qs = SummarySnapshot.objects.filter(lineage.path_q(branch), adventure_id=adventure_id, depth__lte=up_to)
    if player_only:
        qs = qs.filter(player=True)
    return qs.order_by("-depth", "-id")[:1]


_SNAPSHOT = CompiledOnce(_snapshot_query)  # every pass and every summary read asks it


def summary_base(branch: Branch) -> str:
    """What a rewrite over ``branch``'s path starts from: the player's newest text
    on it, else the text the player gave the adventure before any story node."""
    own = snapshot_on_path(branch, player_only=True)
    if own is not None:
        return own.text
    cursor = Cursor.objects.filter(adventure_id=branch.adventure_id).first()
    return cursor.summary_base if cursor else ""


def summary_frame(branch: Branch, from_depth: int, *, current: str) -> SummaryFrame:
    """The path's summaries around a story handed to the prompt builder from ``from_depth`` on (its
    ``before`` picks the one below the window it lays out): the snapshots from there to the tip and
    the newest one below, with what a window that finds none below starts from (``summary_base``'s
    two reads), in one query: every turn asks it."""
    on_path, path = lineage.path_sql(branch, table="s")  # SQL as written, no ORM compile
    where = f"{on_path} AND s.adventure_id = %s AND s.depth <= %s"
    params = [*path, branch.adventure_id, branch.tip_depth]
    newest = "ORDER BY s.depth DESC, s.id DESC LIMIT 1"
    with connection.cursor() as db:
        db.execute(
            f"(SELECT 0, s.depth, s.id, s.player, s.text FROM {SNAPSHOTS} s WHERE {where} AND s.depth >= %s)"
            f" UNION ALL (SELECT 0, s.depth, s.id, s.player, s.text FROM {SNAPSHOTS} s WHERE {where}"
            f" AND s.depth < %s {newest})"
            f" UNION ALL (SELECT 1, s.depth, s.id, s.player, s.text FROM {SNAPSHOTS} s WHERE {where}"
            f" AND s.player {newest})"
            f" UNION ALL (SELECT 2, 0, 0, false, c.summary_base FROM {CURSORS} c WHERE c.adventure_id = %s LIMIT 1)",
            [*params, from_depth, *params, from_depth, *params, branch.adventure_id],
        )
        found = db.fetchall()
    rows = sorted(row[1:] for row in found if row[0] == 0)
    player_own = [row[4] for row in found if row[0] == 1]
    cursor_base = [row[4] for row in found if row[0] == 2]
    snapshots = tuple((depth, player, text) for depth, _, player, text in rows)
    needs_base = rows and rows[0][0] >= from_depth
    base = (player_own or cursor_base or [""])[0] if needs_base else ""
    return SummaryFrame(current=current, base=base, snapshots=snapshots)


def summary_refresh(adventure_id: int) -> str:
    """The one write path of ``Adventure.story_summary``: the newest snapshot on
    the head's path, else the adventure's base text. Runs in the caller's
    transaction (tree signals, the pass, the player's edit)."""
    adventure = Adventure.objects.filter(pk=adventure_id).values("head_branch_id", "story_summary").first()
    if adventure is None or adventure["head_branch_id"] is None:
        return ""
    head = Branch.objects.get(pk=adventure["head_branch_id"])
    snapshot = snapshot_on_path(head)
    text = snapshot.text if snapshot is not None else summary_base(head)
    if text != adventure["story_summary"]:
        Adventure.objects.filter(pk=adventure_id).update(story_summary=text)
    return text


def snapshot_write(
    *, adventure_id: int, branch: Branch, depth: int, text: str, player: bool, replace_player: bool = False
) -> SummarySnapshot:
    """Hang ``text`` off the node at ``depth`` of ``branch``'s path (depth 0: the
    root). A player's text at a node replaces a written one there; a written one
    replaces the player's only when the player asked for it (``replace_player``:
    a regenerate)."""
    node_branch = lineage.owner_at(branch, depth) if depth else branch.pk
    existing = SummarySnapshot.objects.filter(adventure_id=adventure_id, branch_id=node_branch, depth=depth).first()
    if existing is not None:
        if existing.player and not player and not replace_player:
            return existing
        SummarySnapshot.objects.filter(pk=existing.pk).update(text=text, player=player)
        existing.text, existing.player = text, player
        return existing
    return SummarySnapshot.objects.create(
        adventure_id=adventure_id, branch_id=node_branch, depth=depth, text=text, player=player
    )


def player_summary_set(*, adventure: Adventure, text: str) -> None:
    """The player's own summary text, at the head's tip: shown now, kept through
    every rewrite, undo and pass, and the start of later rewrites."""
    with transaction.atomic():
        head = writes.lock(adventure.pk).branch  # the adventure row first, like every tree write
        cursor, _ = Cursor.objects.get_or_create(adventure=adventure)
        if head.tip_depth == 0:
            Cursor.objects.filter(pk=cursor.pk).update(summary_base=text)
        else:
            snapshot_write(adventure_id=adventure.pk, branch=head, depth=head.tip_depth, text=text, player=True)
        summary_refresh(adventure.pk)


def on_rewritten(*, adventure_id: int, branch_id: int, from_depth: int, change: str) -> None:
    """Nodes of ``branch_id`` changed from ``from_depth`` on: written snapshots
    that covered them are no longer true and go; the player's stay (after an undo
    or delete, at the node before, as hand-written memories do)."""
    SummarySnapshot.objects.filter(branch_id=branch_id, depth__gte=from_depth, player=False).delete()
    if change == "removed":
        moved = list(
            SummarySnapshot.objects.filter(branch_id=branch_id, depth__gte=from_depth, player=True).order_by("depth")
        )
        for snapshot in moved:
            depth = max(snapshot.depth - 1, 1) if snapshot.depth > from_depth else max(from_depth - 1, 1)
            SummarySnapshot.objects.filter(branch_id=branch_id, depth=depth).exclude(pk=snapshot.pk).delete()
            SummarySnapshot.objects.filter(pk=snapshot.pk).update(depth=depth)
    summary_refresh(adventure_id)


def on_copied(*, adventure_id: int, from_branch_id: int, to_branch_id: int, depths: list[int]) -> None:
    """Snapshots hanging off copied nodes hang off the copies too."""
    SummarySnapshot.objects.bulk_create(
        [
            SummarySnapshot(
                adventure_id=adventure_id, branch_id=to_branch_id, depth=s.depth, text=s.text, player=s.player
            )
            for s in SummarySnapshot.objects.filter(branch_id=from_branch_id, depth__in=depths)
        ],
        ignore_conflicts=True,
    )
