"""What a player does to an adventure or their settings that reaches into its
memory as well: create or import with a summary, change fields and summary,
switch the embedding model. (Turns are the other use case: play.turns.)
Each function is the one service its view calls."""

from __future__ import annotations

from django.db import transaction

from memory import embedder, embeddings
from memory.story import canon, canon_files, claims, memories
from stories import adventures
from stories.accounts import ai_settings
from stories.models import Adventure, AISettings


def adventure_create(*, owner_id: int, story_summary: str = "", **fields) -> Adventure:
    """A new adventure; a summary given now is the player's own (kept through every rewrite)."""
    with transaction.atomic():
        adventure = adventures.story_create(owner_id=owner_id, **fields)
        if story_summary:
            memories.summary_set(adventure=adventure, text=story_summary)
    adventure.refresh_from_db()
    return adventure


def adventure_export(*, adventure: Adventure) -> dict:
    """The whole adventure (stories.adventures) with its memories: the adventure's own and its
    characters', with their pins and the player's edits; as its owner may read it (a secret told to
    other players keeps its place without its text, and its memories stay out)."""
    return {
        **adventures.story_export(adventure=adventure, viewer=adventure.owner_id),
        "memories": memories.memories_export(adventure=adventure),
        "canon": canon_files.canon_export(adventure=adventure),
    }


def adventure_import(*, owner_id: int, data, progress=None) -> Adventure:
    """An export of this site as a new adventure, with the memories it carries; its summary
    becomes the player's own text, and the memory pass is asked for (it embeds the carried
    memories and remembers the rest of the story in the background). ``progress(stage, done,
    total)`` is told how far it is (play.imports shows it to the player)."""
    progress = progress or (lambda stage, done, total: None)
    carried = memories.memories_document(data)  # every part checked against its schema before a row
    versions = canon_files.canon_document(data)
    with transaction.atomic():
        imported = adventures.story_import(owner_id=owner_id, data=data, progress=progress)
        adventure = imported.adventure
        if carried is not None:
            progress("memories", 0, len(carried))
            memories.memories_import(
                adventure=adventure, rows=carried, branch_ids=imported.branch_ids, card_ids=imported.card_ids
            )
        if versions is not None:  # the texts' and cards' versions, each at its node
            canon_files.canon_import(
                adventure=adventure, doc=versions, branch_ids=imported.branch_ids, card_ids=imported.card_ids
            )
            adventure.refresh_from_db()
        if adventure.story_summary:
            progress("summary", 0, 1)
            adventure = memories.summary_set(adventure=adventure, text=adventure.story_summary)
    return adventure


def adventure_update(*, adventure: Adventure, story_summary: str | None = None, **fields) -> Adventure:
    """Change the fields given and, if given, the player's own summary. Writes
    only those: a concurrent fork (the head) or a summary the worker has just
    written is never overwritten with what this request read earlier."""
    with transaction.atomic():
        if story_summary is not None:
            adventure = memories.summary_set(adventure=adventure, text=story_summary.strip())
        texts = {f: fields.pop(f) for f in canon.FIELDS if f in fields and fields[f] != getattr(adventure, f)}
        for f in canon.FIELDS:
            fields.pop(f, None)  # unchanged: no version
        if texts:  # true from the node being played down its paths (memory.story.canon)
            adventure = canon.canon_set(adventure=adventure, **texts)
        reviewed = adventure.claims_review
        adventure = adventures.story_fields_update(adventure=adventure, **fields)
        if reviewed and not adventure.claims_review:
            claims.claims_apply_all(adventure=adventure)  # what waited for the player is told now
    return adventure


def ai_settings_change(*, user_id: int, api_key: str | None = None, **fields) -> AISettings:
    """Update the player's AI settings. When the embedding model changes, every
    vector of another model (story and agent memories alike) is cleared in the
    same transaction and the passes that embed them again are asked for."""
    with transaction.atomic():
        before = embedder.active_model(user_id=user_id)
        obj = ai_settings.ai_settings_update(user_id=user_id, api_key=api_key, **fields)
        if embedder.active_model(user_id=user_id) != before:
            embeddings.vectors_clear_other_models(owner_id=user_id)
    return obj
