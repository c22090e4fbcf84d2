"""How branches share rows: copy-on-write. A branch reads its ancestors' nodes up to its fork
(``Branch.lineage``); before a node is rewritten on branch H, H gets its own copy of the nodes it
borrows (``materialize``), and branches that borrow H's nodes get a frozen copy of what they read
(``detach_borrowers``). Called only by stories.tree.writes, inside its transaction and lock."""

from __future__ import annotations

from stories.models import Action, Branch
from stories.tree import lineage
from stories.tree.signals import nodes_copied


def copy_rows(rows: list[Action], *, to_branch: Branch, carry: bool = True) -> dict[int, Action]:
    """Copy action rows (keeping depth, kind, text, live, hidden, times) onto ``to_branch``;
    returns old id -> copy. ``carry``: whole nodes are copied, so what hangs off
    them (memories) follows."""
    copies = {}
    for row in rows:
        copies[row.pk] = Action(
            adventure_id=row.adventure_id,
            branch=to_branch,
            depth=row.depth,
            kind=row.kind,
            text=row.text,
            live=row.live,
            hidden=row.hidden,
            edited_at=row.edited_at,
            author_id=row.author_id,
            actor=row.actor,
            seen_by=row.seen_by,
            heard_by=row.heard_by,
        )
    # Copies share one created_at; ascending ids keep the takes' order.
    Action.objects.bulk_create(list(copies.values()))
    by_source: dict[int, set[int]] = {}
    for row in rows if carry else []:
        by_source.setdefault(row.branch_id, set()).add(row.depth)
    for source_id, depths in by_source.items():
        nodes_copied.send(
            sender=Branch,
            adventure_id=to_branch.adventure_id,
            from_branch_id=source_id,
            to_branch_id=to_branch.pk,
            depths=sorted(depths),
        )
    return copies


def materialize(branch: Branch, depth: int) -> dict[int, Action]:
    """Give ``branch`` its own copy of its path's nodes from ``depth`` to its fork
    point (all takes), so they can be rewritten without touching an ancestor.
    Returns old id -> copy. No-op when ``branch`` already owns ``depth``."""
    if depth > branch.fork_depth:
        return {}
    rows = []
    for d in range(depth, branch.fork_depth + 1):
        rows.extend(lineage.takes_at(branch, d))
    copies = copy_rows(rows, to_branch=branch)
    new_fork = depth - 1
    old_lineage = branch.lineage
    branch.lineage = [[a, min(cap, new_fork)] for a, cap in old_lineage]
    branch.fork_depth = new_fork
    branch.save(update_fields=["lineage", "fork_depth"])
    # Descendants read those depths through ``branch`` now, not through its ancestors.
    ancestor_ids = {a for a, _ in old_lineage}
    for other in Branch.objects.filter(adventure_id=branch.adventure_id).exclude(pk=branch.pk):
        ids = [a for a, _ in other.lineage]
        if branch.pk not in ids:
            continue
        at = ids.index(branch.pk)
        other.lineage = [
            [a, min(cap, new_fork) if i > at and a in ancestor_ids else cap] for i, (a, cap) in enumerate(other.lineage)
        ]
        other.save(update_fields=["lineage"])
    return copies


def detach_borrowers(branch: Branch, depth: int) -> None:
    """Before ``branch``'s own nodes at >= ``depth`` change, move every other branch
    that reads them onto an internal segment holding a frozen copy."""
    readers = lineage.borrowers(branch, from_depth=depth)
    if not readers:
        return
    top = max(cap for other in readers for a, cap in other.lineage if a == branch.pk)
    segment = Branch.objects.create(
        adventure_id=branch.adventure_id,
        parent=branch,
        fork_depth=depth - 1,
        lineage=[[branch.pk, depth - 1]] + [[a, min(cap, depth - 1)] for a, cap in branch.lineage],
        tip_depth=top,
        name=f"{branch.name or 'branch'} (kept for forks)",
        internal=True,
    )
    rows = list(
        Action.objects.filter(branch=branch, depth__gte=depth, depth__lte=top).order_by("depth", "created_at", "id")
    )
    copy_rows(rows, to_branch=segment)
    for other in readers:
        new = []
        for a, cap in other.lineage:
            if a == branch.pk and cap >= depth:
                new += [[segment.pk, cap], [branch.pk, depth - 1]]
            else:
                new.append([a, cap])
        other.lineage = new
        fields = ["lineage"]
        if other.parent_id == branch.pk and other.fork_depth >= depth:
            other.parent = segment
            fields.append("parent")
        other.save(update_fields=fields)


def own_for_rewrite(branch: Branch, depth: int) -> None:
    materialize(branch, depth)
    detach_borrowers(branch, depth)
