"""How much of a turn's prompt repeats the start of the last one sent for the adventure: the part
a model server's prefix cache can serve (OpenAI's cached input tokens, vLLM's and llama.cpp's
prefix caching). The site keeps a fingerprint of the last prompt, not the prompt: a chain of
8-byte hashes, one per CHUNK characters, each over everything before it, so two prompts share
their first k hashes exactly when they share their first k chunks (to one chunk of precision)."""

from __future__ import annotations

import hashlib
import struct

CHUNK = 64  # characters per hash: the figure is exact to a chunk
_HEAD = struct.Struct(">I")  # the prompt's length in characters, before the hashes


def _text(messages: list[dict]) -> str:
    return "".join(f"\x1e{m['role']}\x1f{m['content']}" for m in messages)


def fingerprint(messages: list[dict]) -> bytes:
    """The prompt's length and its chain of chunk hashes."""
    text = _text(messages)
    out, h = [_HEAD.pack(min(len(text), 2**32 - 1))], b""
    for at in range(0, len(text), CHUNK):
        h = hashlib.blake2b(h + text[at : at + CHUNK].encode(), digest_size=8).digest()
        out.append(h)
    return b"".join(out)


def reused(previous: bytes, now: bytes) -> float | None:
    """The share of the last prompt (``previous``, its fingerprint) that the prompt whose
    fingerprint is ``now`` starts with, 0 to 1; None when there was no last prompt."""
    if len(previous) < _HEAD.size + 8:
        return None
    (length,) = _HEAD.unpack_from(previous)
    same = 0
    for at in range(_HEAD.size, min(len(previous), len(now)), 8):
        if previous[at : at + 8] != now[at : at + 8]:
            break
        same += 1
    return round(min(same * CHUNK, length) / length, 3) if length else None
