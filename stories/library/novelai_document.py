"""NovelAI's newer story text: ``content.document`` of a ``.story`` file, read into its sections.

The document is MessagePack as the msgpackr library writes it with NovelAI's options, so a plain
MessagePack reader cannot read it. Beside the standard types it uses:

- structured extensions: a fixext1 of type 20 (the document), 30, 31 (its history), 40, 41, 42
  (diffs) with one filler byte, followed by the extension's value as an ordinary value;
- records (``useRecords``): a fixext1 of type 0x72 ('r') with a byte 0x40 + id defines a record
  shape (an array of keys follows, then the first record's values); afterwards the single byte
  0x40 + id starts another record of that shape;
- bundled strings (``bundleStrings``): a fixext4 of type 0x62 ('b') gives the distance to two
  strings stored after the value; 0xc1 followed by an integer n takes the next n UTF-16 units of
  the second (n > 0) or the first (n < 0).

Read here within bounds (items, depth, text), the document is ``{sections, order, dirtySections,
history, step}``: the text sections (type 1) in ``order``, with the pending ``dirtySections``
applied (a create after an anchor, an update to a new section or a text diff, a remove). The
history tree (the retries behind each reply) is not read: the text as it stands is.
"""

from __future__ import annotations

import base64
import binascii
import struct

from config.errors import InvalidRequest

ITEMS_MAX = 200_000  # values read from one document
DEPTH_MAX = 64
STRUCTURED = {20, 30, 31, 40, 41, 42}  # NovelAI's extensions: their value follows the filler byte
SECTIONS_MAX = 50_000


class _Bad(Exception):
    pass


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.at, self.items = data, 0, 0
        self.records: dict[int, list] = {}
        self.bundle: list | None = None  # [first, second] as UTF-16-LE bytes, with positions

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise _Bad("the document is cut short")
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def byte(self) -> int:
        return self.take(1)[0]

    def value(self, depth: int = 0):
        if depth > DEPTH_MAX:
            raise _Bad("the document is nested too deeply")
        self.items += 1
        if self.items > ITEMS_MAX:
            raise _Bad(f"the document holds more than {ITEMS_MAX} values")
        t = self.byte()
        if t <= 0x7F:
            if t >= 0x40 and (t & 0x3F) in self.records:
                return self.record(self.records[t & 0x3F], depth)
            return t
        if t <= 0x8F:
            return self.map(t & 0x0F, depth)
        if t <= 0x9F:
            return self.array(t & 0x0F, depth)
        if t <= 0xBF:
            return self.text(t & 0x1F)
        if t >= 0xE0:
            return t - 0x100
        simple = {0xC0: None, 0xC2: False, 0xC3: True}
        if t in simple:
            return simple[t]
        if t == 0xC1:
            return self.bundled(depth)
        sized = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4, 0xDC: 2, 0xDD: 4, 0xDE: 2, 0xDF: 4}
        if t in sized:
            n = int.from_bytes(self.take(sized[t]), "big")
            if t <= 0xC6:
                return self.take(n)
            if t <= 0xDB:
                return self.text(n)
            return self.array(n, depth) if t <= 0xDD else self.map(n, depth)
        numbers = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q"}
        numbers |= {0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
        if t in numbers:
            fmt = numbers[t]
            return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]
        fixext = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
        if t in fixext:
            return self.ext(fixext[t], depth)
        if t in (0xC7, 0xC8, 0xC9):
            n = int.from_bytes(self.take({0xC7: 1, 0xC8: 2, 0xC9: 4}[t]), "big")
            return self.ext(n, depth)
        raise _Bad(f"an unknown MessagePack byte 0x{t:02x}")

    def text(self, n: int) -> str:
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError:
            raise _Bad("a text that is not UTF-8") from None

    def array(self, n: int, depth: int) -> list:
        if n > ITEMS_MAX:
            raise _Bad(f"a list of more than {ITEMS_MAX} values")
        return [self.value(depth + 1) for _ in range(n)]

    def map(self, n: int, depth: int) -> dict:
        if n > ITEMS_MAX:
            raise _Bad(f"a map of more than {ITEMS_MAX} entries")
        out = {}
        for _ in range(n):
            key = self.value(depth + 1)
            out[_key(key)] = self.value(depth + 1)
        return out

    def record(self, keys: list, depth: int) -> dict:
        return {_key(k): self.value(depth + 1) for k in keys}

    def ext(self, n: int, depth: int):
        kind = self.byte()
        if kind in STRUCTURED and n == 1:
            self.take(1)  # the filler byte
            return self.value(depth + 1)
        if kind == 0x72 and n == 1:  # a record shape, then its first record
            ident = self.byte() & 0x3F
            keys = self.value(depth + 1)
            if not isinstance(keys, list):
                raise _Bad("a record shape that is not a list of keys")
            self.records[ident] = keys
            return self.record(keys, depth)
        if kind == 0x62 and n == 4:  # bundled strings: two strings after the value
            distance = int.from_bytes(self.take(4), "big")
            resume = self.at
            self.at = resume + distance - 4
            first, second = self.value(depth + 1), self.value(depth + 1)
            if not isinstance(first, str) or not isinstance(second, str):
                raise _Bad("bundled strings that are not texts")
            self.bundle = [first.encode("utf-16-le"), 0, second.encode("utf-16-le"), 0]
            self.at = resume  # the value goes on where the bundle's mark was
            return self.value(depth + 1)
        self.take(n)
        return None  # an extension this reader does not know: left out

    def bundled(self, depth: int) -> str:
        if self.bundle is None:
            raise _Bad("a bundled string with no bundle")
        n = self.value(depth + 1)
        if not isinstance(n, int):
            raise _Bad("a bundled string's length that is not a number")
        which = 2 if n > 0 else 0
        units = abs(n) * 2
        start = self.bundle[which + 1]
        if start + units > len(self.bundle[which]):
            raise _Bad("a bundled string past its bundle")
        self.bundle[which + 1] = start + units
        return self.bundle[which][start : start + units].decode("utf-16-le", errors="replace")


def _key(key):
    if isinstance(key, (str, int)):
        return key
    return repr(key)[:100]


def sections(document: str) -> list[str]:
    """The text sections of a NovelAI document (base64), in order; InvalidRequest naming what is wrong."""
    where = "content.document"
    try:
        raw = base64.b64decode(document, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"{where}: not base64") from None
    reader = _Reader(raw)
    try:
        doc = reader.value()
    except (_Bad, RecursionError) as exc:
        raise InvalidRequest(f"{where}: NovelAI's document could not be read ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("sections"), dict) or not isinstance(doc.get("order"), list):
        raise InvalidRequest(f"{where}: NovelAI's document has no sections in order")
    found = dict(doc["sections"])
    order = [i for i in doc["order"] if i in found]
    if len(order) > SECTIONS_MAX:
        raise InvalidRequest(f"{where}: more than {SECTIONS_MAX} sections")
    dirty = doc.get("dirtySections")
    if isinstance(dirty, dict) and dirty:
        order = _apply(found, order, dirty)
    texts = []
    for ident in order:
        section = found.get(ident)
        if isinstance(section, dict) and section.get("type") == 1 and isinstance(section.get("text"), str):
            texts.append(section["text"].replace("\r\n", "\n").replace("\r", "\n"))
    return texts


def _apply(found: dict, order: list, dirty: dict) -> list:
    """The pending steps NovelAI had not folded in yet: creates (after an anchor, 0 the start, none
    the end), updates (a whole new section, or a text diff of parts from/delete/insert), removes."""
    removed, creates = set(), []
    for ident, step in dirty.items():
        if not isinstance(step, dict):
            continue
        kind = step.get("type")
        if kind == 0 and isinstance(step.get("section"), dict):
            creates.append((ident, step["section"], step.get("after")))
        elif kind == 1 and ident in found:
            diff = step.get("diff")
            diff = diff.get("diff", diff) if isinstance(diff, dict) else None
            if isinstance(diff, dict) and isinstance(diff.get("to"), dict):
                found[ident] = diff["to"]
            elif isinstance(diff, dict) and isinstance(diff.get("parts"), list):
                found[ident] = {**found[ident], "text": _patched(found[ident].get("text") or "", diff["parts"])}
        elif kind == 2:
            removed.add(ident)
    out = [i for i in order if i not in removed]
    for ident, section, after in creates:
        found[ident] = section
        if after == 0:
            out.insert(0, ident)
        elif after in out:
            out.insert(out.index(after) + 1, ident)
        else:
            out.append(ident)
    return out


def _patched(text: str, parts: list) -> str:
    """A text diff applied: each part deletes ``delete`` and inserts ``insert`` at ``from`` past the
    previous part's end."""
    out, cursor = [], 0
    for part in parts:
        if not isinstance(part, dict) or not isinstance(part.get("from"), int):
            raise InvalidRequest("content.document: a text diff NovelAI wrote could not be read")
        deleted, inserted = str(part.get("delete") or ""), str(part.get("insert") or "")
        at = cursor + part["from"]
        if at > len(text) or not text.startswith(deleted, at):
            raise InvalidRequest("content.document: a text diff does not fit its section")
        out += [text[cursor:at], inserted]
        cursor = at + len(deleted)
    return "".join([*out, text[cursor:]])
