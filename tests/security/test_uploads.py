"""Every parse and decompression of a player's file is bounded: a PNG card reads only its own
`chara`/`ccv3` chunks, inflated to at most the card limit in bounded memory (a 1 MB file holding a
gigabyte of zeros in a comment chunk costs nothing); an uploaded file goes through the same strict
JSON reader as a request body (NUL, lone surrogates, numbers past 1e308, nesting), and every one
of those is a 400 naming the problem with nothing stored."""

import base64
import json
import struct
import tracemalloc
import zlib

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from stories.library import lorebooks
from stories.models import Adventure, StoryCard
from tests.stories.test_field_formats import MAREN_V2, chunk, png

pytestmark = pytest.mark.django_db

CARD_URL = "/api/adventures/import/character/?persona_name=Wren"


def upload(name: str, content: bytes, kind: str = "application/octet-stream"):
    return {"file": SimpleUploadedFile(name, content, content_type=kind)}


def with_chunks(*extra: bytes, **texts) -> bytes:
    """``png(**texts)`` with ``extra`` chunks before its IEND."""
    base = png(**texts)
    iend = base.rindex(b"IEND") - 4
    return base[:iend] + b"".join(extra) + base[iend:]


def zeros_deflated(size: int) -> bytes:
    compressor = zlib.compressobj(9)
    block = bytes(1024 * 1024)
    out = [compressor.compress(block) for _ in range(size // len(block))]
    return b"".join(out) + compressor.flush()


def stored():
    return Adventure.objects.count(), StoryCard.objects.count()


def test_a_comment_chunk_of_a_gigabyte_of_zeros_is_never_inflated(alice_api):
    bomb = chunk(b"zTXt", b"comment\0\0" + zeros_deflated(1024 * 1024 * 1024))
    itxt = chunk(b"iTXt", b"Description\0\1\0en\0\0" + zeros_deflated(256 * 1024 * 1024))
    card = with_chunks(bomb, itxt, chara=MAREN_V2)
    assert len(card) < 2 * 1024 * 1024
    tracemalloc.start()
    try:
        made = alice_api.post(CARD_URL, upload("maren.png", card, "image/png"), format="multipart")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert made.status_code == 201, made.json()
    assert made.json()["adventure"]["title"] == "Maren"
    assert peak < 64 * 1024 * 1024, f"reading the card took {peak / 2**20:.0f} MB"


def test_a_card_chunk_that_inflates_past_the_card_limit_is_a_400_naming_it(alice_api):
    bomb = chunk(b"zTXt", b"chara\0\0" + zeros_deflated(lorebooks.CARD_TEXT_MAX + 1024 * 1024))
    before = stored()
    tracemalloc.start()
    try:
        refused = alice_api.post(CARD_URL, upload("c.png", with_chunks(bomb), "image/png"), format="multipart")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert refused.status_code == 400
    assert "'chara'" in refused.json()["detail"] and "MB" in refused.json()["detail"], refused.json()
    assert peak < 3 * lorebooks.CARD_TEXT_MAX
    assert stored() == before


def test_a_compressed_card_chunk_reads_like_a_plain_one(alice_api):
    text = base64.b64encode(json.dumps(MAREN_V2).encode())
    for compressed in (
        chunk(b"zTXt", b"chara\0\0" + zlib.compress(text)),
        chunk(b"iTXt", b"chara\0\1\0\0\0" + zlib.compress(text)),
        chunk(b"iTXt", b"chara\0\0\0en\0\0" + text),
    ):
        made = alice_api.post(CARD_URL, upload("m.png", with_chunks(compressed), "image/png"), format="multipart")
        assert made.status_code == 201 and made.json()["adventure"]["title"] == "Maren", made.json()


def test_a_damaged_png_is_a_400_saying_so(alice_api):
    good = png(chara=MAREN_V2)
    at = good.index(b"tEXt") + 10
    damaged = good[:at] + bytes([good[at] ^ 1]) + good[at + 1 :]  # the chunk's checksum no longer matches
    before = stored()
    for content in (damaged, good[:60], b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 2**31) + b"tEXt"):
        refused = alice_api.post(CARD_URL, upload("m.png", content, "image/png"), format="multipart")
        assert refused.status_code == 400, refused.json()
        assert refused.json()["detail"].startswith("file:"), refused.json()
    assert stored() == before


def _deep(levels: int) -> bytes:
    return b'{"spec": "chara_card_v2", "data": ' + b"[" * levels + b"]" * levels + b"}"


HOSTILE_FILES = [
    ("NUL in a key", b'{"entries": {"0": {"key": ["fer\\u0000ry"], "content": "It sails."}}}', "NUL"),
    ("lone surrogate", b'{"entries": {"0": {"key": ["\\ud800"], "content": "It sails."}}}', "surrogate"),
    ("NaN", b'{"lorebookVersion": 5, "entries": [{"keys": ["a"], "text": "b", "searchRange": NaN}]}', "finite"),
    ("1e400", b'{"lorebookVersion": 5, "entries": [{"keys": ["a"], "text": "b", "searchRange": 1e400}]}', "1e308"),
    ("nested 100,000 deep", _deep(100_000), "nested"),
    ("not UTF-8", b'{"entries": {"0": {"key": ["\xff"], "content": "x"}}}', "UTF-8"),
]


@pytest.mark.parametrize("what, content, says", HOSTILE_FILES, ids=[h[0] for h in HOSTILE_FILES])
def test_an_uploaded_file_meets_the_request_bodys_reader(alice_api, what, content, says):
    aid = alice_api.post("/api/adventures/", {"title": "Vell"}, format="json").json()["id"]
    before = stored()
    for url in (f"/api/adventures/{aid}/cards/import/book/", CARD_URL):
        as_json = alice_api.post(url, upload("book.json", content, "application/json"), format="multipart")
        assert as_json.status_code == 400 and says in as_json.json()["detail"], (url, as_json.json())
        inside = b"\x89PNG\r\n\x1a\n" + png(chara={})[8:].replace(
            chunk(b"tEXt", b"chara\0" + base64.b64encode(b"{}")), chunk(b"tEXt", b"chara\0" + base64.b64encode(content))
        )
        as_png = alice_api.post(url, upload("card.png", inside, "image/png"), format="multipart")
        assert as_png.status_code == 400 and says in as_png.json()["detail"], (url, as_png.json())
    assert stored() == before
