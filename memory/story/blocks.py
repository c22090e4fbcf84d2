"""A block's memories on a path: which memories a path holds, whether a block
changed under a writer, and the cast's memories of a block (written, stored,
replaced). The post-turn pass (memory.story.steps) calls these in its transactions."""

from __future__ import annotations

from dataclasses import dataclass

from memory.models import Memory
from memory.story import cast, presence, scene, summarize
from memory.story.report import PassReport
from stories.models import Adventure, Branch
from stories.providers import ProviderError
from stories.tree import lineage


def path_memories(branch: Branch, *, viewer: int | None = None):
    """Every memory on ``branch``'s path: the adventure's own and its characters'; of the memories of
    secrets (memory.story.steps.secrets), those told to ``viewer`` (None: none; lineage.EVERY: all)."""
    return Memory.objects.filter(lineage.path_q(branch), lineage.seen_q(viewer), adventure_id=branch.adventure_id)


def own_memories(branch: Branch):
    """The adventure's own bank of the shared story on ``branch``'s path (no character's memories)."""
    return path_memories(branch).filter(character__isnull=True)


def block_changed(head: Branch, actions: list, *, start: int, end: int) -> bool:
    """Whether the block's live actions on ``head``'s path are no longer ``actions``
    (a take, an edit or a hide moved in while its memory was being written)."""
    now = list(lineage.story(head).filter(depth__gte=start, depth__lte=end).values_list("pk", "text"))
    return now != [(a.pk, a.text) for a in actions]


@dataclass(frozen=True)
class BlockWritten:
    """A block's memories as written, not yet stored: its own (None when not asked) and its cast's."""

    own: summarize.Written | None
    cast: list[cast.CastMemory]
    changes: list | None = (
        None  # what the model read the block changed on the cards (claims_reader.Read); None: offline
    )


def block_write(
    *,
    conn,
    adventure: Adventure,
    head: Branch,
    members: list[scene.Member],
    actions: list,
    cards: list,
    start: int,
    end: int,
    report: PassReport,
    own: bool = True,
    only: int | None = None,
    whose: str = "",
) -> BlockWritten | None:
    """The one block writer of the pass: the block's own memory (``own``) and its cast's (``only``:
    one member's), written outside any transaction (the model is the slow part). A model failure
    goes into ``report`` as the failure of ``whose`` memory of the block and answers None: the
    step stops, and a later run tries again."""
    try:
        written = (
            summarize.write_memory(
                conn=conn, adventure=adventure, actions=actions, cards=cards, user_id=adventure.owner_id
            )
            if own
            else None
        )
        changes: dict = {}
        cast_written = write_cast(
            conn=conn,
            adventure=adventure,
            head=head,
            members=members,
            actions=actions,
            cards=cards,
            start=start,
            block=end - start + 1,
            only=only,
            changes=changes if only is None else None,
        )
    except ProviderError as exc:
        report.failed(f"{whose}memory of actions {start}-{end}: {exc.message}", exc.code)
        return None
    return BlockWritten(written, cast_written, _read_changes(changes.get("changes"), actions, adventure))


def _read_changes(found: list[dict] | None, actions: list, adventure: Adventure) -> list | None:
    """The model's changes as the claims store takes them: each at the action of its sentence."""
    if found is None:
        return None
    from memory.story.claims_reader import Read, clip

    sentences = scene.sentences_of(actions, name=summarize.protagonist(adventure))
    return [
        Read(
            c["card_id"],
            c["slot"],
            c["value"],
            clip(sentences[c["sentence"]].text),
            actions[sentences[c["sentence"]].passage].pk,
            c["topic"],
        )
        for c in found
        if c["sentence"] < len(sentences)
    ]


def write_cast(
    *,
    conn,
    adventure: Adventure,
    head: Branch,
    members: list[scene.Member],
    actions: list,
    cards: list,
    start: int,
    block: int,
    only: int | None = None,
    changes: dict | None = None,
) -> list[cast.CastMemory]:
    """The cast's memories of the block ``actions`` starting at ``start`` on ``head``'s path
    (``block``: actions per block). No model call when no member is in the block. ``only``: the
    scene is read with the whole cast (``members``), and only that card's memories are written."""
    if not members or (only is not None and only not in {m.card_id for m in members}):
        return []
    before = list(
        lineage.story(head)
        .filter(depth__gte=max(start - presence.LOOKBACK_BLOCKS * block, 1), depth__lt=start)
        .order_by("depth")
    )
    name = summarize.protagonist(adventure)

    def witnesses():  # the offline scene reading: read only when the model does not read the scene
        seen = presence.present(cast=members, actions=actions, before=before, name=name)
        return seen if only is None else [w for w in seen if w.member.card_id == only]

    if only is not None and conn is None and not witnesses():
        return []
    written = cast.write_cast_memories(
        conn=conn,
        adventure=adventure,
        witnesses=witnesses,
        cards=cards,
        user_id=adventure.owner_id,
        cast=members,
        sentences=scene.story_sentences(actions, name=name),
        before=" ".join(scene.story_sentences(before[-block:], name=name)),
        changes=changes,
    )
    return [w for w in written if only is None or w.card_id == only]


def cast_store(
    *, adventure_id: int, branch_id: int, depth: int, start: int, end: int, written: list[cast.CastMemory]
) -> None:
    """Store the cast's memories of one block (in the caller's transaction, beside the block's own).
    A character that already holds a memory of the block keeps it (the player may have edited it):
    the unique block constraint skips the new one."""
    Memory.objects.bulk_create(
        [
            Memory(
                adventure_id=adventure_id,
                branch_id=branch_id,
                depth=depth,
                source_start=start,
                source_end=end,
                text=w.text,
                offline=w.offline,
                character_id=w.card_id,
                kind=w.kind,
                importance=w.importance,
                part=w.part,
            )
            for w in written
        ],
        ignore_conflicts=True,
    )


def cast_replace(
    *,
    adventure_id: int,
    branch_id: int,
    depth: int,
    start: int,
    end: int,
    old: list[Memory],
    written: list[cast.CastMemory],
) -> None:
    """The cast's memories of a rewritten block: the stale ones written by a pass go, the new ones
    come, except for a character whose memory of the block the player edited (theirs stays)."""
    Memory.objects.filter(pk__in=[m.pk for m in old], stale=True, edited=False).delete()
    kept = set(
        Memory.objects.filter(
            adventure_id=adventure_id, branch_id=branch_id, source_start=start, character__isnull=False
        ).values_list("character_id", flat=True)
    )
    cast_store(
        adventure_id=adventure_id,
        branch_id=branch_id,
        depth=depth,
        start=start,
        end=end,
        written=[w for w in written if w.card_id not in kept],
    )
