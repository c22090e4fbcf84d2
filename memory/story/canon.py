"""The plot essentials and the author's note follow the tree, as the summary does: each version
hangs off the story node it was written at (the live action at the tip then; before the story, the
root) and is true down every path through that node while that take is the live one. So a branch
switch, an undo, a retry or a fork shows, at once and with no model call, the text as it stood at
that point of that path, and nothing the player wrote is lost: a version whose node was undone
away stays in the history, and can be brought back.

``Adventure.plot_essentials`` and ``authors_note`` are kept equal to the head path's version by one
write path, ``canon_refresh``; every change of the tree (memory.story.sync) and every edit
(``canon_set``) calls it in the same transaction, so every reader (the prompt, Insights, exports)
reads the adventure's row as before. An adventure whose texts were never edited after its start
has no versions: its row is the text on every path.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import Q

from memory.models import CanonText
from stories.models import Adventure, Branch
from stories.tree import lineage

FIELDS = ("plot_essentials", "authors_note")


def _on_path(branch: Branch):
    """The versions true on ``branch``'s path: the root ones, and those whose node is on it, live."""
    node = lineage.path_q(branch, prefix="action__") & Q(action__live=True, action__depth__lte=branch.tip_depth)
    return CanonText.objects.filter(Q(at_root=True) | node, adventure_id=branch.adventure_id)


def texts_on_path(branch: Branch) -> dict[str, CanonText]:
    """The newest version of each field on ``branch``'s path (the deepest node, then the newest)."""
    found: dict[str, CanonText] = {}
    for version in _on_path(branch).select_related("action").order_by("id"):
        depth = version.action.depth if version.action_id else 0
        held = found.get(version.field)
        if held is None or depth >= (held.action.depth if held.action_id else 0):
            found[version.field] = version
    return found


def canon_refresh(adventure_id: int) -> None:
    """The adventure's row set to its head path's versions (fields with versions only)."""
    adventure = Adventure.objects.filter(pk=adventure_id).only(*FIELDS, "head_branch_id").first()
    if adventure is None or adventure.head_branch_id is None:
        return
    found = texts_on_path(lineage.head(adventure))
    changed = {f: v.text for f, v in found.items() if getattr(adventure, f) != v.text}
    if changed:
        Adventure.objects.filter(pk=adventure_id).update(**changed)


def canon_set(*, adventure: Adventure, **texts: str) -> Adventure:
    """The player's new text of these fields, true from the node being played down its paths (the
    text before the first edit stays true everywhere else, as the root version)."""
    unknown = set(texts) - set(FIELDS)
    if unknown:
        raise TypeError(f"not canon texts: {sorted(unknown)}")
    with transaction.atomic():
        branch = lineage.head(adventure)
        node = lineage.node_at(branch, branch.tip_depth) if branch.tip_depth else None
        for field, text in texts.items():
            if not CanonText.objects.filter(adventure=adventure, field=field).exists():
                CanonText.objects.create(adventure=adventure, field=field, at_root=True, text=getattr(adventure, field))
            CanonText.objects.create(adventure=adventure, field=field, action=node, at_root=node is None, text=text)
            setattr(adventure, field, text)
        if texts:
            adventure.save(update_fields=[*texts, "updated_at"])
    return adventure


def history(*, adventure: Adventure, field: str) -> list[dict]:
    """Every version of ``field``, newest first: where it hangs (the action and its depth, the root, or
    no node: undone away) and whether it is the one true on the path played."""
    branch = lineage.head(adventure)
    told = texts_on_path(branch).get(field)
    on_path = set(_on_path(branch).filter(field=field).values_list("id", flat=True))
    out = []
    for version in CanonText.objects.filter(adventure=adventure, field=field).select_related("action").order_by("-id"):
        out.append(
            {
                "id": version.pk,
                "text": version.text,
                "action": version.action_id,
                "depth": version.action.depth if version.action_id else (0 if version.at_root else None),
                "on_path": version.pk in on_path,
                "told": told is not None and version.pk == told.pk,
                "created_at": version.created_at,
            }
        )
    return out


def on_copied(*, from_branch_id: int, to_branch_id: int, depths: list[int]) -> None:
    """Versions hanging off copied nodes hang off the copies too (copy-on-write of a borrowed node)."""
    from stories.models import Action

    versions = list(CanonText.objects.filter(action__branch_id=from_branch_id, action__depth__in=depths))
    if not versions:
        return
    copies = {
        a.depth: a.pk for a in Action.objects.filter(branch_id=to_branch_id, depth__in=depths, live=True).only("depth")
    }
    CanonText.objects.bulk_create(
        [
            CanonText(adventure_id=v.adventure_id, field=v.field, action_id=copies[v.action.depth], text=v.text)
            for v in CanonText.objects.filter(pk__in=[v.pk for v in versions]).select_related("action")
            if v.action.depth in copies
        ]
    )
