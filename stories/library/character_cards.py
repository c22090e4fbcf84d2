"""SillyTavern character cards (V1, V2 and V3), in and out: a card starts an adventure (its greeting
chosen among its first message and its alternate greetings, the character a card of the cast with
its example dialogue, its book the story cards), and a character of an adventure leaves as a card
(V2 and V3 JSON, or a PNG carrying both, as SillyTavern writes one) that SillyTavern reads back.

Everything is read and checked before a row is written (stories.library.lorebook_schemas); what has
no equivalent here is reported, never dropped in silence."""

from __future__ import annotations

import base64
import io
import json

from django.db import transaction
from django.utils import timezone
from PIL import Image, ImageDraw, PngImagePlugin

from config.errors import InvalidRequest
from stories import limits
from stories.adventures import story_create
from stories.library import lorebook_schemas as schemas
from stories.library import macros
from stories.library.lorebooks import book_cards, book_texts, st_entry_rules, with_plot
from stories.models import CARD_ENTRY_MAX, LONG_TEXT_MAX, TITLE_MAX, Action, Adventure, StoryCard

_CARD_TEXTS = (
    "first_mes",
    "description",
    "scenario",
    "personality",
    "system_prompt",
    "post_history_instructions",
    "mes_example",
)
CARD_NOT_CARRIED = {
    "creator_notes": "the creator's notes",
    "tags": "tags",
    "creator": "the creator's name",
    "character_version": "the card's version",
    "group_only_greetings": "group chat greetings",
    "assets": "assets (images, sounds)",
}


def read_card(data) -> tuple[dict, dict, str, str]:
    """(the card's fields as its schema reads them, the raw fields, the place they stand at, the spec)
    of a SillyTavern character card (V1, V2 or V3), or InvalidRequest naming what to fix."""
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
    if not card["name"].strip():
        raise InvalidRequest(f"{prefix}name: must not be empty")
    return card, raw, prefix, spec


def _greetings(card: dict) -> list[str]:
    """The card's greetings: its first message, then its alternate greetings (blank ones left out)."""
    return [card.get("first_mes") or "", *(g for g in card.get("alternate_greetings") or [] if g.strip())]


def card_preview(*, owner_id: int, data, persona_name: str | None = None) -> dict:
    """What a card would start, without starting it: its name, its greetings (to choose one, their
    macros filled as they would be) and whether the player's name is needed first. Stores nothing."""
    card, raw, _prefix, _spec = read_card(data)
    name = card["name"].strip()
    book = raw.get("character_book")
    texts = [str(card.get(f) or "") for f in _CARD_TEXTS] + (book_texts(book) if isinstance(book, dict) else [])
    texts += list(card.get("alternate_greetings") or [])
    try:
        player = macros.player_name(owner_id=owner_id, given=persona_name, texts=texts)
        needed = False
    except InvalidRequest:
        player, needed = "", True
    filler = macros.Macros(user=player or None, char=name)
    return {"name": name, "greetings": [filler.fill(g) for g in _greetings(card)], "persona_needed": needed}


def adventure_from_card(
    *, owner_id: int, data, persona_name: str | None = None, greeting: int = 0
) -> tuple[Adventure, list[dict]]:
    """A SillyTavern character card (V1, V2 or V3) as a new adventure: the greeting chosen
    (``greeting``: 0 its first message, 1 and on its alternate greetings) is the opening, the
    description and scenario the plot essentials, the character a card of the cast (its personality,
    its example dialogue), the system prompt the AI instructions, the post-history instructions the
    author's note, the character book the story cards. Counts toward FILE_IMPORTS_PER_HOUR.
    Returns the adventure and the report."""
    limits.file_import(user_id=owner_id)
    card, raw, prefix, spec = read_card(data)
    name = card["name"].strip()
    greetings = _greetings(card)
    if not 0 <= greeting < len(greetings):
        raise InvalidRequest(
            f"greeting: this card has {len(greetings)} greetings: choose 0 (its first message)"
            + (f" to {len(greetings) - 1}" if len(greetings) > 1 else "")
        )
    book = raw.get("character_book")
    texts = [str(card.get(f) or "") for f in _CARD_TEXTS] + (book_texts(book) if isinstance(book, dict) else [])
    player = macros.player_name(owner_id=owner_id, given=persona_name, texts=[*texts, greetings[greeting]])
    filler = macros.Macros(user=player or None, char=name)

    def text(field: str) -> str:
        return filler.fill(card.get(field) or "")

    opening = filler.fill(greetings[greeting])
    plot = "\n\n".join(text(f).strip() for f in ("description", "scenario")).strip()
    personality, instructions, note = text("personality"), text("system_prompt"), text("post_history_instructions")
    report = [{"place": "file", "what": f"read as a SillyTavern character card ({spec or 'V1'})"}]
    if len(greetings) > 1:
        which = "its first message" if greeting == 0 else f"alternate greeting {greeting}"
        report.append(
            {
                "place": prefix + "alternate_greetings",
                "what": f"{len(greetings)} greetings: the story opens with {which} (greeting=0 to {len(greetings) - 1} "
                "chooses another)",
            }
        )
    examples = text("mes_example").strip()
    if examples:
        report.append({"place": prefix + "mes_example", "what": f"carried: {name}'s example dialogue, told with them"})
    fields, always = [], []
    if isinstance(book, dict) and book.get("entries"):
        fields, always, book_report = book_cards(book, prefix=prefix + "character_book.", filler=filler)
        report += book_report
    plot = with_plot(plot, always, report)
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
        "examples": examples[:CARD_ENTRY_MAX],
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


# ---------------------------------------------------------------------------- out again

CARD_IMAGE_SIZE = (400, 600)  # the PNG a card is carried in when the character has no picture here


def character_card(*, adventure: Adventure, card: StoryCard, spec: str = "v3") -> dict:
    """A character of ``adventure`` as a SillyTavern card (``spec`` v2 or v3): its entry the
    description, its example dialogue, the story's opening its first message when it is the only
    character, the plot essentials the scenario, the AI instructions and the author's note as the
    card's system prompt and post-history instructions, and the adventure's other cards (not its
    characters) its character book, their World Info rules in each entry's extensions."""
    characters = adventure.cards.filter(type=StoryCard.Type.CHARACTER).count()
    start = (
        Action.objects.filter(adventure=adventure, kind=Action.Kind.START, hidden=False)
        .order_by("depth", "id")
        .values_list("text", flat=True)
        .first()
    )
    entries = []
    for n, other in enumerate(adventure.cards.exclude(type=StoryCard.Type.CHARACTER).order_by("id")):
        rules = st_entry_rules(other)
        entries.append(
            {
                "id": n,
                "keys": list(other.keys),
                "secondary_keys": list(other.secondary_keys),
                "comment": other.name,
                "name": other.name,
                "content": other.entry,
                "constant": False,
                "selective": rules["selective"],
                "enabled": True,
                "insertion_order": 100,
                "position": "before_char" if other.position == StoryCard.Position.BEFORE_STORY else "after_char",
                "extensions": {k: v for k, v in rules.items() if k != "selective"},
                **({"use_regex": False} if spec == "v3" else {}),
            }
        )
    data = {
        "name": card.name,
        "description": card.entry,
        "personality": "",
        "scenario": adventure.plot_essentials,
        "first_mes": (start or "") if characters == 1 else "",
        "mes_example": card.examples,
        "creator_notes": f"Exported from Everlore: a character of the adventure {adventure.title!r}.",
        "system_prompt": adventure.ai_instructions,
        "post_history_instructions": adventure.authors_note,
        "alternate_greetings": [],
        "tags": [],
        "creator": "",
        "character_version": "",
        "extensions": {},
    }
    if entries:
        data["character_book"] = {"name": adventure.title, "extensions": {}, "entries": entries}
    if spec == "v2":
        return {"spec": "chara_card_v2", "spec_version": "2.0", "data": data}
    now = int(timezone.now().timestamp())
    data |= {"group_only_greetings": [], "creation_date": now, "modification_date": now, "nickname": card.name}
    return {"spec": "chara_card_v3", "spec_version": "3.0", "data": data}


def character_png(*, adventure: Adventure, card: StoryCard) -> bytes:
    """The card as SillyTavern writes one: a PNG with the V2 card in its ``chara`` text chunk and the
    V3 card in its ``ccv3`` one (base64 JSON, tEXt chunks); the picture is the character's name."""
    image = Image.new("RGB", CARD_IMAGE_SIZE, (38, 42, 56))
    draw = ImageDraw.Draw(image)
    draw.rectangle((16, 16, CARD_IMAGE_SIZE[0] - 16, CARD_IMAGE_SIZE[1] - 16), outline=(200, 170, 110), width=3)
    draw.text((CARD_IMAGE_SIZE[0] // 2, CARD_IMAGE_SIZE[1] // 2), card.name[:40], fill=(240, 230, 210), anchor="mm")
    info = PngImagePlugin.PngInfo()
    for keyword, spec in (("chara", "v2"), ("ccv3", "v3")):
        doc = character_card(adventure=adventure, card=card, spec=spec)
        info.add_text(keyword, base64.b64encode(json.dumps(doc, ensure_ascii=False).encode()).decode("ascii"))
    out = io.BytesIO()
    image.save(out, format="PNG", pnginfo=info)
    return out.getvalue()
