"""Token counting with tiktoken, offline.

tiktoken downloads its rank files on first use; this machine (and many
self-hosted ones) cannot. The same files ship inside the bpe-openai wheel, so
we seed tiktoken's cache from them, checked against tiktoken's own sha256.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import tempfile
from importlib import resources

import tiktoken

DEFAULT_ENCODING = "cl100k_base"  # used when the model name is unknown to tiktoken
_FILES = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"


def _seed_cache() -> None:
    cache_dir = os.environ.setdefault("TIKTOKEN_CACHE_DIR", os.path.join(tempfile.gettempdir(), "everlore-tiktoken"))
    os.makedirs(cache_dir, exist_ok=True)
    for name, sha256 in _FILES.items():
        path = os.path.join(cache_dir, hashlib.sha1(_URL.format(name=name).encode()).hexdigest())
        if os.path.exists(path):
            continue
        data = gzip.decompress(resources.files("bpe_openai.data").joinpath(f"{name}.tiktoken.gz").read_bytes())
        if hashlib.sha256(data).hexdigest() != sha256:
            raise RuntimeError(f"bundled {name} ranks do not match tiktoken's checksum")
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)


@functools.lru_cache(maxsize=None)
def encoding_for(model: str) -> tiktoken.Encoding:
    """The model's encoding, or cl100k_base when tiktoken does not know the model."""
    _seed_cache()
    try:
        name = tiktoken.encoding_name_for_model(model) if model else DEFAULT_ENCODING
    except KeyError:
        name = DEFAULT_ENCODING
    if name not in _FILES:
        name = DEFAULT_ENCODING
    return tiktoken.get_encoding(name)


def warm_up() -> None:
    """Load the default encoding now (~110 ms), so a web process's first turn does not pay for it
    (settings.SERVE_WARM_UPS)."""
    encoding_for("").encode("warm", disallowed_special=())


def count(text: str, *, model: str = "") -> int:
    return len(encoding_for(model).encode(text, disallowed_special=()))


def keep_end(text: str, *, tokens: int, model: str = "") -> str:
    """The last ``tokens`` tokens of ``text`` (all of it when it fits)."""
    enc = encoding_for(model)
    ids = enc.encode(text, disallowed_special=())
    return text if len(ids) <= tokens else enc.decode(ids[-tokens:])
