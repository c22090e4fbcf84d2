"""The formats of the field, in and out: SillyTavern character cards (V1, V2 and V3, as JSON or
as a PNG carrying the JSON in its `chara` or `ccv3` text chunk) with their character books,
SillyTavern and NovelAI lorebooks, AI Dungeon's story cards (stories.cards), and a story's cards
out again as a SillyTavern lorebook.

Everything is read and checked before a row is written, with the same limits as the site's own
cards and adventures; a file that breaks one is a 400 naming the place. What has no equivalent
here is reported in the answer, never dropped in silence: a lorebook's always-on entries go to
the plot essentials (always in the prompt), secondary keys and example dialogue are named as not
carried, and so on."""

from __future__ import annotations

import base64
import binascii
import io
import zlib

from django.db import transaction
from PIL import PngImagePlugin

from config.errors import InvalidRequest
from config.input_guard import parse_json
from stories import cards as story_cards
from stories import limits
from stories.adventures import story_create
from stories.library import aidungeon, macros
from stories.library import lorebook_schemas as schemas
from stories.models import (
    CARD_ENTRY_MAX,
    LONG_TEXT_MAX,
    TITLE_MAX,
    Adventure,
    StoryCard,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FILE_MAX = 8 * 1024 * 1024  # bytes of an uploaded card or lorebook


# ---------------------------------------------------------------------------- reading a file

CARD_CHUNKS = ("ccv3", "chara")  # the text chunks that carry a card, the preferred first
CARD_TEXT_MAX = FILE_MAX  # bytes a card's chunk may hold once inflated
UTF8_BOM = b"\xef\xbb\xbf"
KEYWORD_MAX = 79  # bytes of a PNG text chunk's keyword (the PNG specification's bound)


def _inflated(data: bytes, keyword: str) -> bytes:
    """A compressed text chunk's text, inflated to at most CARD_TEXT_MAX bytes (past it a 400
    naming the chunk) without ever holding more."""
    inflater = zlib.decompressobj()
    try:
        text = inflater.decompress(data, CARD_TEXT_MAX)
        if inflater.unconsumed_tail or not inflater.eof and inflater.decompress(b"", 1):
            raise InvalidRequest(
                f"file: the PNG's {keyword!r} chunk inflates past {CARD_TEXT_MAX // (1024 * 1024)} MB, "
                "the most a character card may hold"
            )
    except zlib.error:
        raise InvalidRequest(
            f"file: the PNG's {keyword!r} chunk is not readable (its compression is damaged)"
        ) from None
    return text


def _card_text(kind: bytes, body: bytes) -> tuple[str, bytes] | None:
    """(keyword, text) of a tEXt, zTXt or iTXt chunk's body; None for another kind."""
    keyword, _, rest = body.partition(b"\0")
    name = keyword.decode("latin-1").lower()
    if kind == b"tEXt":
        return name, rest
    if kind == b"zTXt":
        return name, _inflated(rest[1:], name)
    if kind == b"iTXt":
        compressed, rest = rest[:1] == b"\1", rest[2:]
        _language, _, rest = rest.partition(b"\0")
        _translated, _, text = rest.partition(b"\0")
        return name, _inflated(text, name) if compressed else text
    return None


def png_card(raw: bytes) -> dict:
    """The character card a PNG carries: its `ccv3` text chunk (V3), else its `chara` one (V2),
    base64 JSON in a tEXt, zTXt or iTXt chunk. Only those chunks are read (the first of each
    name; every other chunk is passed over unread and never inflated), each inflated to at most
    CARD_TEXT_MAX bytes; Pillow's chunk reader checks the file's framing and those chunks'
    checksums. A damaged file or card is a 400 saying what to fix."""
    if not raw.startswith(PNG_SIGNATURE):
        raise InvalidRequest("file: not a PNG image (a character card is a PNG or a JSON file)")
    found: dict[str, bytes] = {}
    with PngImagePlugin.ChunkStream(io.BytesIO(raw)) as chunks:
        chunks.fp.seek(len(PNG_SIGNATURE))
        while len(found) < len(CARD_CHUNKS) and chunks.fp.tell() + 12 <= len(raw):
            try:
                kind, at, length = chunks.read()
            except SyntaxError:
                raise InvalidRequest("file: this PNG is damaged (a chunk that is not one)") from None
            if kind == b"IEND":
                break
            if at + length + 4 > len(raw):
                raise InvalidRequest("file: this PNG is cut short (a chunk runs past the end of the file)")
            head = raw[at : at + KEYWORD_MAX + 1].partition(b"\0")[0].decode("latin-1").lower()
            if kind not in (b"tEXt", b"zTXt", b"iTXt") or head not in CARD_CHUNKS or head in found:
                chunks.fp.seek(at + length + 4)
                continue
            body = chunks.fp.read(length)
            try:
                chunks.crc(kind, body)
            except SyntaxError:
                raise InvalidRequest(
                    f"file: this PNG's {head!r} chunk is damaged (its checksum does not match)"
                ) from None
            name, text = _card_text(kind, body)
            found[name] = text
    chunk = found.get("ccv3") or found.get("chara")
    if chunk is None:
        raise InvalidRequest("file: this PNG carries no character card (no 'chara' or 'ccv3' text chunk)")
    try:
        decoded = base64.b64decode(chunk, validate=False)
    except (binascii.Error, ValueError):
        raise InvalidRequest("file: the card inside this PNG is not readable JSON (its base64 is damaged)") from None
    data = _json_file(decoded, what="the card inside this PNG")
    if not isinstance(data, dict):
        raise InvalidRequest("file: the card inside this PNG is not a JSON object")
    return data


def _json_file(raw: bytes, *, what: str) -> object:
    """``raw`` read by the request body's strict JSON reader (a UTF-8 byte-order mark allowed)."""
    try:
        return parse_json(raw.removeprefix(UTF8_BOM))
    except ValueError as exc:
        message = str(exc).replace("the body", what)
        raise InvalidRequest(f"file: {message}") from None


def read_document(request) -> object:
    """The JSON document of a request: its body, or an uploaded file (form field `file`): a PNG
    character card or a JSON file, read as strictly as a body."""
    upload = request.FILES.get("file") if hasattr(request, "FILES") else None
    if upload is None:
        return request.data
    if upload.size > FILE_MAX:
        raise InvalidRequest(f"file: at most {FILE_MAX // (1024 * 1024)} MB")
    raw = upload.read()
    if raw.startswith(PNG_SIGNATURE):
        return png_card(raw)
    if raw.removeprefix(UTF8_BOM).lstrip()[:1] not in (b"{", b"["):
        raise InvalidRequest("file: neither a PNG character card nor a JSON file")
    return _json_file(raw, what="the file")


# ---------------------------------------------------------------------------- the entries


def _entries(data, *, prefix: str = "") -> tuple[str, list[tuple[str, dict]]]:
    """The format's name and its entries as its declared schema reads them
    (stories.library.lorebook_schemas), each with the place it stands at in the file."""
    if isinstance(data, dict) and isinstance(data.get("entries"), dict):  # SillyTavern World Info
        book = schemas.checked(schemas.WorldInfo, data, prefix=prefix)
        return "SillyTavern lorebook", [(f"entries.{k}", v) for k, v in book["entries"].items()]
    if isinstance(data, dict) and "lorebookVersion" in data and isinstance(data.get("entries"), list):
        book = schemas.checked(schemas.NovelAILorebook, data, prefix=prefix)
        return "NovelAI lorebook", [(f"entries[{i}]", v) for i, v in enumerate(book["entries"])]
    if isinstance(data, dict) and isinstance(data.get("entries"), list):  # a character book
        book = schemas.checked(schemas.CharacterBook, data, prefix=prefix)
        return "character book", [(f"entries[{i}]", v) for i, v in enumerate(book["entries"])]
    raise InvalidRequest(
        "expected a lorebook: SillyTavern (World Info), NovelAI (.lorebook), a character card's book, "
        "or AI Dungeon's story cards"
    )


def book_cards(
    data, *, prefix: str = "", filler: macros.Macros | None = None
) -> tuple[list[dict], list[str], list[dict]]:
    """A lorebook's entries as card fields (their macros filled by ``filler``), the always-on
    entries' texts (for the plot essentials), and what was not carried."""
    form, entries = _entries(data, prefix=prefix)
    made, always, report = [], [], []
    fill = filler.fill if filler else (lambda text: text)
    for place, entry in entries:
        where = prefix + place
        content = fill(entry.get("content") or entry.get("text") or "")
        keys = entry.get("keys") or entry.get("key") or []
        name = entry.get("name") or entry.get("comment") or entry.get("displayName") or (keys[0] if keys else "")
        name = name[:100].strip()
        enabled = entry.get("enabled") is not False and entry.get("disable") is not True
        if not enabled:
            report.append({"place": where, "what": "a disabled entry: not carried"})
            continue
        if entry.get("secondary_keys") or entry.get("keysecondary"):
            report.append({"place": where, "what": "secondary keys: not carried (cards here trigger on their keys)"})
        if entry.get("constant") or entry.get("forceActivation"):
            if content.strip():
                always.append(content.strip())
                report.append({"place": where, "what": "always on: carried into the plot essentials"})
            continue
        if not content.strip() and not name:
            report.append({"place": where, "what": "an empty entry: not carried"})
            continue
        if not keys:
            report.append({"place": where, "what": "no keys: imported as a card that triggers on nothing yet"})
        made.append({"type": "other", "name": name or f"Entry {len(made) + 1}", "keys": keys, "entry": content})
    report.insert(0, {"place": prefix or "file", "what": f"read as a {form}: {len(made)} cards"})
    return made, always, report


def _with_plot(plot: str, always: list[str], report: list[dict]) -> str:
    added = "\n\n".join(always)
    joined = "\n\n".join(x for x in (plot.strip(), added) if x)
    if len(joined) > LONG_TEXT_MAX:
        raise InvalidRequest(
            f"the always-on entries make the plot essentials longer than {LONG_TEXT_MAX} characters: "
            "switch some off or shorten them"
        )
    return joined


# ---------------------------------------------------------------------------- into a story


def import_cards(*, adventure: Adventure, data) -> tuple[list[StoryCard], list[dict]]:
    """A lorebook (or a character card's book, or AI Dungeon's cards) into ``adventure``'s cards,
    all or nothing, counting toward the owner's FILE_IMPORTS_PER_HOUR. Returns the cards made and
    the report."""
    if isinstance(data, list) or (isinstance(data, dict) and isinstance(data.get("storyCards"), list)):
        made = aidungeon.import_aidungeon(adventure=adventure, data=data)
        return made, [{"place": "file", "what": f"read as AI Dungeon story cards: {len(made)} cards"}]
    limits.file_import(user_id=adventure.owner_id)
    if isinstance(data, dict) and str(data.get("spec") or "").startswith("chara_card"):
        inner = data.get("data")
        book = inner.get("character_book") if isinstance(inner, dict) else None
        if not isinstance(book, dict):
            raise InvalidRequest("this character card has no character book to import as cards")
        data = book
    player = macros.player_name(owner_id=adventure.owner_id, given=None, texts=_book_texts(data), adventure=adventure)
    cast = list(adventure.cards.filter(type="character").values_list("name", flat=True)[:2])
    filler = macros.Macros(user=player or None, char=cast[0] if len(cast) == 1 else None)
    fields, always, report = book_cards(data, filler=filler)
    report += filler.report("file")
    story_cards.card_limit_check(adventure=adventure, adding=len(fields))
    with transaction.atomic():
        made = StoryCard.objects.bulk_create(StoryCard(adventure=adventure, **f) for f in fields)
        if always:
            plot = _with_plot(adventure.plot_essentials, always, report)
            Adventure.objects.filter(pk=adventure.pk).update(plot_essentials=plot)
    return made, report


def _book_texts(book) -> list[str]:
    """The texts of a lorebook's entries (to ask, before reading it, whether they name the player)."""
    try:
        return [str(entry.get("content") or entry.get("text") or "") for _, entry in _entries(book)[1]]
    except InvalidRequest:
        return []


_CARD_TEXTS = ("first_mes", "description", "scenario", "personality", "system_prompt", "post_history_instructions")
CARD_NOT_CARRIED = {
    "mes_example": "example dialogue: this site has no place for it",
    "alternate_greetings": "alternate greetings: start another adventure from the card to use one",
    "creator_notes": "the creator's notes",
    "tags": "tags",
    "creator": "the creator's name",
    "character_version": "the card's version",
    "group_only_greetings": "group chat greetings",
    "assets": "assets (images, sounds)",
}


def adventure_from_card(*, owner_id: int, data, persona_name: str | None = None) -> tuple[Adventure, list[dict]]:
    """A SillyTavern character card (V1, V2 or V3) as a new adventure: the greeting is the
    opening, the description and scenario the plot essentials, the character a card of the cast
    (its personality), the system prompt the AI instructions, the post-history instructions the
    author's note, the character book the story cards. Counts toward FILE_IMPORTS_PER_HOUR.
    Returns the adventure and the report."""
    limits.file_import(user_id=owner_id)
    if not isinstance(data, dict):
        raise InvalidRequest("expected a character card: a JSON object (or a PNG carrying one)")
    spec = str(data.get("spec") or "")
    if spec in ("chara_card_v2", "chara_card_v3"):
        raw, prefix = data.get("data"), "data."
        card = schemas.checked(schemas.CharacterCard, data)["data"]
    elif "name" in data and ("first_mes" in data or "description" in data):
        raw, prefix = data, ""  # V1: the fields at the top
        card = schemas.checked(schemas.CardFields, data)
    else:
        raise InvalidRequest(
            "expected a SillyTavern character card (spec chara_card_v2 or chara_card_v3, or V1 fields)"
        )
    name = card["name"].strip()
    if not name:
        raise InvalidRequest(f"{prefix}name: must not be empty")
    book = raw.get("character_book")
    texts = [str(card.get(f) or "") for f in _CARD_TEXTS] + (_book_texts(book) if isinstance(book, dict) else [])
    player = macros.player_name(owner_id=owner_id, given=persona_name, texts=texts)
    filler = macros.Macros(user=player or None, char=name)

    def text(field: str) -> str:
        return filler.fill(card.get(field) or "")

    opening = text("first_mes")
    plot = "\n\n".join(text(f).strip() for f in ("description", "scenario")).strip()
    personality, instructions, note = text("personality"), text("system_prompt"), text("post_history_instructions")
    report = [{"place": "file", "what": f"read as a SillyTavern character card ({spec or 'V1'})"}]
    fields, always = [], []
    if isinstance(book, dict) and book.get("entries"):
        fields, always, book_report = book_cards(book, prefix=prefix + "character_book.", filler=filler)
        report += book_report
    plot = _with_plot(plot, always, report)
    if len(plot) > LONG_TEXT_MAX:
        raise InvalidRequest(f"{prefix}description: with the scenario, at most {LONG_TEXT_MAX} characters")
    for field, what in CARD_NOT_CARRIED.items():
        if raw.get(field):
            report.append({"place": prefix + field, "what": f"not carried: {what}"})
    if raw.get("extensions"):
        report.append({"place": prefix + "extensions", "what": "not carried: other programs' extensions"})
    report += filler.report(prefix or "file")
    character = {
        "type": "character",
        "name": name,
        "keys": [name],
        "entry": (personality.strip() or text("description"))[:CARD_ENTRY_MAX],
    }
    with transaction.atomic():
        adventure = story_create(
            owner_id=owner_id,
            title=name[:TITLE_MAX],
            opening=opening.strip(),
            plot_essentials=plot,
            ai_instructions=instructions.strip(),
            authors_note=note.strip(),
            cards=[character, *fields],
            **({"persona_name": player[:100]} if (persona_name or "").strip() else {}),
        )
    return adventure, report


def export_sillytavern(*, adventure: Adventure) -> dict:
    """The adventure's cards as a SillyTavern lorebook (World Info JSON)."""
    entries = {}
    for uid, card in enumerate(adventure.cards.order_by("id")):
        entries[str(uid)] = {
            "uid": uid,
            "key": list(card.keys),
            "keysecondary": [],
            "comment": card.name,
            "content": card.entry,
            "constant": False,
            "selective": False,
            "disable": False,
            "order": 100,
            "position": 0,
        }
    return {"name": adventure.title, "entries": entries}
