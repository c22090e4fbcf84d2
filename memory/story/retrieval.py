"""Recall: rank the current path's memory bank inside Postgres with pgvector's
cosine distance (``<=>``). Every pinned memory is sent, first, and pins count
toward top_k. A stale memory (its block was edited) is left out until the pass
writes it again, unless the player wrote its text. Use counts change only on real turns."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.utils import timezone
from pgvector import HalfVector

from config import server_timing
from memory import embedder
from memory.story import scene
from memory.vectors import vector_cursor
from stories.cards import present_cards
from stories.models import Action, Adventure, Branch, StoryCard
from stories.prompt import tokens
from stories.prompt.context import Knowing, MemoryItem
from stories.prompt.voice import told
from stories.tree import lineage

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
    return tokens.keep_end("\n".join(told(a) for a in actions), tokens=QUERY_TOKENS)


# Hand-written and sent with the query vector in binary: building this query
# with the ORM cost ~1.6 ms and a text vector ~1 ms more at 1536 dimensions,
# against ~0.1 ms of execution in Postgres (measured, bench/recall.py).
# Every pin is sent, and pins count toward top_k: the nearest unpinned memories
# fill what the pins leave of top_k (a top-N scan with LIMIT, as before pins counted).
_RANK_SQL = """
WITH pins AS (
  SELECT m.id, m.text, m.pinned, m.source_start, m.source_end,
         CASE WHEN m.embedding_model = %s THEN m.embedding <=> %s END AS distance
  FROM memory_memory m
  WHERE m.adventure_id = %s AND m.character_id IS NULL AND NOT m.forgotten AND m.pinned AND {path}
    AND (m.edited OR NOT m.stale)
), ranked AS (
  SELECT 0 AS grp, * FROM pins
  UNION ALL
  (SELECT 1 AS grp, m.id, m.text, m.pinned, m.source_start, m.source_end, m.embedding <=> %s AS distance
   FROM memory_memory m
   WHERE m.adventure_id = %s AND m.character_id IS NULL AND NOT m.forgotten AND NOT m.pinned AND {path}
     AND (m.edited OR NOT m.stale)
     AND m.embedding_model = %s AND m.embedding IS NOT NULL
   ORDER BY distance, m.id
   LIMIT greatest(%s - (SELECT count(*) FROM pins), 0))
){used}
SELECT id, text, pinned, source_start, source_end, distance FROM ranked
ORDER BY grp, distance ASC NULLS LAST, id
"""
_PINNED_SQL = """
WITH ranked AS (
SELECT m.id, m.text, m.pinned, m.source_start, m.source_end, NULL::float8 AS distance
FROM memory_memory m
WHERE m.adventure_id = %s AND m.character_id IS NULL AND NOT m.forgotten AND m.pinned AND {path}
    AND (m.edited OR NOT m.stale)
){used}
SELECT * FROM ranked ORDER BY id
"""
# A real turn counts its use of what it ranked in the same statement (one round trip, not two): the
# data-modifying CTE runs whether or not the SELECT reads it. Its one parameter is the time of use.
_USED = """, used AS (
  UPDATE memory_memory u SET use_count = u.use_count + 1, last_used_at = %s FROM ranked WHERE u.id = ranked.id)"""


def _path_seen(branch: Branch, viewer: int | None) -> tuple[str, list]:
    """The path's clause over memories, and of the memories of secrets (stories.party.secrets) those
    told to ``viewer`` (None: none of them)."""
    path, params = lineage.path_sql(branch, table="m")
    if viewer is None:
        return f"{path} AND m.seen_by IS NULL", params
    return f"{path} AND (m.seen_by IS NULL OR m.seen_by @> ARRAY[%s]::integer[])", [*params, viewer]


def rank(
    *,
    branch: Branch,
    vector: list[float] | None,
    model: str,
    top_k: int,
    record_use: bool = False,
    viewer: int | None = None,
) -> list[MemoryItem]:
    """One SQL query: this adventure, the path's lineage, not forgotten, embedded
    with ``model`` (or pinned), the shared bank and the memories of secrets told to ``viewer``.
    Every pinned memory, then the nearest by ``<=>`` until ``top_k`` memories in all (pins count
    toward it; with more pins than top_k, or top_k 0, the pins alone). ``record_use``: count their use."""
    path, path_params = _path_seen(branch, viewer)
    used, used_params = (_USED, [timezone.now()]) if record_use else ("", [])
    with vector_cursor() as cursor:
        if vector is None:
            cursor.execute(_PINNED_SQL.format(path=path, used=used), [branch.adventure_id, *path_params, *used_params])
        else:
            query = HalfVector(vector)
            cursor.execute(
                _RANK_SQL.format(path=path, used=used),
                [
                    model,
                    query,
                    branch.adventure_id,
                    *path_params,
                    query,
                    branch.adventure_id,
                    *path_params,
                    model,
                    max(top_k, 0),
                    *used_params,
                ],
            )
        rows = cursor.fetchall()
    return [
        MemoryItem(
            id=pk,
            text=text,
            similarity=None if d is None else round(1.0 - d, 4),
            pinned=pinned,
            source_start=start,
            source_end=end,
        )
        for pk, text, pinned, start, end, d in rows
    ]


KNOWS_TOP_K = 4  # memories per character named in the recent story
KNOWS_CHARACTERS_MAX = 3  # characters with a part of their own in one prompt, the most recently named first
# A character's memories rank by relevance to the recent story (cosine similarity), recency (e-folding
# over KNOWS_RECENCY_ACTIONS story actions), importance and kind (what it said or did first). Chosen, not
# tuned: who knows what is decided by presence when the memories are written (memory.story.cast), not here.
KNOWS_RECENCY_ACTIONS = 60.0
KNOWS_RECENCY_WEIGHT = 0.3
KNOWS_IMPORTANCE_WEIGHT = 0.3
_KNOWS_SQL = """
WITH ranked AS (
 SELECT * FROM (
  SELECT s.*, row_number() OVER (
           PARTITION BY s.character_id
           ORDER BY s.pinned DESC,
                    coalesce(s.similarity, 0)
                    + %s * exp(-greatest(%s - s.depth, 0) / %s)
                    + %s * s.importance
                    + CASE s.kind WHEN 'say' THEN 0.1 WHEN 'interaction' THEN 0.1 WHEN 'note' THEN 0.1
                                  WHEN 'heard' THEN 0.05 ELSE 0 END DESC,
                    s.id DESC) AS r
  FROM (
    SELECT m.character_id, m.id, m.text, m.pinned, m.source_start, m.source_end, m.depth, m.importance, m.kind,
           CASE WHEN m.embedding_model = %s AND m.embedding IS NOT NULL THEN 1 - (m.embedding <=> %s::halfvec)
           END AS similarity
    FROM memory_memory m
    WHERE m.adventure_id = %s AND m.character_id = ANY(%s) AND NOT m.forgotten AND {path}
      AND (m.edited OR NOT m.stale)
  ) s
 ) numbered
 WHERE r <= %s
){used}
SELECT character_id, id, text, pinned, source_start, source_end, similarity FROM ranked
ORDER BY character_id, r
"""


def rank_knowledge(
    *,
    branch: Branch,
    members: list[scene.Member],
    vector: list[float] | None,
    model: str,
    top_k: int = KNOWS_TOP_K,
    record_use: bool = False,
    viewer: int | None = None,
) -> list[Knowing]:
    """One SQL query: the best ``top_k`` memories of each of ``members`` on ``branch``'s path
    (pins first), in the members' order; a member with none is left out; of the memories of secrets,
    those told to ``viewer``. ``record_use``: count their use."""
    if not members:
        return []
    path, path_params = _path_seen(branch, viewer)
    used, used_params = (_USED, [timezone.now()]) if record_use else ("", [])
    with vector_cursor() as cursor:
        cursor.execute(
            _KNOWS_SQL.format(path=path, used=used),
            [
                KNOWS_RECENCY_WEIGHT,
                branch.tip_depth,
                KNOWS_RECENCY_ACTIONS,
                KNOWS_IMPORTANCE_WEIGHT,
                model,
                HalfVector(vector) if vector is not None else None,
                branch.adventure_id,
                [m.card_id for m in members],
                *path_params,
                top_k,
                *used_params,
            ],
        )
        rows = cursor.fetchall()
    items: dict[int, list[MemoryItem]] = {}
    for card_id, pk, text, pinned, start, end, similarity in rows:
        items.setdefault(card_id, []).append(
            MemoryItem(
                id=pk,
                text=text,
                similarity=None if similarity is None else round(similarity, 4),
                pinned=pinned,
                source_start=start,
                source_end=end,
            )
        )
    return [Knowing(card_id=m.card_id, name=m.name, items=items[m.card_id]) for m in members if m.card_id in items]


@dataclass
class Recall:
    """The memories for a reply: the adventure's own, what each character named in
    the recent story knows, and why recall fell back to pinned memories only (empty
    when it ranked the bank as usual)."""

    items: list[MemoryItem] = field(default_factory=list)
    fallback: str = ""
    knowledge: list[Knowing] = field(default_factory=list)


def recall_for_turn(
    *,
    adventure: Adventure,
    branch: Branch,
    user_id: int,
    top_k: int,
    below_depth: int | None = None,
    story: list[Action] | None = None,
    record_use: bool,
    ai=None,
    cards: list[StoryCard] | None = None,
    viewer: int | None = None,
) -> Recall:
    """The memories for the next reply on ``branch``. ``record_use`` is True only
    on real turns (never on an Insights dry run). ``ai``: the owner's settings, if loaded.
    ``cards``: the adventure's cards, if loaded; the cast's characters named in the
    newest actions get their own memories (``knowledge``, ranked with the same query
    vector). When the query cannot be embedded, only pinned memories are used and
    ``fallback`` says why (the turn and Insights show it). ``viewer``: whose turn it is; the
    memories of secrets are recalled only for those they were told to (stories.party.secrets)."""
    if not adventure.memory_bank_enabled:
        return Recall()
    if story is None:
        story = lineage.recent(branch, count=QUERY_ACTIONS, below_depth=below_depth, viewer=viewer)
    with server_timing.phase("query"):
        text = query_text(branch, below_depth=below_depth, story=story)
    vector, model, fallback = None, "", ""
    if text and top_k > 0:
        try:
            with server_timing.phase("embed"):
                model, vector = embedder.embed_query(user_id=user_id, text=text, adventure_id=adventure.pk, ai=ai)
        except embedder.EmbeddingUnavailable as exc:
            log.info("recall of adventure %s uses pinned memories only: %s", adventure.pk, exc)
            fallback = f"only pinned memories were used: the embedding model failed ({exc})"
    with server_timing.phase("rank"):
        items = rank(branch=branch, vector=vector, model=model, top_k=top_k, record_use=record_use, viewer=viewer)
    if cards is None:
        cards = present_cards(adventure)
    recent = [a for a in story if below_depth is None or a.depth < below_depth][-QUERY_ACTIONS:]
    involved = scene.named_in(scene.members(cards), "\n".join(a.text for a in recent))[:KNOWS_CHARACTERS_MAX]
    with server_timing.phase("knowledge"):
        knowledge = rank_knowledge(
            branch=branch, members=involved, vector=vector, model=model, record_use=record_use, viewer=viewer
        )
    return Recall(items, fallback, knowledge)
