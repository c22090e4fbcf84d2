"""The prompt's parts, the same in either layout: the fixed ones (instructions, plot essentials, the
summary, the author's note), each capped at its share of the budget, and those that change every
turn (the memories recalled, what each character named knows, the story cards triggered), each
taking its share of what the fixed ones leave. The layouts (stories.prompt.layouts) place them
around the story window."""

from __future__ import annotations

from dataclasses import dataclass, field

from stories.models import Adventure, StoryCard
from stories.prompt import tokens
from stories.prompt.context import Knowing, MemoryItem, Part
from stories.prompt.triggers import triggered

DEFAULT_INSTRUCTIONS = (
    "You are the narrator of an interactive story. Continue the story from exactly where it stops, "
    'in second person ("you" is the protagonist), for one or two short paragraphs. Never decide what the '
    "protagonist says or does beyond what the player wrote. Do not repeat earlier text or summarize."
)
KNOWS_RULE = (
    "Each character knows only what the story showed them: keep a character to what its [What ... knows] "
    "part and the scenes it was in tell. A character who was absent does not know what happened there."
)
KNOWS_SHARE = 0.08  # of the flexible budget, at most, for one character's part
CARD_SHARE = 0.4  # of the flexible budget, at most, for story cards
FIXED_PART_SHARE = 0.15  # of the budget, at most, for each of instructions / plot essentials / summary / note
CARD_SCAN_ACTIONS = 6  # newest actions whose text can trigger a card
MESSAGE_OVERHEAD = 4  # tokens per chat message (role and separators)
REPLY_PRIMING = 3  # tokens the API adds to prime the reply
OVERHEAD = 2 * MESSAGE_OVERHEAD + REPLY_PRIMING  # a prompt's two messages and the reply's priming


# Every turn counts the tokens of each node of its story's window (50-500 of them), the same nodes as
# the turn before but two: counted once a process (measured: 200 nodes of 40-90 words, 5.5 ms encoded,
# 0.24 ms looked up). Keyed by the text's hash, its length checked; cleared whole past COUNTED_MAX.
COUNTED_MAX = 100_000
_counted: dict[tuple[str, int], tuple[int, int]] = {}


SEP = "\n\n"  # between the story's nodes and the prompt's parts


class Counter:
    """Tokens of text with the model's encoding, and text cut to a number of them."""

    def __init__(self, model: str):
        self.encoding = tokens.encoding_for(model)

    def count(self, text: str) -> int:
        if not text:
            return 0
        key = (self.encoding.name, hash(text))
        found = _counted.get(key)
        if found is not None and found[0] == len(text):
            return found[1]
        n = len(self.encoding.encode(text, disallowed_special=()))
        if len(_counted) >= COUNTED_MAX:
            _counted.clear()
        _counted[key] = (len(text), n)
        return n

    def joined(self, pieces: list[str]) -> int:
        """The tokens of ``SEP.join(pieces)``, from each piece's count with its separator (kept: a
        turn's prompt is its story's nodes, the last turn's but two, and encoding the whole of it
        afresh twice a turn cost more than the rest of its counting). Exact: both encodings split
        text before BPE where a run of newlines ends, unless what follows is whitespace or "/"
        (a piece that starts so is counted in the whole text)."""
        if not pieces:
            return 0
        if any(not p or p[0].isspace() or p[0] == "/" for p in pieces[1:]):
            return self.count(SEP.join(pieces))
        return sum(self.count(p + SEP) for p in pieces[:-1]) + self.count(pieces[-1])

    def cap(self, text: str, limit: int, *, keep_end: bool = False) -> str:
        if self.count(text) <= limit:  # kept: every turn caps the same instructions, summary and note
            return text
        ids = self.encoding.encode(text, disallowed_special=())
        return self.encoding.decode(ids[-limit:] if keep_end else ids[:limit])


@dataclass
class Fixed:
    """The fixed parts (instructions, plot essentials, summary, in that order), the author's note's
    text, and the tokens they leave for the rest (``flexible``)."""

    parts: list[Part]
    note: str
    flexible: int
    knows_rule_first: bool  # the characters' rule stands with their parts, not in the instructions


@dataclass
class Turn:
    """The parts that change every turn (memories, what characters know, cards), and the tokens
    they leave for the story."""

    parts: list[Part] = field(default_factory=list)
    left: int = 0


def persona(adventure: Adventure) -> str:
    if not adventure.persona_name:
        return ""
    pronouns = f" ({adventure.persona_pronouns})" if adventure.persona_pronouns else ""
    desc = f": {adventure.persona_description.strip()}" if adventure.persona_description.strip() else ""
    return f'The protagonist ("you") is {adventure.persona_name}{pronouns}{desc}'


def fixed_parts(c: Counter, *, adventure: Adventure, knowledge: list[Knowing], summary: str, budget: int) -> Fixed:
    """Instructions, plot essentials and the summary, each capped at FIXED_PART_SHARE of the budget."""
    older = adventure.memories_before_story
    per_fixed = int(budget * FIXED_PART_SHARE)
    parts: list[Part] = []
    knowing = any(k.items for k in knowledge)
    instructions = adventure.ai_instructions.strip() or DEFAULT_INSTRUCTIONS
    # the rule stands with the characters' parts in the prefix-cache layout: instructions that change
    # as characters come and go would change the prompt's very start
    if knowing and older:
        instructions += "\n" + KNOWS_RULE
    instructions = c.cap(instructions, per_fixed)
    parts.append(
        Part(
            "instructions",
            instructions,
            c.count(instructions),
            "the adventure's AI instructions" if adventure.ai_instructions.strip() else "default instructions",
        )
    )
    plot = "\n".join(x for x in (persona(adventure), adventure.plot_essentials.strip()) if x)
    if plot:
        plot = c.cap("[Plot essentials]\n" + plot, per_fixed)
        parts.append(Part("plot_essentials", plot, c.count(plot), "always included: protagonist and plot essentials"))
    if summary.strip():
        summary = c.cap("[Story so far]\n" + summary.strip(), per_fixed, keep_end=True)
        why = "always included: the running story summary"
        if not older and summary != "[Story so far]\n" + adventure.story_summary.strip():
            why += " of the story before the window (it changes when the window moves on)"
        parts.append(Part("summary", summary, c.count(summary), why))
    note = ""
    if adventure.authors_note.strip():
        note = c.cap(f"[Author's note: {adventure.authors_note.strip()}]", per_fixed)
    fixed = sum(p.tokens for p in parts) + c.count(note) + OVERHEAD + 4  # + section separators
    return Fixed(parts, note, max(budget - fixed, 0), knowing and not older)


def memory_lines(c: Counter, header: str, recalled: list[MemoryItem], cap: int, **extra) -> tuple[str, list[dict]]:
    """``header`` and the memories that fit under ``cap`` tokens, one line each, in order."""
    lines, items = [], []
    used = c.count(header + "\n")
    for memory in recalled:
        line = f"- {memory.text.strip()}"
        cost = c.count(line + "\n")
        if used + cost > cap:
            continue
        lines.append(line)
        used += cost
        items.append(
            {
                "id": memory.id,
                "similarity": memory.similarity,
                "pinned": memory.pinned,
                "tokens": cost,
                "source_start": memory.source_start,  # the story depths it tells of (None: hand-written)
                "source_end": memory.source_end,
                **extra,
            }
        )
    return (header + "\n" + "\n".join(lines) if lines else ""), items


def turn_parts(
    c: Counter,
    fixed: Fixed,
    *,
    memories: list[MemoryItem],
    knowledge: list[Knowing],
    cards: list[StoryCard],
    recent_text: str,
    newest: int = 0,
) -> Turn:
    """The memories recalled, what each character named knows (at most KNOWS_SHARE each) and the
    cards the recent story triggers (at most CARD_SHARE), out of what the fixed parts leave."""
    turn = Turn(left=fixed.flexible)
    if memories:
        text, items = memory_lines(c, "[Memories]", memories, turn.left)
        if text:
            turn.parts.append(
                Part("memories", text, c.count(text), f"{len(items)} memories recalled for this moment", items)
            )
            turn.left -= c.count(text)
    rule_first = fixed.knows_rule_first
    for knows in knowledge:
        header = f"[What {knows.name} knows]"
        if rule_first:
            header = KNOWS_RULE + "\n" + header
        cap = min(int(fixed.flexible * KNOWS_SHARE), turn.left)
        text, items = memory_lines(c, header, knows.items, cap, character=knows.card_id)
        if text:
            rule_first = False
            why = (
                f"What {knows.name} knows: {len(items)} of their memories (the scenes they were in); "
                f"{knows.name} is named in the recent story"
            )
            turn.parts.append(Part("knows", text, c.count(text), why, items))
            turn.left -= c.count(text)
    cap = min(int(fixed.flexible * CARD_SHARE), turn.left)
    for card_part in _cards(c, cards=cards, recent_text=recent_text, cap=cap, turn=newest):
        turn.parts.append(card_part)
        turn.left -= card_part.tokens
    return turn


CARD_PARTS = {  # a triggered card's position: the part it is told in
    "world_info": "cards",
    "before_story": "cards_before",
    "at_depth": "cards_at_depth",
}


def _cards(c: Counter, *, cards: list[StoryCard], recent_text: str, cap: int, turn: int) -> list[Part]:
    """The story cards the recent story triggers (stories.prompt.triggers), as many as fit under
    ``cap`` together, each in the part of its position: with the world info after the story, before
    the story, or inside it ``depth`` actions from the newest (items say the depth)."""
    pulled = triggered(cards=cards, text=recent_text, turn=turn)
    lines: dict[str, list[tuple[int, str]]] = {name: [] for name in CARD_PARTS.values()}
    items: dict[str, list[dict]] = {name: [] for name in CARD_PARTS.values()}
    used = c.count("[World info]\n")
    for hit in pulled:
        card = hit.card
        part = CARD_PARTS.get(card.position, "cards")
        line = f"{card.name}: {card.entry.strip()}"
        if card.type == "character" and card.examples.strip():
            line += f"\nHow {card.name} speaks (examples):\n{card.examples.strip()}"
        cost = c.count(line + "\n")
        included = used + cost <= cap
        item = {"id": card.pk, "name": card.name, "key": hit.key, "included": included, "tokens": cost}
        if hit.via:
            item["via"] = hit.via
        if part == "cards_at_depth":
            item["depth"] = card.depth
        items[part].append(item)
        if included:
            lines[part].append((card.depth, line))
            used += cost
    out = []
    for name, kept in lines.items():
        if not kept:  # none triggered here, or none fit: Insights says which and why
            continue
        if name == "cards_at_depth":
            groups: dict[int, list[str]] = {}
            for depth, line in kept:
                groups.setdefault(depth, []).append(line)
            for item in items[name]:
                item["text"] = "[World info]\n" + "\n".join(groups.get(item["depth"], []))
            text = "\n".join(line for _, line in kept)
        else:
            text = "[World info]\n" + "\n".join(line for _, line in kept)
        told = [i for i in items[name] if i["included"]]
        where = {"cards": "after the story", "cards_before": "before the story", "cards_at_depth": "inside the story"}
        reason = f"story cards triggered, told {where[name]}: " + ", ".join(
            f'{i["name"]} ("{i["key"]}"'
            + (f", named in {i['via']}'s entry" if i.get("via") else "")
            + (f", {i['depth']} actions from the newest" if name == "cards_at_depth" else "")
            + ")"
            for i in told
        )
        out.append(Part(name, text, c.count(text), reason, items[name]))
    return out
