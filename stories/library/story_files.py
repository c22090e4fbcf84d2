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

from config.errors import InvalidRequest
from stories.adventures import EXPORT_FORMAT, EXPORT_VERSION
from stories.library import lorebooks, novelai_document
from stories.models import ACTION_TEXT_MAX, AUTHORS_NOTE_MAX, LONG_TEXT_MAX, TITLE_MAX

PARTS_MAX = 20_000  # the parts of a story read (an export holds at most as many actions)


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
    meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    content = data["content"]
    report = [{"place": "file", "what": "read as a NovelAI story"}]
    story = content.get("story")
    if isinstance(story, dict) and isinstance(story.get("fragments"), list):
        parts = _novelai_parts(story["fragments"])
        if isinstance(story.get("datablocks"), list) and story["datablocks"]:
            report.append({"place": "content.story.datablocks", "what": "not carried: the story's edit history"})
    elif isinstance(content.get("document"), str) and content["document"]:
        parts = _sections_as_parts(novelai_document.sections(content["document"]))
        report.append(
            {
                "place": "content.document",
                "what": "read from NovelAI's editor document (its retries behind each "
                "reply, the history, are not carried)",
            }
        )
    else:
        raise InvalidRequest("content.story.fragments: this NovelAI story holds no text")
    context = content.get("context") if isinstance(content.get("context"), list) else []
    memory = _text_of(context[0], "content.context[0].text") if len(context) > 0 else ""
    note = _text_of(context[1], "content.context[1].text") if len(context) > 1 else ""
    cards, always = [], []
    book = content.get("lorebook")
    if isinstance(book, dict) and book.get("entries"):
        cards, always, book_report = lorebooks.book_cards(book, prefix="content.lorebook.")
        report += book_report
    for place in ("settings", "phraseBiasGroups", "bannedSequenceGroups", "ephemeralContext"):
        if content.get(place):
            report.append({"place": f"content.{place}", "what": "not carried: NovelAI's own generation settings"})
    title = _title(meta.get("title"), "NovelAI story")
    return _document(title, parts, memory, note, cards, always, report, note_place="content.context[1].text"), report


def _novelai_parts(fragments: list) -> list[tuple[str, str]]:
    """(kind, text) parts: the prompt ("root") opens the story, the model's fragments ("ai") are its
    replies, the player's ("user", "edit", "prompt") their own text; neighbours of one origin join."""
    if len(fragments) > PARTS_MAX * 4:
        raise InvalidRequest(f"content.story.fragments: at most {PARTS_MAX * 4} fragments")
    parts: list[list[str]] = []
    for n, fragment in enumerate(fragments):
        if not isinstance(fragment, dict) or not isinstance(fragment.get("data"), str):
            raise InvalidRequest(f"content.story.fragments[{n}].data: must be text")
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


def _text_of(entry, place: str) -> str:
    if not isinstance(entry, dict):
        return ""
    text = entry.get("text")
    if text is not None and not isinstance(text, str):
        raise InvalidRequest(f"{place}: must be text")
    return text or ""


# ---------------------------------------------------------------------------- KoboldAI


def _koboldai(data: dict) -> tuple[dict, list[dict]]:
    report = [{"place": "file", "what": "read as a KoboldAI story"}]
    prompt = data.get("prompt") or ""
    if not isinstance(prompt, str):
        raise InvalidRequest("prompt: must be text")
    actions = data.get("actions")
    texts: list[str] = []
    if isinstance(actions, list):  # a classic save: the texts in order
        texts = actions
        where = "actions"
    elif isinstance(actions, dict) and isinstance(actions.get("actions"), dict):  # KoboldAI United
        where = "actions.actions"
        items = sorted(actions["actions"].items(), key=lambda kv: int(kv[0]) if str(kv[0]).isdigit() else 1 << 62)
        for key, value in items:
            texts.append(value.get("Selected Text") if isinstance(value, dict) else value)
            if isinstance(value, dict) and any(
                o.get("Text") for o in value.get("Options") or [] if isinstance(o, dict)
            ):
                report.append({"place": f"{where}.{key}.Options", "what": "not carried: the other takes offered there"})
    elif actions is None:
        where = "actions"
    else:
        raise InvalidRequest("actions: must be a list of texts (or KoboldAI United's actions)")
    if len(texts) > PARTS_MAX:
        raise InvalidRequest(f"{where}: at most {PARTS_MAX} actions")
    parts: list[tuple[str, str]] = [("start", prompt)] if prompt.strip() else []
    for n, text in enumerate(texts):
        if not isinstance(text, str):
            raise InvalidRequest(f"{where}[{n}]: must be text")
        if not text.strip():
            continue
        # adventure mode writes the player's actions as "> You ..." lines
        parts.append(("story" if text.lstrip().startswith(">") else "ai", text))
    if not parts:
        raise InvalidRequest("prompt: this KoboldAI story holds no text")
    memory = data.get("memory") or ""
    note = data.get("authorsnote") if "authorsnote" in data else data.get("authornote")
    for place, value in (("memory", memory), ("authorsnote", note)):
        if value is not None and not isinstance(value, str):
            raise InvalidRequest(f"{place}: must be text")
    book = _kobold_book(data)
    cards, always = [], []
    if book["entries"]:
        cards, always, book_report = lorebooks.book_cards(book, prefix="worldinfo.")
        report += book_report
    title = _title(data.get("story_name") or data.get("title"), _title_from(prompt))
    return _document(title, parts, memory, note or "", cards, always, report, note_place="authorsnote"), report


def _kobold_book(data: dict) -> dict:
    """KoboldAI's world info as a SillyTavern World Info book (the same fields: key,
    keysecondary, content, comment, constant, selective)."""
    raw = data.get("worldinfo")
    if isinstance(data.get("worldinfo_v2"), dict) and isinstance(data["worldinfo_v2"].get("entries"), dict):
        raw = list(data["worldinfo_v2"]["entries"].values())
    if raw is None:
        return {"entries": {}}
    if not isinstance(raw, list):
        raise InvalidRequest("worldinfo: must be a list of entries")
    entries = {}
    for n, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise InvalidRequest(f"worldinfo[{n}]: must be an object")
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
