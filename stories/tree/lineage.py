"""Every read of "which rows are this branch's story". Nothing else knows how
branches borrow their ancestors' actions.

A branch's path is its own actions plus, for each [ancestor_id, cap] in its
``lineage``, that ancestor's actions at depth <= cap. Only live takes are part
of the story; losing takes are read only by ``takes_at``.
"""

from __future__ import annotations

from django.db.models import Count, Q, QuerySet

from config.compiled_once import CompiledOnce
from stories.models import Action, Branch


def head(adventure, *, for_update: bool = False) -> Branch:
    """The branch being played (the adventure's head), read afresh; ``for_update`` locks its row."""
    branches = Branch.objects.select_for_update() if for_update else Branch.objects
    return branches.get(pk=adventure.head_branch_id, adventure_id=adventure.pk)


def path_q(branch: Branch, *, prefix: str = "") -> Q:
    """The lineage clause: rows on ``branch``'s path (any take). ``prefix`` lets
    other tables join through a relation (e.g. ``"action__"``)."""
    q = Q(**{f"{prefix}branch_id": branch.pk})
    for ancestor_id, cap in branch.lineage:
        q |= Q(**{f"{prefix}branch_id": ancestor_id, f"{prefix}depth__lte": cap})
    return q


def path_sql(branch: Branch, *, table: str) -> tuple[str, list]:
    """The same clause as ``path_q``, as SQL over ``table``'s branch_id and depth
    columns, for hand-written hot queries."""
    parts = [f"{table}.branch_id = %s"]
    params: list = [branch.pk]
    for ancestor_id, cap in branch.lineage:
        parts.append(f"({table}.branch_id = %s AND {table}.depth <= %s)")
        params += [ancestor_id, cap]
    return "(" + " OR ".join(parts) + ")", params


EVERY = 0  # ``viewer`` for the story's shape: every node, secrets too (whose turn it is), never shown to a reader


def seen_q(viewer: int | None, *, prefix: str = "") -> Q:
    """The nodes ``viewer`` (a user id) may read: the shared story and the secrets told to them
    (stories.party.secrets). None: the shared story alone, what memory, the summary and the claims
    are built from; EVERY: every node."""
    if viewer == EVERY:
        return Q()
    q = Q(**{f"{prefix}seen_by__isnull": True})
    return q if viewer is None else q | Q(**{f"{prefix}seen_by__contains": [viewer]})


def story(branch: Branch, *, viewer: int | None = None) -> QuerySet[Action]:
    """The live actions of ``branch``'s path that ``viewer`` may read (``seen_q``), oldest first,
    without those a moderator hid (so they reach no reader, prompt or memory)."""
    return Action.objects.filter(
        path_q(branch), seen_q(viewer), adventure_id=branch.adventure_id, live=True, hidden=False
    ).order_by("depth")


def story_page(
    branch: Branch, *, before_depth: int | None, limit: int, viewer: int | None = None
) -> tuple[list[Action], int | None]:
    """Up to ``limit`` live actions older than ``before_depth`` (newest end when
    None), returned oldest first, plus the ``before_depth`` of the next older
    page (None when this page reaches the opening)."""
    qs = story(branch, viewer=viewer)
    if before_depth is not None:
        qs = qs.filter(depth__lt=before_depth)
    rows = list(qs.order_by("-depth")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    rows.reverse()
    return rows, (rows[0].depth if more and rows else None)


def recent(branch: Branch, *, count: int, below_depth: int | None = None, viewer: int | None = None) -> list[Action]:
    """The newest ``count`` live actions ``viewer`` may read (oldest first), optionally only those
    below ``below_depth`` (to leave out a take being retried)."""
    if len(branch.lineage) > RECENT_COMPILED_ANCESTORS:
        qs = story(branch, viewer=viewer)
        if below_depth is not None:
            qs = qs.filter(depth__lt=below_depth)
        rows = list(qs.order_by("-depth")[:count])
    else:  # every turn asks: its SQL compiled once per shape (config.compiled_once)
        seen = "every" if viewer == EVERY else "shared" if viewer is None else "member"
        values = {"adventure_id": branch.adventure_id, "own": branch.pk}
        for i, (ancestor_id, cap) in enumerate(branch.lineage):
            values[f"a{i}"], values[f"c{i}"] = ancestor_id, cap
        if seen == "member":
            values["viewer"] = viewer
        if below_depth is not None:
            values["below"] = below_depth
        rows = _RECENT.all((len(branch.lineage), seen, below_depth is not None, count), **values)
    rows.reverse()
    return rows


RECENT_COMPILED_ANCESTORS = 16  # a path with more forks behind it is read by the ORM (its shapes are not kept)


def _recent_query(shape, *, adventure_id, own, viewer=None, below=None, **ancestors) -> QuerySet[Action]:
    """``recent``'s query, as ``story`` writes it, for CompiledOnce's markers."""
    n, seen, _, count = shape
    lineage = [[ancestors[f"a{i}"], ancestors[f"c{i}"]] for i in range(n)]
    branch = Branch(pk=own, adventure_id=adventure_id, lineage=lineage)
    qs = story(branch, viewer={"every": EVERY, "shared": None}.get(seen, viewer))
    if below is not None:
        qs = qs.filter(depth__lt=below)
    return qs.order_by("-depth")[:count]


_RECENT = CompiledOnce(_recent_query)


def owner_at(branch: Branch, depth: int) -> int:
    """The id of the branch whose rows hold ``depth`` on ``branch``'s path."""
    if depth > branch.fork_depth:
        return branch.pk
    for ancestor_id, cap in reversed(branch.lineage):
        if cap >= depth:
            return ancestor_id
    raise ValueError(f"depth {depth} is not on branch {branch.pk}'s path")


def node_at(branch: Branch, depth: int) -> Action | None:
    """The live action at ``depth`` on ``branch``'s path, as readers see it: None when a moderator
    hid it (its text reaches no reader, prompt, copy or memory)."""
    node = node_at_even_hidden(branch, depth)
    return None if node is None or node.hidden else node


def node_at_even_hidden(branch: Branch, depth: int) -> Action | None:
    """The live action at ``depth`` on ``branch``'s path whether or not a moderator hid it: the
    tree's shape (what undo removes, what a retry replaces, where a fork starts). Its text goes to
    no reader but staff."""
    if not 1 <= depth <= branch.tip_depth:
        return None
    return Action.objects.filter(branch_id=owner_at(branch, depth), depth=depth, live=True).first()


def takes_at(branch: Branch, depth: int) -> list[Action]:
    """Every take of the node at ``depth`` on ``branch``'s path, oldest first."""
    if not 1 <= depth <= branch.tip_depth:
        return []
    return list(Action.objects.filter(branch_id=owner_at(branch, depth), depth=depth).order_by("created_at", "id"))


def take_counts(actions: list[Action]) -> dict[tuple[int, int], int]:
    """(branch id, depth) -> how many takes the node of each of ``actions`` has (one query)."""
    if not actions:
        return {}
    keys = {(a.branch_id, a.depth) for a in actions}
    rows = (
        Action.objects.filter(branch_id__in={b for b, _ in keys}, depth__in={d for _, d in keys})
        .values("branch_id", "depth")
        .annotate(n=Count("id"))
    )
    return {(r["branch_id"], r["depth"]): r["n"] for r in rows if (r["branch_id"], r["depth"]) in keys}


def on_path(branch: Branch, node_branch_id: int | None, depth: int) -> bool:
    """Whether the node at ``depth`` that ``node_branch_id`` owns (an action's, a mark's, a
    snapshot's) is on ``branch``'s path; depth 0, before the first node, always is."""
    if depth == 0:
        return True
    return node_branch_id is not None and 1 <= depth <= branch.tip_depth and owner_at(branch, depth) == node_branch_id


def node_ref(branch: Branch, depth: int) -> tuple[int | None, int]:
    """The node at ``depth`` of ``branch``'s path as a mark names it: (the branch that owns it,
    depth); (None, 0) before the first node."""
    return (owner_at(branch, depth) if depth else None, depth)


def borrowers(branch: Branch, *, from_depth: int) -> list[Branch]:
    """Other branches that read ``branch``'s own rows at depth >= ``from_depth``."""
    out = []
    for other in Branch.objects.filter(adventure_id=branch.adventure_id).exclude(pk=branch.pk):
        for ancestor_id, cap in other.lineage:
            if ancestor_id == branch.pk and cap >= from_depth and cap > branch.fork_depth:
                out.append(other)
                break
    return out
