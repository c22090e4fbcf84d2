"""Story memories' vectors: the one write path of a memory's vector, embedding
the memories that have none for the owner's active model (a step of the
post-turn pass), and clearing vectors when the owner switches models."""

from __future__ import annotations

from django.db.models import Q
from pgvector import HalfVector

from config import jobs
from memory import embedder
from memory.models import EMBEDDING_DIMS_MAX, AgentMemory, AgentMemoryKey, Memory
from memory.vectors import vector_cursor
from stories.accounts import ai_settings
from stories.models import Adventure

EMBED_PER_RUN = 256  # memories embedded per run, in batches of embedder.BATCH_MAX


def vector_set(*, memory_id: int, expected_text: str, vector: list[float] | None, model: str) -> bool:
    """The one write path of a memory's vector: stores (or clears, with None)
    the vector if the memory's text is still ``expected_text`` (a vector: ``vectors_set``'s one row)."""
    if vector is not None:
        return vectors_set([(memory_id, expected_text, vector)], model=model) == 1
    return Memory.objects.filter(pk=memory_id, text=expected_text).update(embedding=None, embedding_model="") == 1


# A batch's vectors in one statement, each where its memory's text is still the one embedded (an ORM
# update a memory compiled its query each time: 7.4% of the pass worker's CPU, py-spy, bench/evening.py).
_VECTORS_SQL = f"""
UPDATE {Memory._meta.db_table} m SET embedding = v.embedding, embedding_model = %s
FROM unnest(%s::bigint[], %s::text[], %b::halfvec[]) AS v(id, text, embedding)
WHERE m.id = v.id AND m.text = v.text
"""


def vectors_set(rows: list[tuple[int, str, list[float]]], *, model: str) -> int:
    """Store each (memory id, the text embedded, its vector) where the memory's text is still that
    text; returns how many were stored. The vectors are as the one door checked them
    (stories.providers: numbers a halfvec holds, one length); ValueError, storing none, for an empty
    one or one over EMBEDDING_DIMS_MAX dimensions."""
    if any(not len(vector) or len(vector) > EMBEDDING_DIMS_MAX for _, _, vector in rows):
        raise ValueError(f"embeddings must have 1 to {EMBEDDING_DIMS_MAX} dimensions")
    if not rows:
        return 0
    # In binary (vector_cursor; %b: psycopg sends a list of them as text unless told): each vector's
    # text and its quoting as a literal were 7% of the pass worker's CPU (bench/together.py), ~4 ms
    # for a dozen 384-d vectors against ~0.2 ms.
    told = [HalfVector(vector) for _, _, vector in rows]
    with vector_cursor() as cursor:
        cursor.execute(_VECTORS_SQL, [model, [r[0] for r in rows], [r[1] for r in rows], told])
        return cursor.rowcount


def vectors_clear_other_models(*, owner_id: int) -> None:
    """After the owner's embedding model changed: clear every vector of the
    owner's story and agent memories and their fact keys made by another model (the bulk form of
    vector_set(vector=None)), and ask for the passes that embed them again.
    Runs in the caller's transaction."""
    model = embedder.active_model(user_id=owner_id)
    stale = Memory.objects.filter(adventure__owner_id=owner_id).exclude(embedding_model=model)
    adventure_ids = sorted(set(stale.values_list("adventure_id", flat=True)))
    stale.update(embedding=None, embedding_model="")
    agent_stale = AgentMemory.objects.filter(world__owner_id=owner_id).exclude(embedding_model=model)
    keys_stale = AgentMemoryKey.objects.filter(memory__world__owner_id=owner_id).exclude(
        embedding_model__in=[model, ""]
    )
    agent_ids = sorted(
        set(agent_stale.values_list("agent_id", flat=True)) | set(keys_stale.values_list("agent_id", flat=True))
    )
    agent_stale.update(embedding=None, embedding_model="")
    keys_stale.update(embedding=None, embedding_model="")
    for adventure_id in adventure_ids:
        jobs.memory_pass_after_commit(adventure_id=adventure_id)
    for agent_id in agent_ids:
        jobs.agent_pass_after_commit(agent_id=agent_id)


def embed_pending(*, adventure: Adventure, report) -> None:
    """Embed memories that have no vector for the owner's active model (the owner's settings as
    read with the adventure, when they were)."""
    ai = ai_settings.ai_settings_loaded(adventure=adventure, user_id=adventure.owner_id)
    model = embedder.active_model(user_id=adventure.owner_id, ai=ai)
    pending = list(
        Memory.objects.filter(Q(embedding__isnull=True) | ~Q(embedding_model=model), adventure=adventure)
        .order_by("id")
        .values_list("pk", "text")[:EMBED_PER_RUN]
    )
    report.more_due = report.more_due or len(pending) == EMBED_PER_RUN
    # Each wording is embedded once: the characters who witnessed one scene often remember it in the
    # same words (the offline writer always writes them so), and a story played together has up to
    # eight of them. Embedding was ~86% of a worker's pass in bench/together.py (py-spy).
    by_text: dict[str, list[int]] = {}
    for pk, text in pending:
        by_text.setdefault(text, []).append(pk)
    texts = list(by_text)
    for start in range(0, len(texts), embedder.BATCH_MAX):
        batch = texts[start : start + embedder.BATCH_MAX]
        try:
            name, vectors = embedder.embed(user_id=adventure.owner_id, texts=batch, adventure_id=adventure.pk, ai=ai)
        except embedder.EmbeddingUnavailable as exc:
            report.failed(f"embeddings: {exc}", exc.code)
            return
        rows = [(pk, text, vector) for text, vector in zip(batch, vectors) for pk in by_text[text]]
        try:
            report.embedded += vectors_set(rows, model=name)
        except ValueError as exc:
            report.failed(f"embeddings: {exc}", "bad_response")
            return
