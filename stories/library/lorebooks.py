"""The formats of the field, in and out: a file as uploaded (a PNG character card carrying its JSON in
its `chara` or `ccv3` text chunk, or JSON), SillyTavern and NovelAI lorebooks and character books,
AI Dungeon's story cards (stories.cards), and a story's cards out again as a SillyTavern lorebook
(character cards themselves: stories.library.character_cards).

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
from stories.library import aidungeon, macros
from stories.library import lorebook_schemas as schemas
from stories.models import (
    LONG_TEXT_MAX,
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
        rules = _rules(entry, where, report) if form != "NovelAI lorebook" else {}
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
        made.append(
            {"type": "other", "name": name or f"Entry {len(made) + 1}", "keys": keys, "entry": content, **rules}
        )
    report.insert(0, {"place": prefix or "file", "what": f"read as a {form}: {len(made)} cards"})
    return made, always, report


# SillyTavern's insertion positions: before or after the character's definitions and the example
# messages are before the story here; before or after the author's note, and an outlet, with the
# world info after the story; 4 is "at depth"
ST_POSITIONS = {0: "before_story", 1: "before_story", 2: "world_info", 3: "world_info", 4: "at_depth"}
ST_POSITIONS |= {5: "before_story", 6: "before_story", 7: "world_info"}
ST_LOGIC = {0: "and_any", 1: "not_all", 2: "not_any", 3: "and_all"}
ST_DEPTH_DEFAULT = 4


def _rules(entry: dict, where: str, report: list[dict]) -> dict:
    """A SillyTavern entry's World Info rules (its own fields, or a character book entry's
    ``extensions``) as a card's (stories.prompt.triggers). SillyTavern scans entries recursively
    unless one says not to, so an imported card's entry may trigger others."""
    ext = entry.get("extensions") if isinstance(entry.get("extensions"), dict) else {}

    def get(*names):
        return next((src[n] for src in (ext, entry) for n in names if src.get(n) is not None), None)

    rules = {
        "prevent_recursion": bool(get("preventRecursion", "prevent_recursion")),
        "exclude_recursion": bool(get("excludeRecursion", "exclude_recursion")),
    }
    secondary = entry.get("secondary_keys") or entry.get("keysecondary") or []
    if secondary and get("selective") is False:
        report.append({"place": where, "what": "secondary keys: the file does not use them (selective is off)"})
    elif secondary:
        rules["secondary_keys"] = secondary
        rules["selective_logic"] = ST_LOGIC.get(get("selectiveLogic"), "and_any")
    position = ext.get("position") if isinstance(ext.get("position"), int) else entry.get("position")
    if isinstance(position, str):  # a character book's own field: before_char or after_char
        rules["position"] = "before_story"
    elif isinstance(position, int):
        rules["position"] = ST_POSITIONS.get(position, "world_info")
        if position == 7:
            report.append({"place": where, "what": "an outlet entry: told with the world info after the story"})
    if rules.get("position") == "at_depth":
        depth = get("depth")
        rules["depth"] = depth if depth is not None else ST_DEPTH_DEFAULT
    probability = get("probability")
    if probability is not None and get("useProbability") is not False:
        rules["probability"] = probability
    return rules


def with_plot(plot: str, always: list[str], report: list[dict]) -> str:
    added = "\n\n".join(always)
    joined = "\n\n".join(x for x in (plot.strip(), added) if x)
    if len(joined) > LONG_TEXT_MAX:
        raise InvalidRequest(
            f"the always-on entries make the plot essentials longer than {LONG_TEXT_MAX} characters: "
            "switch some off or shorten them"
        )
    return joined


# ---------------------------------------------------------------------------- into a story


def import_cards(*, adventure: Adventure, data, plot_writer=None) -> tuple[list[StoryCard], list[dict]]:
    """A lorebook (or a character card's book, or AI Dungeon's cards) into ``adventure``'s cards,
    all or nothing, counting toward the owner's FILE_IMPORTS_PER_HOUR. Returns the cards made and
    the report. Always-on entries join the plot essentials through ``plot_writer(text)`` when given
    (the plot essentials follow the tree: memory.story.canon), inside the same transaction."""
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
    player = macros.player_name(owner_id=adventure.owner_id, given=None, texts=book_texts(data), adventure=adventure)
    cast = list(adventure.cards.filter(type="character").values_list("name", flat=True)[:2])
    filler = macros.Macros(user=player or None, char=cast[0] if len(cast) == 1 else None)
    fields, always, report = book_cards(data, filler=filler)
    report += filler.report("file")
    story_cards.card_limit_check(adventure=adventure, adding=len(fields))
    with transaction.atomic():
        made = StoryCard.objects.bulk_create(StoryCard(adventure=adventure, **f) for f in fields)
        if always:
            plot = with_plot(adventure.plot_essentials, always, report)
            if plot_writer is not None:
                plot_writer(plot)
            else:
                Adventure.objects.filter(pk=adventure.pk).update(plot_essentials=plot)
    return made, report


def book_texts(book) -> list[str]:
    """The texts of a lorebook's entries (to ask, before reading it, whether they name the player)."""
    try:
        return [str(entry.get("content") or entry.get("text") or "") for _, entry in _entries(book)[1]]
    except InvalidRequest:
        return []


ST_POSITION_OF = {"before_story": 0, "world_info": 2, "at_depth": 4}
ST_LOGIC_OF = {name: number for number, name in ST_LOGIC.items()}


def st_entry_rules(card: StoryCard) -> dict:
    """A card's World Info rules as SillyTavern's fields (an entry's own, or a book entry's extensions)."""
    return {
        "selective": bool(card.secondary_keys),
        "selectiveLogic": ST_LOGIC_OF.get(card.selective_logic, 0),
        "position": ST_POSITION_OF.get(card.position, 2),
        "depth": card.depth,
        "probability": card.probability,
        "useProbability": card.probability < 100,
        "excludeRecursion": card.exclude_recursion,
        "preventRecursion": card.prevent_recursion,
    }


def export_sillytavern(*, adventure: Adventure) -> dict:
    """The adventure's cards as a SillyTavern lorebook (World Info JSON), their rules with them."""
    entries = {}
    for uid, card in enumerate(adventure.cards.order_by("id")):
        entries[str(uid)] = {
            "uid": uid,
            "key": list(card.keys),
            "keysecondary": list(card.secondary_keys),
            "comment": card.name,
            "content": card.entry,
            "constant": False,
            "disable": False,
            "order": 100,
            **st_entry_rules(card),
        }
    return {"name": adventure.title, "entries": entries}
