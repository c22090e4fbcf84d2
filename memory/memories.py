"""What a player does to the memory bank and the story summary."""

from __future__ import annotations

from django.db import transaction

from config import jobs
from memory import bank, embeddings, summaries, summarize
from memory.models import Memory
from stories import accounts, lineage
from stories.errors import Conflict
from stories.models import Action, Adventure, Branch
from stories.providers import ProviderError


def bank_list(*, adventure: Adventure):
    """The current path's bank (forgotten and stale included, flagged), newest first."""
    head = Branch.objects.get(pk=adventure.head_branch_id)
    return bank.path_memories(head).order_by("-depth", "-id")


def access_memory(*, adventure: Adventure, memory_id: int) -> Memory:
    """A memory of this adventure on the current path; Http404 otherwise."""
    from django.http import Http404

    head = Branch.objects.get(pk=adventure.head_branch_id)
    memory = bank.path_memories(head).filter(pk=memory_id).first()
    if memory is None:
        raise Http404
    return memory


def memory_write(*, adventure: Adventure, text: str) -> Memory:
    """A hand-written memory, hanging off the head branch at its tip."""
    with transaction.atomic():
        head = Branch.objects.select_for_update().get(pk=adventure.head_branch_id)
        memory = Memory.objects.create(adventure=adventure, branch=head, depth=max(head.tip_depth, 1), text=text)
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
    """Write the memory again from its block as it stands now (clears stale)."""
    actions = memory_source(memory=memory)
    if not actions:
        raise Conflict("a hand-written memory has no source to regenerate from; edit its text instead")
    conn = accounts.connection_for_background(user_id=adventure.owner_id, purpose="summary")
    written = summarize.write_memory(conn=conn, adventure=adventure, actions=actions,
                                     cards=list(adventure.cards.all()), user_id=adventure.owner_id)
    with transaction.atomic():
        Memory.objects.filter(pk=memory.pk).update(text=written.text, stale=False, edited=False,
                                                   offline=written.offline)
        embeddings.vector_set(memory_id=memory.pk, expected_text=written.text, vector=None, model="")
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
