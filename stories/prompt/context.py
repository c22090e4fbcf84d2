"""Build the prompt from its parts under a token budget, and say what each part
costs and why it is there (the same object powers Insights).

Order (what changes rarely first, so that a model server's prefix cache serves most
of each prompt): AI instructions, plot essentials (with the protagonist), story
summary; then the recent story, whose window starts at an action of a fixed grid
(every ``story_step(context)`` actions) and keeps that start for as long as the story from there
fits, then jumps; then what changes every turn, next to the newest action: the
memories recalled for this moment, what each character named in the recent story
knows, triggered story cards (at most 40% of the flexible budget), the author's note.

An adventure with ``memories_before_story`` keeps the older order: instructions, plot
essentials, summary, memories, what characters know, cards in the system message,
then the recent story (newest kept, oldest dropped one action at a time) with the
author's note a few actions from the end.

Budgets are the same either way: the fixed parts are capped first, then memories,
what characters know and cards take their share, and the story gets the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from stories.models import Action, Adventure, StoryCard
from stories.prompt import tokens
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
AUTHORS_NOTE_OFFSET = 3  # actions from the end where the author's note is placed
CARD_SHARE = 0.4  # of the flexible budget, at most, for story cards
FIXED_PART_SHARE = 0.15  # of the budget, at most, for each of instructions / plot essentials / summary / note
CARD_SCAN_ACTIONS = 6  # newest actions whose text can trigger a card
STEP_TOKENS = 192  # of context per action of the grid the story window's start moves on (prefix-cache layout)
MESSAGE_OVERHEAD = 4  # tokens per chat message (role and separators)
REPLY_PRIMING = 3  # tokens the API adds to prime the reply


SYSTEM_FIXED = ("instructions", "plot_essentials", "summary")
TURN_PARTS = ("memories", "knows", "cards", "authors_note")  # after the story, in this order
SYSTEM_BEFORE = (*SYSTEM_FIXED, "memories", "knows", "cards")  # the older order's system message


@dataclass(frozen=True)
class MemoryItem:
    """A recalled memory, as the memory engine hands it to the builder."""

    id: int
    text: str
    similarity: float | None
    pinned: bool = False
    source_start: int | None = None  # the story depths the memory tells of (None: hand-written)
    source_end: int | None = None


@dataclass(frozen=True)
class Knowing:
    """What one character of the cast remembers, ranked for this moment."""

    card_id: int
    name: str
    items: list[MemoryItem]


@dataclass
class Part:
    name: str
    text: str
    tokens: int
    reason: str
    items: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"name": self.name, "tokens": self.tokens, "reason": self.reason, "items": self.items, "text": self.text}


@dataclass
class Context:
    messages: list[dict]
    parts: list[Part]
    total_tokens: int
    budget: int
    encoding: str
    recall_note: str = ""  # why recall fell back to pinned memories only; empty when it ranked as usual
    prefix_reused: float | None = None  # share of the last prompt sent that this one starts with
    last_cached_tokens: int | None = None  # Insights: the prompt tokens the last turn's endpoint had cached

    @property
    def memory_ids(self) -> set[int]:
        """The adventure's own memories the prompt holds."""
        return {item["id"] for p in self.parts if p.name == "memories" for item in p.items}

    @property
    def knowledge_ids(self) -> set[int]:
        """The characters' memories the prompt holds."""
        return {item["id"] for p in self.parts if p.name == "knows" for item in p.items}

    def as_dict(self) -> dict:
        return {
            "budget": self.budget,
            "total_tokens": self.total_tokens,
            "encoding": self.encoding,
            "recall_note": self.recall_note,
            "prefix_reused": self.prefix_reused,
            "last_cached_tokens": self.last_cached_tokens,
            "parts": [p.as_dict() for p in self.parts],
        }


def render_action(action: Action) -> str:
    text = action.text.strip()
    if action.kind == Action.Kind.DO:
        return "> " + (text if text.lower().startswith("you ") else f"You {text}")
    if action.kind == Action.Kind.SAY:
        return f'> You say "{text.strip(chr(34))}"'
    return text


def _persona(adventure: Adventure) -> str:
    if not adventure.persona_name:
        return ""
    pronouns = f" ({adventure.persona_pronouns})" if adventure.persona_pronouns else ""
    desc = f": {adventure.persona_description.strip()}" if adventure.persona_description.strip() else ""
    return f'The protagonist ("you") is {adventure.persona_name}{pronouns}{desc}'


def build(
    *,
    adventure: Adventure,
    story: list[Action],
    cards: list[StoryCard],
    memories: list[MemoryItem],
    context_tokens: int,
    model: str,
    recall_note: str = "",
    knowledge: list[Knowing] | None = None,
    summary_before: Callable[[int], str] | None = None,
) -> Context:
    """The prompt for the next model reply after ``story`` (oldest first).

    ``summary_before(depth)``: in the prefix-cache layout, the summary of the story before a
    window starting at ``depth`` (memory.story.summaries.summary_before), so the summary changes
    when the window jumps rather than whenever the pass rewrites it; the adventure's current
    summary otherwise.

    A memory of a block whose actions are all in the prompt's story part, word
    for word, is left out (pins are always sent): the same events are not paid
    twice. Leaving memories out only frees room, so the story part can only
    grow, and one more layout settles it."""
    knowledge = knowledge or []
    summary = adventure.story_summary

    def laid_out(recalled: list[MemoryItem]) -> Context:
        """The layout with ``recalled``; in the prefix-cache layout with the summary of what its
        window does not show (the summary's length moves the window: again until they agree)."""
        nonlocal summary
        for _ in range(4):
            ctx = _layout(
                adventure=adventure,
                story=story,
                cards=cards,
                memories=recalled,
                context_tokens=context_tokens,
                model=model,
                recall_note=recall_note,
                knowledge=knowledge,
                summary=summary,
            )
            shown = _story_depths(ctx)
            if shown is None or summary_before is None or adventure.memories_before_story:
                break
            before = summary_before(shown[0])
            if before == summary:
                break
            summary = before
        return ctx

    ctx = laid_out(memories)
    shown = _story_depths(ctx)
    if shown is None:
        return ctx
    covered = [
        m
        for m in memories
        if not m.pinned and m.source_start is not None and shown[0] <= m.source_start and m.source_end <= shown[1]
    ]
    if not covered:
        return ctx
    ctx = laid_out([m for m in memories if m not in covered])
    for part in ctx.parts:
        if part.name == "story":
            part.reason += f"; {len(covered)} recalled memories left out: their events are here word for word"
    return ctx


def _story_depths(ctx: Context) -> tuple[int, int] | None:
    for part in ctx.parts:
        if part.name == "story" and part.items and part.items[0]["first_depth"] is not None:
            return part.items[0]["first_depth"], part.items[0]["last_depth"]
    return None


def _layout(
    *,
    adventure: Adventure,
    story: list[Action],
    cards: list[StoryCard],
    memories: list[MemoryItem],
    context_tokens: int,
    model: str,
    recall_note: str = "",
    knowledge: list[Knowing] = (),
    summary: str = "",
) -> Context:
    enc = tokens.encoding_for(model)

    def count(text: str) -> int:
        return len(enc.encode(text, disallowed_special=())) if text else 0

    def cap(text: str, limit: int, *, keep_end: bool = False) -> str:
        ids = enc.encode(text, disallowed_special=())
        if len(ids) <= limit:
            return text
        return enc.decode(ids[-limit:] if keep_end else ids[:limit])

    budget = max(context_tokens, 256)
    per_fixed = int(budget * FIXED_PART_SHARE)
    parts: list[Part] = []

    instructions = adventure.ai_instructions.strip() or DEFAULT_INSTRUCTIONS
    # the rule stands with the characters' parts in the prefix-cache layout: instructions that change
    # as characters come and go would change the prompt's very start
    rule_first = any(k.items for k in knowledge) and not adventure.memories_before_story
    if any(k.items for k in knowledge) and adventure.memories_before_story:
        instructions += "\n" + KNOWS_RULE
    instructions = cap(instructions, per_fixed)
    parts.append(
        Part(
            "instructions",
            instructions,
            count(instructions),
            "the adventure's AI instructions" if adventure.ai_instructions.strip() else "default instructions",
        )
    )
    plot = "\n".join(x for x in (_persona(adventure), adventure.plot_essentials.strip()) if x)
    if plot:
        plot = cap("[Plot essentials]\n" + plot, per_fixed)
        parts.append(Part("plot_essentials", plot, count(plot), "always included: protagonist and plot essentials"))
    if summary.strip():
        summary = cap("[Story so far]\n" + summary.strip(), per_fixed, keep_end=True)
        why = "always included: the running story summary"
        if not adventure.memories_before_story and summary != "[Story so far]\n" + adventure.story_summary.strip():
            why += " of the story before the window (it changes when the window moves on)"
        parts.append(Part("summary", summary, count(summary), why))
    note = ""
    if adventure.authors_note.strip():
        note = cap(f"[Author's note: {adventure.authors_note.strip()}]", per_fixed)

    fixed_parts = len(parts)
    overhead = 2 * MESSAGE_OVERHEAD + REPLY_PRIMING
    fixed = sum(p.tokens for p in parts) + count(note) + overhead + 4  # + section separators
    flexible = max(budget - fixed, 0)
    left = flexible

    def memory_lines(header: str, recalled: list[MemoryItem], cap: int, **extra) -> tuple[str, list[dict]]:
        """``header`` and the memories that fit under ``cap`` tokens, one line each, in order."""
        lines, items = [], []
        used = count(header + "\n")
        for memory in recalled:
            line = f"- {memory.text.strip()}"
            cost = count(line + "\n")
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

    if memories:
        text, items = memory_lines("[Memories]", memories, left)
        if text:
            parts.append(Part("memories", text, count(text), f"{len(items)} memories recalled for this moment", items))
            left -= count(text)

    for knows in knowledge:
        header = f"[What {knows.name} knows]"
        if rule_first:
            header = KNOWS_RULE + "\n" + header
        text, items = memory_lines(header, knows.items, min(int(flexible * KNOWS_SHARE), left), character=knows.card_id)
        if text:
            rule_first = False
            parts.append(
                Part(
                    "knows",
                    text,
                    count(text),
                    f"What {knows.name} knows: {len(items)} of their memories (the scenes they were in); "
                    f"{knows.name} is named in the recent story",
                    items,
                )
            )
            left -= count(text)

    recent_text = "\n".join(a.text for a in story[-CARD_SCAN_ACTIONS:])
    pulled = triggered(cards=cards, text=recent_text)
    if pulled:
        card_cap = min(int(flexible * CARD_SHARE), left)
        lines, items = [], []
        used = count("[World info]\n")
        for hit in pulled:
            line = f"{hit.card.name}: {hit.card.entry.strip()}"
            cost = count(line + "\n")
            if used + cost > card_cap:
                items.append(
                    {"id": hit.card.pk, "name": hit.card.name, "key": hit.key, "included": False, "tokens": cost}
                )
                continue
            lines.append(line)
            used += cost
            items.append({"id": hit.card.pk, "name": hit.card.name, "key": hit.key, "included": True, "tokens": cost})
        if lines:
            text = "[World info]\n" + "\n".join(lines)
            reason = "story cards whose keys appear in the recent story: " + ", ".join(
                f'{i["name"]} ("{i["key"]}")' for i in items if i["included"]
            )
            parts.append(Part("cards", text, count(text), reason, items))
            left -= count(text)

    before = adventure.memories_before_story
    costs = [count(render_action(a) + "\n\n") for a in story]
    kept = _window(story, costs, left, step=0 if before else story_step(budget))
    rendered = [render_action(a) for a in kept]
    dropped = len(story) - len(kept)
    if note and before:
        at = max(len(rendered) - AUTHORS_NOTE_OFFSET, 0)
        rendered.insert(at, note)
    story_text = "\n\n".join(x for x in rendered if x != note)
    story_reason = f"the newest {len(kept)} actions" + (f"; {dropped} older ones did not fit" if dropped else "")
    if not before and kept and dropped:
        story_reason += f" (the window starts on a step of {story_step(budget)} actions, so the prompt's start holds)"
    story_part = len(parts)
    parts.append(
        Part(
            "story",
            story_text,
            count(story_text),
            story_reason,
            [
                {
                    "first_depth": kept[0].depth if kept else None,
                    "last_depth": kept[-1].depth if kept else None,
                    "dropped": dropped,
                }
            ],
        )
    )
    if note:
        where = f"placed {min(AUTHORS_NOTE_OFFSET, len(kept))} actions from the end" if before else "after the story"
        parts.append(Part("authors_note", note, count(note), f"the author's note, {where}"))

    if before:
        system = "\n\n".join(p.text for p in parts if p.name in SYSTEM_BEFORE)
        user = "\n\n".join(rendered) if rendered else "(The story begins.)"
    else:  # the story right after the rarely changing parts, what changes every turn after it
        parts.insert(fixed_parts, parts.pop(story_part))
        system = "\n\n".join(p.text for p in parts if p.name in SYSTEM_FIXED)
        user = "\n\n".join(rendered) if rendered else "(The story begins.)"
        user += "".join("\n\n" + p.text for p in parts if p.name in TURN_PARTS)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    total = count(system) + count(user) + overhead
    return Context(
        messages=messages, parts=parts, total_tokens=total, budget=budget, encoding=enc.name, recall_note=recall_note
    )


def story_step(context_tokens: int) -> int:
    """Actions of the grid the story window's start moves on: one per STEP_TOKENS of context (11 at
    2k, 43 at 8k). The start holds for half a step's worth of turns, then jumps a step; the window
    is on average half a step short of full (bench/prompt_cache.py weighs one against the other)."""
    return max(4, round(context_tokens / STEP_TOKENS))


def _window(story: list[Action], costs: list[int], left: int, *, step: int) -> list[Action]:
    """The recent story that fits in ``left`` tokens. No ``step``: the newest actions, one dropped
    at a time. A ``step``: from the earliest action on the grid of depths 1, 1 + step, 1 + 2 step,
    ... from which the story to the newest action fits, so the start stays put turn after turn and
    then jumps a step; when not even the newest step fits, the newest actions."""
    if step:
        total = sum(costs)
        for i, action in enumerate(story):
            if total <= left and (action.depth - 1) % step == 0:
                return story[i:]
            total -= costs[i]
    kept, used = [], 0
    for action, cost in zip(reversed(story), reversed(costs)):
        if used + cost > left:
            break
        kept.append(action)
        used += cost
    return kept[::-1]
