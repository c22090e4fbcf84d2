"""Adventures: owner-scoped access, creation, and whole-adventure export/import."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.db.models import OuterRef, Subquery

from config import jobs
from config.compiled_once import CompiledOnce
from config.errors import InvalidRequest, NotFound
from stories import import_doc
from stories.accounts import ai_settings
from stories.cards import card_limit_check, clean_keys
from stories.models import (
    AUTHORS_NOTE_MAX,
    LONG_TEXT_MAX,
    TITLE_MAX,
    Action,
    Adventure,
    Branch,
    ProviderCall,
    StoryCard,
)
from stories.party import members as party
from stories.tree import writes

EXPORT_FORMAT, EXPORT_VERSION = import_doc.EXPORT_FORMAT, import_doc.EXPORT_VERSION

ADVENTURE_TEXT_FIELDS = {
    "title": TITLE_MAX,
    "persona_name": 100,
    "persona_pronouns": 40,
    "persona_description": LONG_TEXT_MAX,
    "plot_essentials": LONG_TEXT_MAX,
    "authors_note": AUTHORS_NOTE_MAX,
    "ai_instructions": LONG_TEXT_MAX,
    "story_summary": LONG_TEXT_MAX,
    "model": 200,  # blank: the player's model
    "sampling_preset": 40,  # blank: the player's sampling
}
ADVENTURE_BOOL_FIELDS = ("auto_summarize", "memory_bank_enabled", "memories_before_story", "claims_review")


def access_adventure(*, user_id: int, adventure_id: int, for_play: bool = False, may: str = "own") -> Adventure:
    """The adventure if ``user_id`` may do what ``may`` says: "own" (the owner only), "play" (the
    owner or a player member), "watch" (any member). NotFound for anyone else (never 403: another's
    story reads as none); Forbidden for a member asking more than their role allows. ``viewer`` on
    the answer says who asks ("owner", "player", "watcher"), ``actor`` the character a player acts as.
    ``for_play``: the owner's AI settings come in the same query (a turn reads them; the owner pays)."""
    if may not in party.MAY:
        raise ValueError(f"may: one of {party.MAY}")
    adventure = _ACCESS.first((may == "own", for_play), adventure_id=adventure_id, user_id=user_id)
    if adventure is None:
        party.refuse(adventure_id=adventure_id, user_id=user_id, may=may)  # a member: what their role allows
        raise NotFound()
    return party.as_viewer(adventure, user_id=user_id, may=may)


def _access_query(shape: tuple[bool, bool], *, adventure_id: int, user_id: int):
    own, for_play = shape
    found = Adventure.objects.filter(pk=adventure_id, hidden=False)
    found = found.filter(owner_id=user_id) if own else party.with_viewer(found, user_id=user_id)
    if for_play:  # with the last turn's prompt, as stories.prompt.prefix keeps it
        last_turn = ProviderCall.objects.filter(adventure_id=OuterRef("pk"), purpose=ProviderCall.Purpose.TURN)
        found = found.select_related("owner__ai_settings").annotate(
            last_prompt=Subquery(last_turn.order_by("-created_at", "-id").values("prompt_fingerprint")[:1])
        )
    return found.order_by()[:1]  # one row by its key: no ordering


# measured (bench/together.py, py-spy): compiling this query was a fifth of a web process's CPU
_ACCESS = CompiledOnce(_access_query)


def story_create(*, owner_id: int, opening: str = "", cards: list[dict] | None = None, **fields) -> Adventure:
    """A new adventure's story part: its row, its root branch with the opening, its cards (within
    the card limit). An adventure given no persona takes the player's (their settings). No memory
    work: play.changes.adventure_create is the player's use case."""
    if not any((fields.get(name) or "").strip() for name in ai_settings.PERSONA_FIELDS):
        fields = {**fields, **ai_settings.persona_of(user_id=owner_id)}
    with transaction.atomic():
        adventure = Adventure.objects.create(owner_id=owner_id, **fields)
        writes.adventure_start(adventure=adventure, opening=opening)
        if cards:
            card_limit_check(adventure=adventure, adding=len(cards))
            StoryCard.objects.bulk_create([StoryCard(adventure=adventure, **card) for card in cards])
    return adventure


def story_fields_update(*, adventure: Adventure, **fields) -> Adventure:
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


def story_export(*, adventure: Adventure, viewer: int) -> dict:
    """The story part of an export: fields, every branch and take, and the cards (play.changes.adventure_export
    adds the memories), as ``viewer`` may read them: a secret not told to them (stories.party.secrets) keeps
    its place without its text, as a hidden take does."""
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
            {
                "id": b.pk,
                "parent": b.parent_id,
                "fork_depth": b.fork_depth,
                "lineage": b.lineage,
                "tip_depth": b.tip_depth,
                "name": b.name,
                "internal": b.internal,
            }
            for b in branches
        ],
        # A take a moderator hid keeps its place in the tree, without its text; imported, it stays hidden.
        "actions": [
            {
                "branch": a.branch_id,
                "depth": a.depth,
                "kind": a.kind,
                "text": "" if out else a.text,
                "live": a.live,
                "created_at": a.created_at.isoformat(),
                "edited_at": a.edited_at.isoformat() if a.edited_at else None,
                **({"hidden": True} if out else {}),
                **({"actor": a.actor} if a.actor else {}),  # a member's turn, told as their character
            }
            for a in actions
            for out in [a.hidden or (a.seen_by is not None and viewer not in a.seen_by)]
        ],
        "cards": [
            {
                "type": c.type,
                "name": c.name,
                "keys": c.keys,
                "entry": c.entry,
                "notes": c.notes,
                "in_cast": c.in_cast,
                **{name: getattr(c, name) for name in import_doc.CARD_RULE_FIELDS},
                **({} if c.present else {"present": False}),  # absent from the head path: on others
            }
            for c in StoryCard.every.filter(adventure=adventure).order_by("id")
        ],
    }


IMPORT_BATCH = 2_000  # actions written per statement (progress is told after each)


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


def _require_contiguous(branches: list[dict], actions: list[dict]) -> None:
    """Every branch that is not internal reads as a story: the live takes on its path (its own, and
    each ancestor's up to the depth it is read) are depths 1..tip, one each. Checked on the file,
    before any row (hidden nodes keep their depth: the tree is whole even where the story skips them)."""
    live: dict[int, list[int]] = {}
    for a in actions:
        if a["live"]:
            live.setdefault(a["branch"], []).append(a["depth"])
    for b in branches:
        if b["internal"]:
            continue
        depths = list(live.get(b["id"], ()))
        for ancestor, cap in b["lineage"]:
            depths += [d for d in live.get(ancestor, ()) if d <= cap]
        depths.sort()
        _require(
            len(depths) == b["tip_depth"] and depths == list(range(1, len(depths) + 1)),
            f"branch {b['name'] or b['id']!r} does not read as a contiguous story (depths 1..tip, one live take each)",
        )


def story_import(*, owner_id: int, data, progress=lambda stage, done, total: None) -> Imported:
    """The story part of an export of this site (``story_export``'s) as a new adventure, all or
    nothing, saying where the file's branches and cards went (for the parts of the file other rooms
    import: the memories, play.changes.adventure_import). The document is checked whole against its declared
    schema (``stories.import_doc``) and then for its references and the tree's shape, before
    any row is written."""
    doc = import_doc.story_document(data)
    progress("story", 0, len(doc["actions"]))
    meta, branches, actions, cards = doc["adventure"], doc["branches"], doc["actions"], doc["cards"] or []
    fields = {name: meta[name] for name in (*ADVENTURE_TEXT_FIELDS, *ADVENTURE_BOOL_FIELDS)}

    ids = set()
    for b in branches:
        _require(b["id"] not in ids, f"branch id {b['id']} appears twice")
        ids.add(b["id"])
    by_id = {b["id"]: b for b in branches}
    for b in branches:
        _require(b["parent"] is None or b["parent"] in ids, f"branch {b['id']} has an unknown parent")
        _require(all(ancestor in ids for ancestor, _ in b["lineage"]), f"branch {b['id']} has a malformed lineage")
        _require(
            all(cap <= b["fork_depth"] for _, cap in b["lineage"]), f"branch {b['id']} reads an ancestor past its fork"
        )
    _require(doc["head"] in by_id and not by_id[doc["head"]]["internal"], "'head' must name a branch")
    for n, a in enumerate(actions):
        _require(a["branch"] in ids, f"actions[{n}] names an unknown 'branch'")
        _require(
            a["depth"] > by_id[a["branch"]]["fork_depth"], f"an action of branch {a['branch']} has a depth outside it"
        )
    cards = [{**c, "keys": clean_keys(c["keys"]), "notes": c["notes"] or ""} for c in cards]
    _require_contiguous(branches, actions)

    with transaction.atomic():
        adventure = Adventure.objects.create(owner_id=owner_id, **fields)
        new_ids = writes.tree_import(
            adventure=adventure,
            branches=branches,
            actions=actions,
            head=doc["head"],
            batch=IMPORT_BATCH,
            progress=lambda done, total: progress("story", done, total),
        )
        made = StoryCard.objects.bulk_create(
            [
                StoryCard(
                    adventure=adventure,
                    type=c["type"],
                    name=c["name"],
                    keys=c["keys"],
                    entry=c["entry"],
                    notes=c["notes"],
                    in_cast=c["in_cast"],
                    **{name: c[name] for name in import_doc.CARD_RULE_FIELDS},
                    present=c["present"],
                )
                for c in cards
            ]
        )
        card_limit_check(adventure=adventure, adding=0)
        jobs.memory_pass_after_commit(adventure_id=adventure.pk)  # the story is remembered in the background
    return Imported(adventure, new_ids, [c.pk for c in made])
