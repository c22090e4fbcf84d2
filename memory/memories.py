"""What a player does to the memory bank and the story summary."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Count

from config import jobs
from memory import bank, cast, embeddings, summaries, summarize
from memory.models import Memory
from stories import accounts, lineage
from stories.errors import Conflict, InvalidRequest
from stories.models import Action, Adventure, Branch, StoryCard
from stories.providers import ProviderError


def bank_list(*, adventure: Adventure, character: StoryCard | None = None):
    """The current path's bank (forgotten and stale included, flagged), newest first: the
    adventure's own, or ``character``'s (a card of the cast, from ``access_character``)."""
    head = Branch.objects.get(pk=adventure.head_branch_id)
    memories = bank.path_memories(head)
    memories = memories.filter(character=character) if character else memories.filter(character__isnull=True)
    return memories.order_by("-depth", "-id")


def access_character(*, adventure: Adventure, card_id: int) -> StoryCard:
    """A character card of this adventure (in the cast or not: its memories stay). Raises
    InvalidRequest otherwise, the same answer for another adventure's card and for none."""
    card = StoryCard.objects.filter(pk=card_id, adventure=adventure, type=StoryCard.Type.CHARACTER).first()
    if card is None:
        raise InvalidRequest(f"character {card_id} is not a character card of this adventure")
    return card


def cast_list(*, adventure: Adventure) -> list[dict]:
    """The cast as players see it: the protagonist (whose memory is the adventure's own bank),
    then every character card, in the cast or not, with the memories each holds on the current path."""
    head = Branch.objects.get(pk=adventure.head_branch_id)
    counts = dict(bank.path_memories(head).filter(forgotten=False).values("character_id")
                  .annotate(n=Count("id")).values_list("character_id", "n"))
    out = [{"character": None, "name": summarize.protagonist(adventure), "protagonist": True, "in_cast": True,
            "memories": counts.get(None, 0)}]
    for card in adventure.cards.filter(type=StoryCard.Type.CHARACTER).order_by("id"):
        out.append({"character": card.pk, "name": card.name, "protagonist": False, "in_cast": card.in_cast,
                    "memories": counts.get(card.pk, 0)})
    return out


def access_memory(*, adventure: Adventure, memory_id: int) -> Memory:
    """A memory of this adventure on the current path; Http404 otherwise."""
    from django.http import Http404

    head = Branch.objects.get(pk=adventure.head_branch_id)
    memory = bank.path_memories(head).filter(pk=memory_id).first()
    if memory is None:
        raise Http404
    return memory


def memory_write(*, adventure: Adventure, text: str, character: StoryCard | None = None) -> Memory:
    """A hand-written memory, hanging off the head branch at its tip: the adventure's own, or
    ``character``'s."""
    with transaction.atomic():
        head = Branch.objects.select_for_update().get(pk=adventure.head_branch_id)
        memory = Memory.objects.create(adventure=adventure, branch=head, depth=max(head.tip_depth, 1), text=text,
                                       character=character, kind="note" if character else "",
                                       importance=0.7 if character else 0.5)
        jobs.memory_pass_after_commit(adventure_id=adventure.pk)  # embeds it
    return memory


def memory_update(*, memory: Memory, text: str | None = None, pinned: bool | None = None,
                  forgotten: bool | None = None) -> Memory:
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
    return list(lineage.story(memory.branch).filter(depth__gte=memory.source_start, depth__lte=memory.source_end))


def memory_regenerate(*, adventure: Adventure, memory: Memory) -> Memory:
    """Write the memory again from its block as it stands now (clears stale). A
    character's memory is written again from that character's part of the block;
    raises Conflict when the character is no longer in it."""
    actions = memory_source(memory=memory)
    if not actions:
        raise Conflict("a hand-written memory has no source to regenerate from; edit its text instead")
    conn = accounts.connection_for_background(user_id=adventure.owner_id, purpose="summary")
    cards = list(adventure.cards.all())
    if memory.character_id is not None:
        written = bank.write_cast(conn=conn, adventure=adventure, head=memory.branch,
                                  members=cast.members([c for c in cards if c.pk == memory.character_id]),
                                  actions=actions, cards=cards, start=memory.source_start)
        if not written:
            raise Conflict(f"{memory.character.name} is no longer in the scenes of this block (or not in the cast); "
                           "forget or delete this memory instead")
        fields = {"text": written[0].text, "offline": written[0].offline, "kind": written[0].kind,
                  "importance": written[0].importance}
    else:
        written = summarize.write_memory(conn=conn, adventure=adventure, actions=actions, cards=cards,
                                         user_id=adventure.owner_id)
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
    head = Branch.objects.get(pk=adventure.head_branch_id)
    report = bank.PassReport()
    bank.update_summary(adventure=adventure, head=head, report=report, force=True)
    if report.errors:
        raise ProviderError("summary_failed", report.errors[0])
    adventure.refresh_from_db()
    return adventure
