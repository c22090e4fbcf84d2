"""Recall: rank the current path's memory bank inside Postgres with pgvector's
cosine distance (``<=>``). Pinned memories always come first and count toward
top_k. Use counts change only on real turns."""

from __future__ import annotations

import logging

from django.db.models import Case, F, FloatField, Q, When
from pgvector import HalfVector
from pgvector.django import CosineDistance

from memory import bank, embedder
from memory.models import Memory
from stories import lineage, tokens
from stories.context import MemoryItem, render_action
from stories.models import Action, Adventure, Branch

log = logging.getLogger(__name__)

QUERY_ACTIONS = 4  # newest story actions that make the query
QUERY_TOKENS = 600  # the query text keeps its end past this


def query_text(branch: Branch, *, below_depth: int | None = None, story: list[Action] | None = None) -> str:
    """The newest QUERY_ACTIONS story actions (leaving out a take being
    retried), cut to ~600 tokens. ``story``: the path's recent actions, oldest
    first, when the caller already has them (saves a query on a turn)."""
    if story is None:
        story = lineage.recent(branch, count=QUERY_ACTIONS, below_depth=below_depth)
    elif below_depth is not None:
        story = [a for a in story if a.depth < below_depth]
    actions = story[-QUERY_ACTIONS:]
    return tokens.keep_end("\n".join(render_action(a) for a in actions), tokens=QUERY_TOKENS)


def rank(*, branch: Branch, vector: list[float] | None, model: str, top_k: int) -> list[MemoryItem]:
    """One SQL query: this adventure, the path's lineage, not forgotten, embedded
    with ``model`` (or pinned), pinned first, then nearest."""
    if top_k <= 0:
        return []
    qs = Memory.objects.filter(lineage.path_q(branch), adventure_id=branch.adventure_id, forgotten=False)
    if vector is None:
        qs = qs.filter(pinned=True).annotate(distance=Case(default=None, output_field=FloatField()))
    else:
        qs = qs.filter(Q(embedding_model=model, embedding__isnull=False) | Q(pinned=True)).annotate(
            distance=Case(
                When(embedding_model=model, then=CosineDistance("embedding", HalfVector(vector))),
                default=None, output_field=FloatField(),
            )
        )
    rows = qs.order_by("-pinned", F("distance").asc(nulls_last=True), "id").values_list(
        "pk", "text", "pinned", "distance"
    )[:top_k]
    return [MemoryItem(id=pk, text=text, similarity=None if d is None else round(1.0 - d, 4), pinned=pinned)
            for pk, text, pinned, d in rows]


def recall(*, adventure: Adventure, branch: Branch, user_id: int, top_k: int, below_depth: int | None = None,
           story: list[Action] | None = None, record_use: bool) -> list[MemoryItem]:
    """The memories for the next reply on ``branch``. ``record_use`` is True only
    on real turns (never on an Insights dry run)."""
    if not adventure.memory_bank_enabled or top_k <= 0:
        return []
    text = query_text(branch, below_depth=below_depth, story=story)
    vector, model = None, ""
    if text:
        try:
            model, vectors = embedder.embed(user_id=user_id, texts=[text], adventure_id=adventure.pk)
            vector = vectors[0]
        except embedder.EmbeddingUnavailable as exc:
            log.info("recall of adventure %s uses pinned memories only: %s", adventure.pk, exc)
    items = rank(branch=branch, vector=vector, model=model, top_k=top_k)
    if record_use:
        bank.record_use([m.id for m in items])
    return items
