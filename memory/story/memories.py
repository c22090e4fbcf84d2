"""What a player does to the memory bank and the story summary."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import Count
from rest_framework import serializers

from config import jobs
from config import serializer_fields as strict
from config.errors import Conflict, InvalidRequest, NotFound
from memory import embeddings
from memory.models import MEMORY_TEXT_MAX, Memory
from memory.story import blocks, cast, marks, memory_pass, scene, summaries, summarize
from memory.story.steps import summary as summary_step
from stories import import_doc, providers
from stories.accounts import ai_settings
from stories.cards import present_cards
from stories.models import Action, Adventure, Branch, StoryCard
from stories.providers import ProviderError
from stories.tree import lineage


def _owners(head: Branch, adventure: Adventure):
    """The memories on ``head``'s path its owner may read: the memories of secrets told to other
    players (stories.party.secrets) are theirs alone."""
    return blocks.path_memories(head, viewer=adventure.owner_id)


def bank_list(*, adventure: Adventure, character: StoryCard | None = None):
    """The current path's bank (forgotten and stale included, flagged), newest first: the
    adventure's own, or ``character``'s (a card of the cast, from ``access_character``)."""
    head = lineage.head(adventure)
    memories = _owners(head, adventure)
    memories = memories.filter(character=character) if character else memories.filter(character__isnull=True)
    return memories.order_by("-depth", "-id")


def access_character(*, adventure: Adventure, card_id: int) -> StoryCard:
    """A character card of this adventure (in the cast or not: its memories stay). Raises
    NotFound (404) otherwise, the same answer for another adventure's card and for none."""
    card = StoryCard.objects.filter(pk=card_id, adventure=adventure, type=StoryCard.Type.CHARACTER).first()
    if card is None:
        raise NotFound(f"character {card_id} is not a character card of this adventure")
    return card


def cast_list(*, adventure: Adventure) -> list[dict]:
    """The cast as players see it: the protagonist (whose memory is the adventure's own bank),
    then every character card, in the cast or not, with the memories each holds on the current path."""
    head = lineage.head(adventure)
    counts = dict(
        _owners(head, adventure)
        .filter(forgotten=False)
        .values("character_id")
        .annotate(n=Count("id"))
        .values_list("character_id", "n")
    )
    out = [
        {
            "character": None,
            "name": summarize.protagonist(adventure),
            "protagonist": True,
            "in_cast": True,
            "memories": counts.get(None, 0),
        }
    ]
    for card in adventure.cards.filter(type=StoryCard.Type.CHARACTER).order_by("id"):
        out.append(
            {
                "character": card.pk,
                "name": card.name,
                "protagonist": False,
                "in_cast": card.in_cast,
                "memories": counts.get(card.pk, 0),
            }
        )
    return out


def access_memory(*, adventure: Adventure, memory_id: int) -> Memory:
    """A memory of this adventure on the current path; NotFound otherwise."""
    head = lineage.head(adventure)
    memory = _owners(head, adventure).filter(pk=memory_id).first()
    if memory is None:
        raise NotFound()
    return memory


def memory_write(*, adventure: Adventure, text: str, character: StoryCard | None = None) -> Memory:
    """A hand-written memory, hanging off the head branch at its tip: the adventure's own, or
    ``character``'s."""
    with transaction.atomic():
        head = lineage.head(adventure, for_update=True)
        memory = Memory.objects.create(
            adventure=adventure,
            branch=head,
            depth=max(head.tip_depth, 1),
            text=text,
            character=character,
            kind="note" if character else "",
            importance=0.7 if character else 0.5,
        )
        jobs.memory_pass_after_commit(adventure_id=adventure.pk)  # embeds it
    return memory


def memory_update(
    *, memory: Memory, text: str | None = None, pinned: bool | None = None, forgotten: bool | None = None
) -> Memory:
    """Change text (the vector is cleared and re-embedded later), pin, forget or restore."""
    with transaction.atomic():
        memory = Memory.objects.select_for_update().get(pk=memory.pk)
        if text is not None and text != memory.text:
            # the player's own words now: no pass rewrites them, and they are true as of now
            Memory.objects.filter(pk=memory.pk).update(text=text, stale=False, edited=True)
            embeddings.vector_set(memory_id=memory.pk, expected_text=text, vector=None, model="")
            jobs.memory_pass_after_commit(adventure_id=memory.adventure_id)  # embeds it again
        fields = {}
        if pinned is not None:
            fields["pinned"] = pinned
        if forgotten is not None:
            fields["forgotten"] = forgotten
        if fields:
            Memory.objects.filter(pk=memory.pk).update(**fields)
    memory.refresh_from_db()
    return memory


def memory_source(*, memory: Memory) -> list[Action]:
    """The actions a memory was written from (empty for hand-written ones)."""
    if memory.source_start is None:
        return []
    nodes = lineage.story(memory.branch, viewer=lineage.EVERY)  # the shared story's, or one secret's nodes
    return list(nodes.filter(depth__gte=memory.source_start, depth__lte=memory.source_end, seen_by=memory.seen_by))


def memory_regenerate(*, adventure: Adventure, memory: Memory) -> Memory:
    """Write the memory again from its block as it stands now (clears stale). A
    character's memory is written again from that character's part of the block;
    raises Conflict when the character is no longer in it."""
    actions = memory_source(memory=memory)
    if not actions:
        raise Conflict("a hand-written memory has no source to regenerate from; edit its text instead")
    conn = ai_settings.connection_for_background(user_id=adventure.owner_id, purpose="summary")
    conn = conn and providers.for_request(conn)  # the player waits for it
    cards = present_cards(adventure)
    if memory.character_id is not None:
        written = blocks.write_cast(
            conn=conn,
            adventure=adventure,
            head=memory.branch,
            members=scene.members(cards),
            only=memory.character_id,
            actions=actions,
            cards=cards,
            start=memory.source_start,
            block=marks.MEMORY_INTERVAL,
        )
        mine = next((w for w in written if w.part == memory.part), None)
        if mine is None:
            raise Conflict(
                f"{memory.character.name} is no longer in the scenes of this block (or not in the cast, or "
                "remembers less of it now); forget or delete this memory instead"
            )
        fields = {"text": mine.text, "offline": mine.offline, "kind": mine.kind, "importance": mine.importance}
    else:
        written = summarize.write_memory(
            conn=conn, adventure=adventure, actions=actions, cards=cards, user_id=adventure.owner_id
        )
        fields = {"text": written.text, "offline": written.offline}
    with transaction.atomic():
        Memory.objects.filter(pk=memory.pk).update(stale=False, edited=False, **fields)
        embeddings.vector_set(memory_id=memory.pk, expected_text=fields["text"], vector=None, model="")
        jobs.memory_pass_after_commit(adventure_id=adventure.pk)
    memory.refresh_from_db()
    return memory


def memory_delete(*, memory: Memory) -> None:
    memory.delete()


def memory_pass_request(*, adventure: Adventure) -> None:
    """The player asked for the memory pass now (it runs in the background)."""
    jobs.memory_pass_after_commit(adventure_id=adventure.pk)


def summary_set(*, adventure: Adventure, text: str) -> Adventure:
    """The player's own summary text, at the head's tip: kept through every
    rewrite, undo and pass, and the base every later rewrite starts from."""
    summaries.player_summary_set(adventure=adventure, text=text)
    adventure.refresh_from_db()
    return adventure


def summary_regenerate(*, adventure: Adventure) -> Adventure:
    """Rewrite the summary now over the whole current path (raises ProviderError)."""
    head = lineage.head(adventure)
    report = memory_pass.PassReport()
    summary_step.update_summary(adventure=adventure, head=head, report=report, force=True, for_request=True)
    if report.errors:
        raise ProviderError("summary_failed", report.errors[0])
    adventure.refresh_from_db()
    return adventure


IMPORT_MEMORIES_MAX = (
    import_doc.IMPORT_MEMORIES_MAX
)  # memories in one imported adventure (every branch, every character)


def memories_export(*, adventure: Adventure) -> list[dict]:
    """Every memory of the adventure, on every branch: the adventure's own and its characters'
    (``character``: the card's place in the export's card list). A stale memory a pass would
    write again is left out (its block is remembered anew after import); vectors are not carried
    (the imported adventure's pass embeds them); nor are the memories of secrets (stories.party.secrets),
    the owner's own included: an imported story has no one to keep them from."""
    cards = {
        pk: i
        for i, pk in enumerate(StoryCard.every.filter(adventure=adventure).order_by("id").values_list("pk", flat=True))
    }
    rows = (
        Memory.objects.filter(adventure=adventure, seen_by__isnull=True)
        .exclude(stale=True, edited=False)
        .order_by("branch_id", "depth", "id")
    )
    return [
        {
            "branch": m.branch_id,
            "depth": m.depth,
            "source_start": m.source_start,
            "source_end": m.source_end,
            "text": m.text,
            "character": cards.get(m.character_id),
            "kind": m.kind,
            "importance": m.importance,
            "part": m.part,
            "pinned": m.pinned,
            "forgotten": m.forgotten,
            "stale": m.stale,
            "edited": m.edited,
            "offline": m.offline,
        }
        for m in rows
    ]


class MemoryDoc(serializers.Serializer):
    """One memory of an ``everlore.adventure`` document (``memories_export`` writes them): the
    declared schema, bounds that fit the columns, checked before any row is written."""

    branch = strict.IntegerField(max_value=import_doc.ID_MAX)
    depth = strict.IntegerField(min_value=1, max_value=import_doc.DEPTH_MAX)
    source_start = strict.IntegerField(
        min_value=1, max_value=import_doc.DEPTH_MAX, allow_null=True, required=False, default=None
    )
    source_end = strict.IntegerField(
        min_value=1, max_value=import_doc.DEPTH_MAX, allow_null=True, required=False, default=None
    )
    text = strict.TextField(
        max_length=MEMORY_TEXT_MAX,
        trim_whitespace=False,
        error_messages={
            "blank": f"must be 1 to {MEMORY_TEXT_MAX} characters",
            "max_length": f"must be 1 to {MEMORY_TEXT_MAX} characters",
        },
    )
    character = strict.IntegerField(
        max_value=import_doc.IMPORT_CARDS_MAX, allow_null=True, required=False, default=None
    )
    kind = strict.ChoiceField(choices=["", "note", *cast.KINDS], required=False, default="", allow_blank=True)
    importance = strict.FloatField(
        min_value=0.0,
        max_value=1.0,
        required=False,
        default=0.5,
        error_messages={key: "must be a number from 0 to 1" for key in ("invalid", "min_value", "max_value")},
    )
    part = strict.IntegerField(min_value=0, max_value=cast.CAST_PARTS_MAX - 1, required=False, default=0)
    pinned = strict.BooleanField(required=False, default=False)
    forgotten = strict.BooleanField(required=False, default=False)
    stale = strict.BooleanField(required=False, default=False)
    edited = strict.BooleanField(required=False, default=False)
    offline = strict.BooleanField(required=False, default=False)

    def validate(self, attrs):
        start, end = attrs["source_start"], attrs["source_end"]
        if (start is None) != (end is None) or (start is not None and not start <= end <= attrs["depth"]):
            raise serializers.ValidationError(
                "source_start and source_end must both be empty or depths up to the memory's own, start first"
            )
        if not attrs["text"].strip():
            raise serializers.ValidationError({"text": f"must be 1 to {MEMORY_TEXT_MAX} characters"})
        return attrs


class _MemoriesDoc(serializers.Serializer):
    memories = strict.list_of(MemoryDoc, max_length=IMPORT_MEMORIES_MAX, allow_null=True, required=False, default=None)


def memories_document(data) -> list[dict] | None:
    """The memories part of an export document, every field checked against ``MemoryDoc`` (None
    when the file carries none). Raises InvalidRequest naming each problem and where."""
    if not isinstance(data, dict) or data.get("memories") is None:
        return None
    return import_doc.check(_MemoriesDoc, {"memories": data["memories"]})["memories"]


def memories_import(*, adventure: Adventure, rows: list[dict], branch_ids: dict[int, int], card_ids: list[int]) -> int:
    """Store an export's memories (``memories_document``'s rows) on the imported adventure's tree
    (in the import's transaction; raises InvalidRequest, which undoes the whole import, on a
    memory that names a branch, depth or character the file does not hold)."""

    def need(condition: bool, message: str) -> None:
        if not condition:
            raise InvalidRequest(f"import: {message}")

    characters = set(
        StoryCard.every.filter(pk__in=card_ids, type=StoryCard.Type.CHARACTER).values_list("pk", flat=True)
    )
    tips = dict(Branch.objects.filter(adventure=adventure).values_list("pk", "tip_depth"))
    made = []
    for n, row in enumerate(rows):
        need(row["branch"] in branch_ids, f"memories[{n}] names an unknown 'branch'")
        branch_id = branch_ids[row["branch"]]
        need(row["depth"] <= max(tips[branch_id], 1), f"memories[{n}]: its depth must be a node of its branch")
        character = row["character"]
        need(
            character is None or (character < len(card_ids) and card_ids[character] in characters),
            f"memories[{n}]: 'character' must be the place of a character card in 'cards', or null",
        )
        made.append(
            Memory(
                adventure=adventure,
                branch_id=branch_id,
                depth=row["depth"],
                source_start=row["source_start"],
                source_end=row["source_end"],
                text=row["text"],
                character_id=card_ids[character] if character is not None else None,
                kind=row["kind"],
                importance=row["importance"],
                part=row["part"],
                **{name: row[name] for name in ("pinned", "forgotten", "stale", "edited", "offline")},
            )
        )
    try:
        with transaction.atomic():
            Memory.objects.bulk_create(made)
    except IntegrityError:
        raise InvalidRequest("import: two memories of the same block for the same holder") from None
    return len(made)
