"""Writing memories and the story summary: prompts, the cast brief, the model
call, cleanup of what comes back, and the offline extractive fallback."""

from __future__ import annotations

import re
from dataclasses import dataclass

from memory.sentences import limit_words, most_telling, ranked, split_sentences, strip_preamble
from stories import providers
from stories.models import Action, Adventure, ProviderCall, StoryCard
from stories.prompt import tokens
from stories.prompt.triggers import triggered
from stories.prompt.voice import told, told_of

BLOCK_TOKENS_MAX = 2000  # a block's text over this keeps its end
CAST_ENTRIES_MAX = 8
CAST_ENTRY_CHARS = 240
SETTING_TOKENS = 300
MEMORY_WORDS_MAX = 50
SUMMARY_WORDS_MAX = 250
MEMORY_MAX_OUTPUT = 120  # tokens
SUMMARY_MAX_OUTPUT = 500  # tokens

MEMORY_INSTRUCTIONS = (
    "You write memories for a long interactive story. Summarize the passage as ONE memory: 1-2 plain sentences, "
    "past tense, third person, at most {words} words. Name the protagonist and every other character by name "
    '(never "you", never a pronoun without its name earlier in the memory). Keep concrete facts: names, '
    "places, objects, promises, injuries, decisions. No preamble, no quotes, no lists: the memory will be read "
    "alone, much later."
)
SUMMARY_INSTRUCTIONS = (
    "You keep the running summary of a long interactive story. Rewrite the summary so it covers everything "
    "below, in third person past tense, naming {name}, in at most {words} words. Start from the current "
    "summary: the player may have edited it, so keep every fact it states. Compress older events harder than "
    "new ones: the newest in the most detail, older ones in a sentence or a phrase each. Answer with the "
    "summary only."
)
SUMMARY_MATERIAL_TOKENS = 2000  # what happened since the last summary, at most (the newest kept)


@dataclass(frozen=True)
class Written:
    text: str
    offline: bool


UNNAMED_HERO = "the player"  # what memories call a protagonist with no name


def protagonist(adventure: Adventure) -> str:
    return adventure.persona_name.strip() or UNNAMED_HERO


def block_text(actions: list[Action], *, model: str = "") -> str:
    return tokens.keep_end(full_text(actions), tokens=BLOCK_TOKENS_MAX, model=model)


def full_text(actions: list[Action]) -> str:
    return "\n\n".join(told(a) for a in actions)


def one_line(text: str, *, limit: int = CAST_ENTRY_CHARS) -> str:
    """Whitespace collapsed to single spaces, cut at a word boundary with "…" past ``limit`` characters."""
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,;:.-") + "…"


def cast_brief(*, adventure: Adventure, text: str, cards: list[StoryCard]) -> str:
    """Who is who for the writer of a memory or summary, CAST_ENTRIES_MAX lines at
    most, one line each: the protagonist (or "The player: ..." when unnamed but
    described); then cards of any type that ``text`` (the whole block, before it
    is cut to fit) mentions; then other character cards. Names count once,
    whatever their case. The setting follows."""
    lines, seen = [], set()
    desc = adventure.persona_description.strip()
    if adventure.persona_name.strip():
        pronouns = f" ({adventure.persona_pronouns})" if adventure.persona_pronouns else ""
        lines.append(
            one_line(
                f'- Protagonist ("you" in the story): {adventure.persona_name.strip()}{pronouns}'
                + (f": {desc}" if desc else "")
            )
        )
        seen.add(adventure.persona_name.strip().lower())
    elif desc:
        lines.append(one_line(f'- The player ("you" in the story): {desc}'))
    mentioned = [hit.card for hit in triggered(cards=cards, text=text)]
    characters = [c for c in cards if c.type == StoryCard.Type.CHARACTER and c not in mentioned]
    for card in mentioned + characters:
        if len(lines) >= CAST_ENTRIES_MAX:
            break
        key = card.name.strip().lower()
        if key in seen:
            continue
        seen.add(key)
        lines.append(one_line(f"- {card.name.strip()}: {card.entry.strip()}"))
    brief = "Cast:\n" + "\n".join(lines) if lines else ""
    if adventure.plot_essentials.strip():
        setting = tokens.keep_end(adventure.plot_essentials.strip(), tokens=SETTING_TOKENS)
        brief += ("\n\n" if brief else "") + "Setting:\n" + setting
    return brief


def sentence_case(text: str, *, name: str) -> str:
    """An unnamed hero ("the player") is capitalised where a sentence starts."""
    if name != UNNAMED_HERO:
        return text
    return re.sub(r"(^|[.!?]\s+)the player\b", lambda m: m.group(1) + "The player", text)


def clean_memory(text: str, *, name: str) -> str:
    """One or two sentences, no preamble, no second person, at most 50 words."""
    text = strip_preamble(text.strip().strip('"').strip())
    text = re.sub(r"\s+", " ", text)
    text = second_to_third_person(text, name=name)
    sentences = split_sentences(text)[:2]
    return sentence_case(limit_words(" ".join(sentences), MEMORY_WORDS_MAX), name=name)


_SECOND_PERSON = [
    (re.compile(pattern, re.I), replacement)
    for pattern, replacement in (
        (r"\byou are\b", "{n} is"),
        (r"\byou were\b", "{n} was"),
        (r"\byou're\b", "{n} is"),
        (r"\byou've\b", "{n} has"),
        (r"\byou'll\b", "{n} will"),
        (r"\byou'd\b", "{n} would"),
        (r"\byou have\b", "{n} has"),
        (r"\byourself\b", "{n}"),
        (r"\byours\b", "{n}'s"),
        (r"\byour\b", "{n}'s"),
        (r"\byou\b", "{n}"),
    )
]
_YOU = re.compile("you", re.I)  # every pattern above holds it


def second_to_third_person(text: str, *, name: str) -> str:
    if not _YOU.search(text):
        return text
    for pattern, replacement in _SECOND_PERSON:
        text = pattern.sub(replacement.format(n=name).replace("\\", "\\\\"), text)
    return text


def offline_memory(*, actions: list[Action], name: str) -> str:
    """The offline fallback: the block's most informative sentences (names,
    numbers, rare words score high), second person turned into ``name``, in
    story order, at most 50 words."""
    sentences = []
    for action in actions:
        for sentence in split_sentences(told_of(action, name=name)):
            sentences.append(sentence)
    if not sentences:
        return ""
    order = ranked(sentences, numbers=1.0, bonus=lambda s: 3.0 if name in s else 0.0)
    chosen = most_telling(sentences, order, words_max=MEMORY_WORDS_MAX, at_most=2)
    text = second_to_third_person(" ".join(chosen), name=name)
    text = sentence_case(text, name=name)
    if name not in text:
        # a memory is read alone, much later: it must say whose story it is
        best_own = next((sentences[i] for i in order if name in second_to_third_person(sentences[i], name=name)), None)
        if best_own:
            text = sentence_case(second_to_third_person(best_own, name=name), name=name) + " " + text
    return limit_words(text, MEMORY_WORDS_MAX)


def write_memory(
    *,
    conn: providers.Connection | None,
    adventure: Adventure,
    actions: list[Action],
    cards: list[StoryCard],
    user_id: int,
) -> Written:
    """A memory of ``actions``. With ``conn`` the model writes it (raises
    ProviderError on failure, never falls back silently); without, offline."""
    name = protagonist(adventure)
    if conn is None:
        return Written(offline_memory(actions=actions, name=name), offline=True)
    text = block_text(actions, model=conn.model)
    brief = cast_brief(adventure=adventure, text=full_text(actions), cards=cards)
    messages = [
        {"role": "system", "content": MEMORY_INSTRUCTIONS.format(words=MEMORY_WORDS_MAX)},
        {"role": "user", "content": (brief + "\n\n" if brief else "") + "Passage:\n" + text},
    ]
    result = providers.complete(
        conn=conn,
        messages=messages,
        max_tokens=MEMORY_MAX_OUTPUT,
        temperature=0.2,
        user_id=user_id,
        purpose=ProviderCall.Purpose.MEMORY,
        adventure_id=adventure.pk,
    )
    cleaned = clean_memory(result.text, name=name)
    if not cleaned:
        raise providers.ProviderError("empty", "the model returned an empty memory")
    return Written(cleaned, offline=False)


def write_summary(
    *,
    conn: providers.Connection | None,
    adventure: Adventure,
    current: str,
    base: str,
    new_material: list[str],
    user_id: int,
    cards: list[StoryCard] | None = None,
) -> Written:
    """The rewritten story summary. ``current`` is the summary now (it holds the
    player's last edit); ``base`` is that edit itself; ``new_material`` are the
    memories (or raw passages) written since the summary mark."""
    name = protagonist(adventure)
    if conn is None:
        # Offline: the player's text verbatim, then the newest facts that fit.
        kept: list[str] = []
        budget = SUMMARY_WORDS_MAX - len(base.split())
        generated = [s for s in split_sentences(current[len(base) :] if current.startswith(base) else "")]
        for sentence in reversed(generated + new_material):
            n = len(sentence.split())
            if n > budget:
                break
            kept.insert(0, sentence)
            budget -= n
        return Written(" ".join(x for x in [base.strip(), " ".join(kept)] if x).strip(), offline=True)
    brief = cast_brief(adventure=adventure, text="\n".join(new_material), cards=cards or [])
    happened = tokens.keep_end(
        "\n".join(f"- {m}" for m in new_material), tokens=SUMMARY_MATERIAL_TOKENS, model=conn.model
    )
    messages = [
        {"role": "system", "content": SUMMARY_INSTRUCTIONS.format(name=name, words=SUMMARY_WORDS_MAX)},
        {
            "role": "user",
            "content": (brief + "\n\n" if brief else "")
            + f"Current summary:\n{current.strip() or '(none yet)'}\n\nWhat happened since:\n"
            + happened,
        },
    ]
    result = providers.complete(
        conn=conn,
        messages=messages,
        max_tokens=SUMMARY_MAX_OUTPUT,
        temperature=0.3,
        user_id=user_id,
        purpose=ProviderCall.Purpose.SUMMARY,
        adventure_id=adventure.pk,
    )
    text = strip_preamble(result.text.strip())
    text = limit_words(second_to_third_person(re.sub(r"\s+", " ", text), name=name), SUMMARY_WORDS_MAX)
    text = sentence_case(text, name=name)
    if not text:
        raise providers.ProviderError("empty", "the model returned an empty summary")
    return Written(text, offline=False)
