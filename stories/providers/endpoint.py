"""The endpoint's calls beside a chat completion: embeddings (every vector checked as it comes in)
and the models it lists (the settings page's choice). Through the one door's SDK clients, deadlines
and recording (stories.providers)."""

from __future__ import annotations

import time

from stories import limits
from stories.models import ProviderCall
from stories.providers import (
    Connection,
    ProviderError,
    _recorded_failure,
    _waiting_outside,
    client,
    record_call,
)

EMBEDDING_DIMS_MAX = 4000  # a stored vector's most (memory.models: a halfvec with STORAGE PLAIN fits an 8 kB page)
HALF_MAX = 65504.0  # the largest magnitude a halfvec holds


def _vectors_check(vectors: list) -> None:
    """Every vector a list of finite numbers a halfvec holds, of one length within EMBEDDING_DIMS_MAX:
    else ProviderError. A vector no memory can hold failed the pass that stored it, and the turn
    that ranked with it, as a database error."""
    lengths = {len(v) if isinstance(v, list) else -1 for v in vectors}
    if len(lengths) > 1 or -1 in lengths or 0 in lengths:
        raise ProviderError(
            "bad_response", "the embedding endpoint sent vectors of different lengths, empty ones or no vectors"
        )
    if lengths and max(lengths) > EMBEDDING_DIMS_MAX:
        raise ProviderError(
            "bad_response",
            f"the embedding model's vectors have over {EMBEDDING_DIMS_MAX} dimensions: use a smaller one",
        )
    for vector in vectors:
        for value in vector:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not -HALF_MAX <= value <= HALF_MAX:
                raise ProviderError(
                    "bad_response",
                    "the embedding endpoint sent a vector with a value that is not a number within ±65504",
                )


def embed(
    *,
    conn: Connection,
    texts: list[str],
    user_id: int,
    purpose: str = ProviderCall.Purpose.EMBEDDING,
    adventure_id: int | None = None,
) -> list[list[float]]:
    """Embeddings for ``texts`` (one request). Raises ProviderError; records the call."""
    started = time.monotonic()
    with (
        _recorded_failure(user_id=user_id, adventure_id=adventure_id, purpose=purpose, conn=conn, started=started),
        _waiting_outside(conn, user_id=user_id),
    ):
        response = client(conn).embeddings.create(model=conn.model, input=texts)
        vectors = [item.embedding for item in sorted(response.data, key=lambda d: d.index)]
        if len(vectors) != len(texts):
            raise ValueError("wrong number of embeddings")
        _vectors_check(vectors)
    usage = getattr(response, "usage", None)
    record_call(
        user_id=user_id,
        adventure_id=adventure_id,
        purpose=purpose,
        conn=conn,
        outcome="ok",
        started=started,
        prompt=getattr(usage, "prompt_tokens", 0) or 0,
    )
    return vectors


MODELS_LISTED_MAX = 500


def models(*, conn: Connection, user_id: int) -> list[str]:
    """The model ids the endpoint lists (``GET {endpoint}/models``), sorted; at most
    MODELS_LISTED_MAX. Raises ProviderError; records the call (as a connection test)."""
    limits.model_call(user_id=user_id)
    started = time.monotonic()
    purpose = ProviderCall.Purpose.TEST
    with (
        _recorded_failure(user_id=user_id, adventure_id=None, purpose=purpose, conn=conn, started=started),
        _waiting_outside(conn, user_id=user_id),
    ):
        listed = client(conn).models.list()
        ids = sorted({str(m.id) for m in listed.data if getattr(m, "id", None)})[:MODELS_LISTED_MAX]
    record_call(user_id=user_id, adventure_id=None, purpose=purpose, conn=conn, outcome="ok", started=started)
    return ids
