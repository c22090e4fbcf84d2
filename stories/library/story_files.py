"""Stories from other sites as this site's own export document (``everlore.adventure``): a
NovelAI ``.story`` and a KoboldAI story (a classic save, or KoboldAI United's). The document then
goes through the same import as an export of this site: the same schema, limits and job.

What each carries: the story's text as the adventure's story (its first part the opening, the
player's parts and the model's apart where the file says which is which), the memory as the
plot essentials, the author's note, the lorebook or world info as story cards (through
stories.library.lorebooks, so their keys, secondary keys and always-on entries are read as a
lorebook's are), and the title. The report says where each went and what has no place here
(generation settings, phrase biases, a NovelAI story's version history).

NovelAI keeps a story's text in ``content.story`` (its fragments, each with its origin: the
prompt, the player, the model) in files from before its newer editor, and in ``content.document``
(the editor's document, stories.library.novelai_document) since."""

from __future__ import annotations

import re

from rest_framework import serializers

from config import serializer_fields as strict
from config.errors import InvalidRequest
from stories.adventures import EXPORT_FORMAT, EXPORT_VERSION
from stories.library import lorebook_schemas as schemas
from stories.library import lorebooks, novelai_document
from stories.models import ACTION_TEXT_MAX, AUTHORS_NOTE_MAX, CARD_ENTRY_MAX, LONG_TEXT_MAX, TITLE_MAX

PARTS_MAX = 20_000  # the parts of a story read (an export holds at most as many actions)
STORY_TEXT_MAX = 20_000_000  # characters of one part as a file writes it (cut to this site's length)


# ---------------------------------------------------------------------------- declared shapes


class _Fragment(serializers.Serializer):
    data = strict.TextField(max_length=STORY_TEXT_MAX, allow_blank=True, trim_whitespace=False)
    origin = schemas.Text(most=40)


class _NovelAIStoryPart(serializers.Serializer):
    fragments = strict.list_of(_Fragment, max_length=PARTS_MAX * 4)


class _NovelAIContext(serializers.Serializer):
    text = schemas.Text(most=LONG_TEXT_MAX)


class _NovelAIContent(serializers.Serializer):
    story = _NovelAIStoryPart(required=False, allow_null=True)
    document = schemas.Text(most=STORY_TEXT_MAX)
    context = strict.list_of(_NovelAIContext, required=False, allow_null=True, max_length=100)
    lorebook = serializers.DictField(required=False, allow_null=True)  # read as a lorebook is


class _NovelAIMetadata(serializers.Serializer):
    title = schemas.Text(most=10_000)


class NovelAIStory(serializers.Serializer):
    """A NovelAI ``.story`` file (storyContainerVersion 1): the parts this site reads."""

    storyContainerVersion = strict.IntegerField(min_value=1, max_value=1)  # noqa: N815 (the format's own names)
    metadata = _NovelAIMetadata(required=False, allow_null=True)
    content = _NovelAIContent()


class _KoboldAction(serializers.Field):
    """A KoboldAI action: its text (a classic save), or KoboldAI United's object (``Selected Text``,
    the ``Options`` offered)."""

    default_error_messages = {"invalid": "must be text, or an object with its 'Selected Text'"}

    def to_internal_value(self, data):
        if isinstance(data, str) and len(data) <= STORY_TEXT_MAX:
            return {"text": data, "options": 0}
        if isinstance(data, dict) and isinstance(data.get("Selected Text", ""), str):
            options = data.get("Options") if isinstance(data.get("Options"), list) else []
            return {
                "text": data.get("Selected Text", ""),
                "options": sum(1 for o in options if isinstance(o, dict) and o.get("Text")),
            }
        self.fail("invalid")


class _KoboldUnited(serializers.Serializer):
    actions = serializers.DictField(child=_KoboldAction(), allow_empty=True)

    def validate_actions(self, value):
        if len(value) > PARTS_MAX:
            raise serializers.ValidationError(f"at most {PARTS_MAX} actions")
        return value


class _KoboldWorldInfo(serializers.Serializer):
    key = schemas.Keys()
    keysecondary = schemas.Keys()
    content = schemas.Text(most=CARD_ENTRY_MAX)
    comment = schemas.Text(most=TITLE_MAX)
    title = schemas.Text(most=TITLE_MAX)
    constant = schemas.Flag()
    selective = schemas.Flag()
    init = schemas.Flag()


class _KoboldWorldInfoV2(serializers.Serializer):
    entries = serializers.DictField(child=_KoboldWorldInfo(), allow_empty=True)


class KoboldStory(serializers.Serializer):
    """A KoboldAI story: a classic save (``actions`` a list of texts, ``worldinfo`` a list) or
    KoboldAI United's (``actions.actions`` by number, ``worldinfo_v2.entries``)."""

    prompt = schemas.Text(most=STORY_TEXT_MAX)
    memory = schemas.Text(most=LONG_TEXT_MAX)
    authorsnote = schemas.Text(most=AUTHORS_NOTE_MAX)
    authornote = schemas.Text(most=AUTHORS_NOTE_MAX)
    story_name = schemas.Text(most=10_000)
    title = schemas.Text(most=10_000)
    actions = serializers.JSONField(required=False, allow_null=True)  # a list or United's object: read below
    worldinfo = strict.list_of(_KoboldWorldInfo, required=False, allow_null=True, max_length=schemas.ENTRIES_MAX)
    worldinfo_v2 = _KoboldWorldInfoV2(required=False, allow_null=True)

    def validate_actions(self, value):
        if value is None:
            return []
        if isinstance(value, list):
            if len(value) > PARTS_MAX:
                raise serializers.ValidationError(f"at most {PARTS_MAX} actions")
            field = _KoboldAction()
            out = []
            for n, item in enumerate(value):
                try:
                    out.append(field.to_internal_value(item))
                except serializers.ValidationError as exc:
                    raise serializers.ValidationError({n: exc.detail}) from None
            return out
        if isinstance(value, dict):
            united = _KoboldUnited(data=value)
            if not united.is_valid():
                raise serializers.ValidationError(united.errors)
            items = united.validated_data["actions"]
            return [items[k] for k in sorted(items, key=lambda k: (not k.isdigit(), int(k) if k.isdigit() else 0, k))]
        raise serializers.ValidationError("must be a list of texts (or KoboldAI United's actions)")


def kind_of(data) -> str | None:
    """ "novelai", "koboldai" or None: which site's story ``data`` is."""
    if not isinstance(data, dict):
        return None
    if "storyContainerVersion" in data and isinstance(data.get("content"), dict):
        return "novelai"
    if "actions" in data and ("prompt" in data or "gamestarted" in data):
        return "koboldai"
    return None


def story_document(data) -> tuple[dict, list[dict]]:
    """(``everlore.adventure`` document, report) of a NovelAI or KoboldAI story."""
    kind = kind_of(data)
    if kind == "novelai":
        return _novelai(data)
    if kind == "koboldai":
        return _koboldai(data)
    raise InvalidRequest(
        "expected a story from another site: a NovelAI .story file or a KoboldAI story (its saved .json); "
        "an export of this site goes to /api/adventures/import/"
    )


# ---------------------------------------------------------------------------- NovelAI


def _novelai(data: dict) -> tuple[dict, list[dict]]:
    if data.get("storyContainerVersion") != 1:
        raise InvalidRequest(
            f"storyContainerVersion: this site reads version 1 of NovelAI's story files, not "
            f"{data.get('storyContainerVersion')!r}"
        )
    story_file = schemas.checked(NovelAIStory, data)
    meta, content = story_file.get("metadata") or {}, story_file["content"]
    raw = data["content"]
    report = [{"place": "file", "what": "read as a NovelAI story"}]
    story = content.get("story")
    if story and story.get("fragments"):
        parts = _novelai_parts(story["fragments"])
        if isinstance(raw.get("story"), dict) and raw["story"].get("datablocks"):
            report.append({"place": "content.story.datablocks", "what": "not carried: the story's edit history"})
    elif content.get("document"):
        parts = _sections_as_parts(novelai_document.sections(content["document"]))
        report.append(
            {
                "place": "content.document",
                "what": "read from NovelAI's editor document (its retries behind each reply, the history, are not "
                "carried)",
            }
        )
    else:
        raise InvalidRequest("content.story.fragments: this NovelAI story holds no text")
    context = content.get("context") or []
    memory = (context[0].get("text") or "") if len(context) > 0 else ""
    note = (context[1].get("text") or "") if len(context) > 1 else ""
    cards, always = [], []
    book = content.get("lorebook")
    if book and book.get("entries"):
        cards, always, book_report = lorebooks.book_cards(book, prefix="content.lorebook.")
        report += book_report
    for place in ("settings", "phraseBiasGroups", "bannedSequenceGroups", "ephemeralContext"):
        if raw.get(place):
            report.append({"place": f"content.{place}", "what": "not carried: NovelAI's own generation settings"})
    title = _title(meta.get("title"), "NovelAI story")
    return _document(title, parts, memory, note, cards, always, report, note_place="content.context[1].text"), report


def _novelai_parts(fragments: list[dict]) -> list[tuple[str, str]]:
    """(kind, text) parts: the prompt ("root") opens the story, the model's fragments ("ai") are its
    replies, the player's ("user", "edit", "prompt") their own text; neighbours of one origin join."""
    parts: list[list[str]] = []
    for fragment in fragments:
        origin = fragment.get("origin")
        kind = "start" if origin == "root" and not parts else "ai" if origin == "ai" else "story"
        if parts and (parts[-1][0] == kind or kind == "start"):
            parts[-1][1] += fragment["data"]
        else:
            parts.append([kind, fragment["data"]])
    return [(kind, text) for kind, text in parts]


SECTIONS_JOINED_MAX = ACTION_TEXT_MAX // 2  # characters of editor paragraphs joined into one part


def _sections_as_parts(sections: list[str]) -> list[tuple[str, str]]:
    """The editor's paragraphs as parts of about SECTIONS_JOINED_MAX characters (the document does
    not say which the model wrote): the first opens the story."""
    parts: list[list[str]] = []
    for text in sections:
        if parts and len(parts[-1][1]) + len(text) < SECTIONS_JOINED_MAX:
            parts[-1][1] += "\n" + text
        else:
            parts.append(["start" if not parts else "story", text])
    if not parts:
        raise InvalidRequest("content.document: this NovelAI story holds no text")
    return [(kind, text) for kind, text in parts]


# ---------------------------------------------------------------------------- KoboldAI


def _koboldai(data: dict) -> tuple[dict, list[dict]]:
    story = schemas.checked(KoboldStory, data)
    report = [{"place": "file", "what": "read as a KoboldAI story"}]
    prompt = story.get("prompt") or ""
    parts: list[tuple[str, str]] = [("start", prompt)] if prompt.strip() else []
    for n, action in enumerate(story.get("actions") or []):
        if action["options"]:
            report.append({"place": f"actions[{n}].Options", "what": "not carried: the other takes offered there"})
        text = action["text"]
        if text.strip():  # adventure mode writes the player's actions as "> You ..." lines
            parts.append(("story" if text.lstrip().startswith(">") else "ai", text))
    if not parts:
        raise InvalidRequest("prompt: this KoboldAI story holds no text")
    memory = story.get("memory") or ""
    note = story.get("authorsnote") or story.get("authornote") or ""
    book = _kobold_book(story)
    cards, always = [], []
    if book["entries"]:
        cards, always, book_report = lorebooks.book_cards(book, prefix="worldinfo.")
        report += book_report
    title = _title(story.get("story_name") or story.get("title"), _title_from(prompt))
    return _document(title, parts, memory, note, cards, always, report, note_place="authorsnote"), report


def _kobold_book(story: dict) -> dict:
    """KoboldAI's world info as a SillyTavern World Info book (the same fields: key,
    keysecondary, content, comment, constant, selective)."""
    raw = story.get("worldinfo") or []
    if story.get("worldinfo_v2") and story["worldinfo_v2"].get("entries"):
        raw = list(story["worldinfo_v2"]["entries"].values())
    entries = {}
    for n, entry in enumerate(raw):
        if entry.get("init") is False and not entry.get("content"):
            continue  # KoboldAI's empty placeholder entry
        entries[str(n)] = {
            "key": entry.get("key"),
            "keysecondary": entry.get("keysecondary"),
            "content": entry.get("content"),
            "comment": entry.get("comment") or entry.get("title"),
            "constant": entry.get("constant"),
            "selective": entry.get("selective"),
        }
    return {"entries": entries}


# ---------------------------------------------------------------------------- the document


def _title(value, fallback: str) -> str:
    title = value.strip() if isinstance(value, str) else ""
    return (title or fallback)[:TITLE_MAX]


def _title_from(prompt: str) -> str:
    first = re.split(r"(?<=[.!?])\s|\n", prompt.strip(), maxsplit=1)[0] if prompt.strip() else ""
    if len(first) > 80:  # a long first sentence: its start, cut at a word
        first = first[:80].rsplit(" ", 1)[0].rstrip(",;:") + "…"
    return first.strip() or "KoboldAI story"


def _pieces(text: str) -> list[str]:
    """``text`` in pieces of at most ACTION_TEXT_MAX characters, cut at a paragraph, else a
    sentence, else a space."""
    out = []
    while len(text) > ACTION_TEXT_MAX:
        window = text[:ACTION_TEXT_MAX]
        cut = max(window.rfind("\n\n"), window.rfind(". ") + 1, window.rfind(" "))
        cut = cut if cut > ACTION_TEXT_MAX // 2 else ACTION_TEXT_MAX
        out.append(text[:cut])
        text = text[cut:]
    return [*out, text] if text else out


def _document(title, parts, memory, note, cards, always, report, *, note_place) -> dict:
    actions, depth = [], 0
    for kind, text in parts:
        text = text.strip("\n") if kind == "start" else text
        for n, piece in enumerate(_pieces(text)):
            if not piece.strip():
                continue
            depth += 1
            actions.append(
                {"branch": 1, "depth": depth, "kind": kind if n == 0 or kind != "start" else "story", "text": piece}
            )
    if len(actions) > PARTS_MAX:
        raise InvalidRequest(f"this story has {len(actions)} parts once cut to this site's length; at most {PARTS_MAX}")
    if actions and actions[0]["kind"] != "start":  # a story opens with its start
        actions[0]["kind"] = "start"
    plot = "\n\n".join(x for x in (memory.strip(), *always) if x)
    if len(plot) > LONG_TEXT_MAX:
        raise InvalidRequest(f"the memory (with the always-on entries) is longer than {LONG_TEXT_MAX} characters")
    if plot and memory.strip():
        report.append({"place": "memory", "what": "carried into the plot essentials"})
    note = note.strip()
    if len(note) > AUTHORS_NOTE_MAX:
        raise InvalidRequest(f"{note_place}: the author's note is at most {AUTHORS_NOTE_MAX} characters here")
    if note:
        report.append({"place": note_place, "what": "carried as the author's note"})
    report.insert(1, {"place": "file", "what": f"{len(actions)} parts of story, {len(cards)} cards"})
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "adventure": {"title": title, "plot_essentials": plot, "authors_note": note},
        "head": 1,
        "branches": [{"id": 1, "tip_depth": depth}],
        "actions": actions,
        "cards": cards,
    }
