"""Adventures: owner-scoped access, creation, and whole-adventure export/import."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.http import Http404
from django.utils.dateparse import parse_datetime

from config import jobs
from stories import lineage, tree
from stories.cards import card_limit_check, clean_keys
from stories.errors import InvalidRequest
from stories.models import (
    ACTION_TEXT_MAX,
    AUTHORS_NOTE_MAX,
    CARD_ENTRY_MAX,
    LONG_TEXT_MAX,
    TITLE_MAX,
    Action,
    Adventure,
    Branch,
    StoryCard,
)

EXPORT_FORMAT = "everlore.adventure"
EXPORT_VERSION = 1
IMPORT_ACTIONS_MAX = 20_000
IMPORT_BRANCHES_MAX = 500

ADVENTURE_TEXT_FIELDS = {
    "title": TITLE_MAX, "persona_name": 100, "persona_pronouns": 40, "persona_description": LONG_TEXT_MAX,
    "plot_essentials": LONG_TEXT_MAX, "authors_note": AUTHORS_NOTE_MAX, "ai_instructions": LONG_TEXT_MAX,
    "story_summary": LONG_TEXT_MAX,
}
ADVENTURE_BOOL_FIELDS = ("auto_summarize", "memory_bank_enabled")


def access_adventure(*, user_id: int, adventure_id: int, for_play: bool = False) -> Adventure:
    """The adventure if ``user_id`` owns it; Http404 otherwise (never 403).
    ``for_play``: the owner's AI settings come in the same query (a turn reads them)."""
    found = Adventure.objects.filter(pk=adventure_id, owner_id=user_id, hidden=False)
    if for_play:
        found = found.select_related("owner__ai_settings")
    adventure = found.first()
    if adventure is None:
        raise Http404
    return adventure


def adventure_create(*, owner_id: int, opening: str = "", cards: list[dict] | None = None, **fields) -> Adventure:
    with transaction.atomic():
        adventure = Adventure.objects.create(owner_id=owner_id, **fields)
        tree.adventure_start(adventure=adventure, opening=opening)
        if cards:
            card_limit_check(adventure=adventure, adding=len(cards))
            StoryCard.objects.bulk_create([StoryCard(adventure=adventure, **card) for card in cards])
    return adventure


def adventure_update(*, adventure: Adventure, **fields) -> Adventure:
    """Change the fields given (title, persona, notes, switches); writes only
    those, so a concurrent fork or the worker's summary is never overwritten."""
    unknown = set(fields) - set(ADVENTURE_TEXT_FIELDS) - set(ADVENTURE_BOOL_FIELDS) - {"story_summary"}
    if unknown or "story_summary" in fields:
        raise TypeError(f"not fields a player sets here: {sorted(unknown | ({'story_summary'} & set(fields)))}")
    for name, value in fields.items():
        setattr(adventure, name, value)
    if fields:
        adventure.save(update_fields=[*fields, "updated_at"])
    return adventure


def adventure_delete(*, adventure: Adventure) -> None:
    """The adventure goes with its whole tree, cards and memories. Its row is
    locked first: a memory pass writing for it finishes before the delete
    gathers what to remove (and what it wrote goes too), and none starts while
    the delete runs."""
    with transaction.atomic():
        Adventure.objects.select_for_update().filter(pk=adventure.pk).exists()
        adventure.delete()


def adventure_export(*, adventure: Adventure) -> dict:
    """The whole adventure: fields, every branch and take, and the cards."""
    branches = list(Branch.objects.filter(adventure=adventure).order_by("id"))
    actions = Action.objects.filter(adventure=adventure).order_by("branch_id", "depth", "created_at", "id")
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "adventure": {
            **{name: getattr(adventure, name) for name in ADVENTURE_TEXT_FIELDS},
            **{name: getattr(adventure, name) for name in ADVENTURE_BOOL_FIELDS},
        },
        "head": adventure.head_branch_id,
        "branches": [
            {"id": b.pk, "parent": b.parent_id, "fork_depth": b.fork_depth, "lineage": b.lineage,
             "tip_depth": b.tip_depth, "name": b.name, "internal": b.internal}
            for b in branches
        ],
        # A take a moderator hid keeps its place in the tree, without its text; imported, it stays hidden.
        "actions": [
            {"branch": a.branch_id, "depth": a.depth, "kind": a.kind, "text": "" if a.hidden else a.text,
             "live": a.live, "created_at": a.created_at.isoformat(),
             "edited_at": a.edited_at.isoformat() if a.edited_at else None, **({"hidden": True} if a.hidden else {})}
            for a in actions
        ],
        "cards": [
            {"type": c.type, "name": c.name, "keys": c.keys, "entry": c.entry, "notes": c.notes,
             "in_cast": c.in_cast}
            for c in StoryCard.objects.filter(adventure=adventure).order_by("id")
        ],
    }


@dataclass(frozen=True)
class Imported:
    """An imported adventure, and where the file's ids went: its branch ids to the new ones, its
    cards (by their place in the file's list) to the new cards' ids."""

    adventure: Adventure
    branch_ids: dict[int, int]
    card_ids: list[int]


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise InvalidRequest(f"import: {message}")


def adventure_import(*, owner_id: int, data) -> Adventure:
    """Create an adventure from ``adventure_export`` output. All or nothing;
    every reference and the tree's shape are checked."""
    return adventure_import_mapped(owner_id=owner_id, data=data).adventure


def adventure_import_mapped(*, owner_id: int, data) -> Imported:
    """``adventure_import``, saying where the file's branches and cards went (for the parts of the
    file other rooms import: the memories)."""
    _require(isinstance(data, dict), "expected a JSON object")
    _require(data.get("format") == EXPORT_FORMAT, f"'format' must be {EXPORT_FORMAT!r}")
    _require(data.get("version") == EXPORT_VERSION, f"'version' must be {EXPORT_VERSION}")
    meta, branches, actions, cards = (data.get(k) for k in ("adventure", "branches", "actions", "cards"))
    _require(isinstance(meta, dict), "'adventure' must be an object")
    _require(isinstance(branches, list) and 1 <= len(branches) <= IMPORT_BRANCHES_MAX,
             f"'branches' must list 1 to {IMPORT_BRANCHES_MAX} branches")
    _require(isinstance(actions, list) and len(actions) <= IMPORT_ACTIONS_MAX,
             f"'actions' must list at most {IMPORT_ACTIONS_MAX} actions")
    cards = cards or []
    _require(isinstance(cards, list), "'cards' must be a list")

    fields = {}
    for name, limit in ADVENTURE_TEXT_FIELDS.items():
        value = meta.get(name, "")
        _require(isinstance(value, str) and len(value) <= limit, f"adventure.{name} must be text of at most {limit} characters")
        fields[name] = value
    _require(fields["title"].strip() != "", "adventure.title is required")
    for name in ADVENTURE_BOOL_FIELDS:
        value = meta.get(name, True)
        _require(isinstance(value, bool), f"adventure.{name} must be true or false")
        fields[name] = value

    ids = set()
    for b in branches:
        _require(isinstance(b, dict) and isinstance(b.get("id"), int), "each branch needs an integer 'id'")
        _require(b["id"] not in ids, f"branch id {b['id']} appears twice")
        ids.add(b["id"])
    by_id = {b["id"]: b for b in branches}
    for b in branches:
        _require(b.get("parent") is None or b["parent"] in ids, f"branch {b['id']} has an unknown parent")
        lin = b.get("lineage", [])
        _require(isinstance(lin, list) and all(
            isinstance(e, list) and len(e) == 2 and e[0] in ids and isinstance(e[1], int) and e[1] >= 0 for e in lin
        ), f"branch {b['id']} has a malformed lineage")
        _require(isinstance(b.get("fork_depth", 0), int) and b.get("fork_depth", 0) >= 0, f"branch {b['id']}: bad fork_depth")
        _require(isinstance(b.get("name", ""), str) and len(b.get("name", "")) <= 100, f"branch {b['id']}: bad name")
        _require(all(cap <= b.get("fork_depth", 0) for _, cap in lin), f"branch {b['id']} reads an ancestor past its fork")
    _require(data.get("head") in by_id and not by_id[data["head"]].get("internal"), "'head' must name a branch")

    kinds = set(Action.Kind.values)
    for a in actions:
        _require(isinstance(a, dict) and a.get("branch") in ids, "each action needs a known 'branch'")
        _require(isinstance(a.get("depth"), int) and a["depth"] > by_id[a["branch"]].get("fork_depth", 0),
                 f"an action of branch {a['branch']} has a depth outside it")
        _require(a.get("kind") in kinds, f"unknown action kind {a.get('kind')!r}")
        _require(isinstance(a.get("hidden", False), bool), "action 'hidden' must be true or false")
        _require(isinstance(a.get("text"), str) and (a.get("hidden") or 0 < len(a["text"])) and
                 len(a["text"]) <= ACTION_TEXT_MAX, f"action text must be 1 to {ACTION_TEXT_MAX} characters")
        _require(isinstance(a.get("live", True), bool), "action 'live' must be true or false")
    for c in cards:
        _require(isinstance(c, dict) and isinstance(c.get("name"), str) and 0 < len(c["name"]) <= 100,
                 "each card needs a name of 1 to 100 characters")
        _require(c.get("type", "other") in StoryCard.Type.values, f"card {c['name']!r}: unknown type")
        _require(isinstance(c.get("entry", ""), str) and len(c.get("entry", "")) <= CARD_ENTRY_MAX,
                 f"card {c['name']!r}: entry over {CARD_ENTRY_MAX} characters")
        _require(isinstance(c.get("in_cast", True), bool), f"card {c['name']!r}: in_cast must be true or false")

    with transaction.atomic():
        adventure = Adventure.objects.create(owner_id=owner_id, **fields)
        new_ids: dict[int, int] = {}
        pending = list(branches)
        while pending:  # parents first
            ready = [b for b in pending if b.get("parent") is None or b["parent"] in new_ids]
            _require(bool(ready), "the branches' parents form a cycle")
            for b in ready:
                new_ids[b["id"]] = Branch.objects.create(
                    adventure=adventure, parent_id=new_ids.get(b.get("parent")), fork_depth=b.get("fork_depth", 0),
                    lineage=[], tip_depth=b.get("tip_depth", 0), name=b.get("name", ""),
                    internal=bool(b.get("internal", False)),
                ).pk
            pending = [b for b in pending if b["id"] not in new_ids]
        for b in branches:
            Branch.objects.filter(pk=new_ids[b["id"]]).update(lineage=[[new_ids[a], cap] for a, cap in b.get("lineage", [])])
        rows = []
        for a in actions:
            rows.append(Action(adventure=adventure, branch_id=new_ids[a["branch"]], depth=a["depth"], kind=a["kind"],
                               text="" if a.get("hidden") else a["text"], live=a.get("live", True),
                               hidden=bool(a.get("hidden", False)),
                               edited_at=parse_datetime(a["edited_at"]) if isinstance(a.get("edited_at"), str) else None))
        try:
            with transaction.atomic():
                Action.objects.bulk_create(rows)
        except IntegrityError:  # the one-live-take constraint
            raise InvalidRequest("import: a node has more than one live take") from None
        adventure.head_branch_id = new_ids[data["head"]]
        adventure.save(update_fields=["head_branch"])
        for b in Branch.objects.filter(adventure=adventure, internal=False):
            # hidden nodes keep their depth: the tree is whole even where the story skips them
            depths = [x.depth for x in Action.objects.filter(lineage.path_q(b), adventure=adventure, live=True)
                      .order_by("depth")]
            _require(depths == list(range(1, len(depths) + 1)) and len(depths) == b.tip_depth,
                     f"branch {b.name or b.pk!r} does not read as a contiguous story (depths 1..tip, one live take each)")
        made = StoryCard.objects.bulk_create([
            StoryCard(adventure=adventure, type=c.get("type", "other"), name=c["name"], keys=clean_keys(c.get("keys", [])),
                      entry=c.get("entry", ""), notes=c.get("notes", "") or "", in_cast=c.get("in_cast", True))
            for c in cards
        ])
        card_limit_check(adventure=adventure, adding=0)
        jobs.memory_pass_after_commit(adventure_id=adventure.pk)  # the story is remembered in the background
    return Imported(adventure, new_ids, [c.pk for c in made])
