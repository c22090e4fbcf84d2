"""The canon follows the tree, as the summary does: the plot essentials, the author's note and the
story cards. Each version hangs off the story node it was written at (the live action at the tip then; before the story, the
root) and is true down every path through that node while that take is the live one. So a branch
switch, an undo, a retry or a fork shows, at once and with no model call, the text as it stood at
that point of that path, and nothing the player wrote is lost: a version whose node was undone
away stays in the history, and can be brought back.

``Adventure.plot_essentials`` and ``authors_note``, and each card's row, are kept equal to the head
path's version by one write path, ``canon_refresh``; every change of the tree (memory.story.sync)
and every edit (``canon_set``, ``card_*``) calls it in the same transaction, so every reader (the
prompt, Insights, the cards' API, exports) reads the rows as before. A card exists on a path where
its newest version there is not a removal (``StoryCard.present``; its default manager shows only
those); one created at a node exists only down the paths through it. A text or a card never
changed after the story's start has no versions: its row is true on every path.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import Q

from config.errors import NotFound
from memory.models import CanonText, CardVersion
from stories import cards
from stories.import_doc import CARD_RULE_FIELDS
from stories.models import Action, Adventure, Branch, StoryCard
from stories.tree import lineage

FIELDS = ("plot_essentials", "authors_note")
CARD_FIELDS = ("type", "name", "keys", "entry", "notes", "in_cast", *CARD_RULE_FIELDS)


def on_path(branch: Branch, model=CanonText):
    """The versions true on ``branch``'s path: the root ones, and those whose node is on it, live."""
    node = lineage.path_q(branch, prefix="action__") & Q(action__live=True, action__depth__lte=branch.tip_depth)
    return model.objects.filter(Q(at_root=True) | node, adventure_id=branch.adventure_id)


def _newest(versions, key) -> dict:
    """The newest version per ``key``: the deepest node, then the newest written."""
    found: dict = {}
    for version in versions:
        depth = version.action.depth if version.action_id else 0
        held = found.get(key(version))
        if held is None or depth >= (held.action.depth if held.action_id else 0):
            found[key(version)] = version
    return found


def texts_on_path(branch: Branch) -> dict[str, CanonText]:
    """The newest version of each field on ``branch``'s path (the deepest node, then the newest)."""
    return _newest(on_path(branch).select_related("action").order_by("id"), lambda v: v.field)


def canon_refresh(adventure_id: int) -> None:
    """The adventure's row and its cards' rows set to its head path's versions (those with versions)."""
    adventure = Adventure.objects.filter(pk=adventure_id).only(*FIELDS, "head_branch_id").first()
    if adventure is None or adventure.head_branch_id is None:
        return
    branch = lineage.head(adventure)
    found = texts_on_path(branch)
    changed = {f: v.text for f, v in found.items() if getattr(adventure, f) != v.text}
    if changed:
        Adventure.objects.filter(pk=adventure_id).update(**changed)
    _cards_refresh(branch)


def _cards_refresh(branch: Branch) -> None:
    versioned = set(CardVersion.objects.filter(adventure_id=branch.adventure_id).values_list("card_id", flat=True))
    if not versioned:
        return
    told = _newest(on_path(branch, CardVersion).select_related("action").order_by("id"), lambda v: v.card_id)
    for card in StoryCard.every.filter(pk__in=versioned):
        version = told.get(card.pk)
        state = {"present": False} if version is None or version.deleted else {"present": True, **version.fields}
        if any(getattr(card, k) != v for k, v in state.items()):
            StoryCard.every.filter(pk=card.pk).update(**state)


def _node(adventure: Adventure) -> Action | None:
    """The node an edit is made at: the live action at the head's tip; None before the story."""
    branch = lineage.head(adventure)
    return lineage.node_at(branch, branch.tip_depth) if branch.tip_depth else None


def _state(card: StoryCard) -> dict:
    return {name: getattr(card, name) for name in CARD_FIELDS}


def card_create(*, adventure: Adventure, **fields) -> StoryCard:
    """A new card, from the node being played down its paths (before the story: on every path)."""
    with transaction.atomic():
        card = cards.card_create(adventure=adventure, **fields)
        cards_created(adventure=adventure, made=[card])
    return card


def cards_created(*, adventure: Adventure, made: list[StoryCard]) -> None:
    """Cards just made (by hand or by a file's import) exist from the node being played on."""
    node = _node(adventure)
    if node is not None and made:
        CardVersion.objects.bulk_create(
            [CardVersion(adventure=adventure, card=card, action=node, fields=_state(card)) for card in made]
        )


def _root_version(card: StoryCard) -> None:
    """A card's state before its first change, true wherever no later version is (its first write)."""
    if not CardVersion.objects.filter(card=card).exists():
        CardVersion.objects.create(adventure_id=card.adventure_id, card=card, at_root=True, fields=_state(card))


def card_update(*, card: StoryCard, **fields) -> StoryCard:
    """The player's change of a card, true from the node being played down its paths."""
    with transaction.atomic():
        adventure = Adventure.objects.get(pk=card.adventure_id)
        node = _node(adventure)
        if node is None and not CardVersion.objects.filter(card=card).exists():
            return cards.card_update(card=card, **fields)  # before the story, never changed: its row is all
        _root_version(card)
        card = cards.card_update(card=card, **fields)
        CardVersion.objects.create(
            adventure=adventure, card=card, action=node, at_root=node is None, fields=_state(card)
        )
    return card


def card_delete(*, card: StoryCard) -> None:
    """The card leaves the story from the node being played (the paths before it keep it); before the
    story, with no versions, it is deleted with its character's memories."""
    with transaction.atomic():
        adventure = Adventure.objects.get(pk=card.adventure_id)
        node = _node(adventure)
        if node is None and not CardVersion.objects.filter(card=card).exists():
            cards.card_delete(card=card)
            return
        _root_version(card)
        CardVersion.objects.create(
            adventure=adventure, card=card, action=node, at_root=node is None, fields=_state(card), deleted=True
        )
        StoryCard.every.filter(pk=card.pk).update(present=False)


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
    here = set(on_path(branch).filter(field=field).values_list("id", flat=True))
    out = []
    for version in CanonText.objects.filter(adventure=adventure, field=field).select_related("action").order_by("-id"):
        out.append(
            {
                "id": version.pk,
                "text": version.text,
                "action": version.action_id,
                "depth": version.action.depth if version.action_id else (0 if version.at_root else None),
                "on_path": version.pk in here,
                "told": told is not None and version.pk == told.pk,
                "created_at": version.created_at,
            }
        )
    return out


def node_copies(to_branch_id: int, depths: list[int]) -> dict[int, int]:
    """{depth: the copy's action id} of nodes just copied onto ``to_branch_id`` (copy-on-write)."""
    return {
        a.depth: a.pk for a in Action.objects.filter(branch_id=to_branch_id, depth__in=depths, live=True).only("depth")
    }


def on_copied(*, from_branch_id: int, to_branch_id: int, depths: list[int]) -> None:
    """Versions hanging off copied nodes hang off the copies too (copy-on-write of a borrowed node)."""
    copies = node_copies(to_branch_id, depths)
    if not copies:
        return
    texts = CanonText.objects.filter(action__branch_id=from_branch_id, action__depth__in=list(copies))
    CanonText.objects.bulk_create(
        [
            CanonText(adventure_id=v.adventure_id, field=v.field, action_id=copies[v.action.depth], text=v.text)
            for v in texts.select_related("action")
        ]
    )
    versions = CardVersion.objects.filter(action__branch_id=from_branch_id, action__depth__in=list(copies))
    CardVersion.objects.bulk_create(
        [
            CardVersion(
                adventure_id=v.adventure_id,
                card_id=v.card_id,
                action_id=copies[v.action.depth],
                fields=v.fields,
                deleted=v.deleted,
            )
            for v in versions.select_related("action")
        ]
    )


def cards_since(branch: Branch, card_ids: list[int]) -> dict[int, int]:
    """For each of these cards that has versions, the depth of the node its version standing on
    ``branch``'s path was made at (0: before the story). Insights says which version was told."""
    versions = on_path(branch, CardVersion).filter(card_id__in=card_ids).select_related("action").order_by("id")
    return {cid: (v.action.depth if v.action_id else 0) for cid, v in _newest(versions, lambda v: v.card_id).items()}


def card_of(*, adventure: Adventure, card_id: int) -> StoryCard:
    """A card of ``adventure`` on any branch (absent from the path played too); NotFound otherwise."""
    card = StoryCard.every.filter(pk=card_id, adventure=adventure).first()
    if card is None:
        raise NotFound()
    return card


def card_history(*, adventure: Adventure, card_id: int) -> list[dict]:
    """Every version of a card of ``adventure`` (on any branch), newest first: its fields or its
    removal, where it hangs, and whether it is the one true on the path played. NotFound for a card of
    another adventure."""
    card_of(adventure=adventure, card_id=card_id)
    branch = lineage.head(adventure)
    here = set(on_path(branch, CardVersion).filter(card_id=card_id).values_list("id", flat=True))
    versions = list(CardVersion.objects.filter(card_id=card_id).select_related("action").order_by("-id"))
    newest_on_path = max(
        (v for v in versions if v.pk in here),
        key=lambda v: (v.action.depth if v.action_id else 0, v.pk),
        default=None,
    )
    return [
        {
            "id": v.pk,
            "fields": v.fields,
            "deleted": v.deleted,
            "action": v.action_id,
            "depth": v.action.depth if v.action_id else (0 if v.at_root else None),
            "on_path": v.pk in here,
            "told": newest_on_path is not None and v.pk == newest_on_path.pk and not v.deleted,
            "created_at": v.created_at,
        }
        for v in versions
    ]


def card_restore(*, adventure: Adventure, card_id: int, version_id: int) -> StoryCard:
    """A version of a card (from any branch, a removal's last fields included) made true again from the
    node being played: a card abandoned with a branch, or deleted here, comes back as it was then."""
    version = CardVersion.objects.filter(pk=version_id, card_id=card_id, adventure=adventure).first()
    card = StoryCard.every.filter(pk=card_id, adventure=adventure).first()
    if version is None or card is None:
        raise NotFound()
    with transaction.atomic():
        node = _node(adventure)
        CardVersion.objects.create(
            adventure=adventure, card=card, action=node, at_root=node is None, fields=version.fields
        )
        StoryCard.every.filter(pk=card.pk).update(present=True, **version.fields)
    return StoryCard.objects.get(pk=card.pk)
