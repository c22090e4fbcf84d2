"""Step 1b: the secrets of a story played together (stories.party.secrets) are remembered apart. The
shared bank, the summary and the claims are built from the shared story alone (lineage.story with
no viewer); each secret exchange (a player's private act or whisper and the narrator's answer) becomes
a memory told to the same few: the bank's, recalled only on their turns (memory.story.retrieval), and
one for each character in earshot, never for a character who was not."""

from __future__ import annotations

import logging

from django.db import IntegrityError, transaction

from memory.models import Memory
from memory.story import summarize
from memory.story.blocks import path_memories
from memory.story.report import PassReport
from stories.accounts import ai_settings
from stories.models import Action, Adventure, Branch, StoryCard
from stories.providers import ProviderError
from stories.tree import lineage

log = logging.getLogger(__name__)

SECRETS_PER_RUN = 5  # exchanges remembered a run; the rest in the next
HEARD_IMPORTANCE = 0.7  # a secret a character was told ranks above what it only saw (memory.story.retrieval)


def exchanges(head: Branch) -> list[list[Action]]:
    """The secret exchanges on ``head``'s path, oldest first: a player's secret node with the
    narrator's answers after it told to the same few (an answer alone, for a secret continue). One
    still waiting for its answer at the path's end is not an exchange yet."""
    nodes = lineage.story(head, viewer=lineage.EVERY).filter(seen_by__isnull=False)
    found: list[list[Action]] = []
    for node in nodes:
        last = found[-1][-1] if found else None
        joins = (
            last is not None
            and node.is_model_output
            and last.depth == node.depth - 1
            and (last.seen_by, last.heard_by) == (node.seen_by, node.heard_by)
        )
        if joins:
            found[-1].append(node)
        else:
            found.append([node])
    if found and not found[-1][-1].is_model_output and found[-1][-1].depth == head.tip_depth:
        found.pop()
    return found


def remember_secrets(*, adventure: Adventure, head: Branch, report: PassReport) -> None:
    """Every secret exchange on the head's path with no memory yet gets one (SECRETS_PER_RUN a run),
    written as the block's memories are (the owner's model, or offline) outside a transaction and
    stored in one, if its nodes did not change meanwhile. A model failure goes into ``report``."""
    found = exchanges(head)
    if not found:
        return
    held = {  # the exchanges remembered already (one query, whatever the story's length)
        (start, tuple(seen))
        for start, seen in path_memories(head, viewer=lineage.EVERY)
        .filter(character__isnull=True, seen_by__isnull=False, source_start__isnull=False)
        .values_list("source_start", "seen_by")
    }
    todo = [exchange for exchange in found if (exchange[0].depth, tuple(exchange[0].seen_by)) not in held]
    if not todo:
        return
    conn = ai_settings.connection_for_background(user_id=adventure.owner_id, purpose="summary")
    cards = {c.name.casefold(): c for c in adventure.cards.filter(type=StoryCard.Type.CHARACTER)}
    for exchange in todo[:SECRETS_PER_RUN]:
        try:
            written = summarize.write_memory(
                conn=conn, adventure=adventure, actions=exchange, cards=list(cards.values()), user_id=adventure.owner_id
            )
        except ProviderError as exc:
            report.failed(f"a secret's memory: {exc}", exc.code)
            return
        _store(adventure, head, exchange, written, cards)
    report.more_due = report.more_due or len(todo) > SECRETS_PER_RUN


def _store(adventure: Adventure, head: Branch, exchange: list[Action], written, cards: dict) -> None:
    first, end = exchange[0], exchange[-1].depth
    heard = first.heard_by or []  # the actor first, then those it was whispered to
    rows = [Memory(character=None, kind="", importance=0.5)] + [
        Memory(character=cards[name.casefold()], kind="heard" if i else "interaction", importance=HEARD_IMPORTANCE)
        for i, name in enumerate(heard)
        if name.casefold() in cards
    ]
    try:
        with transaction.atomic():
            now = list(
                lineage.story(head, viewer=lineage.EVERY)
                .filter(depth__gte=first.depth, depth__lte=end)
                .values_list("pk", "text")
            )
            if now != [(a.pk, a.text) for a in exchange]:
                return  # edited, undone or hidden meanwhile: the next run reads it as it stands
            for row in rows:
                row.adventure_id, row.branch_id, row.depth = adventure.pk, lineage.owner_at(head, end), end
                row.source_start, row.source_end, row.seen_by = first.depth, end, first.seen_by
                row.text, row.offline = written.text, written.offline
            Memory.objects.bulk_create(rows)
    except IntegrityError as exc:  # another run stored it first
        log.info("a secret's memory of adventure %s was stored by another run: %s", adventure.pk, exc)
