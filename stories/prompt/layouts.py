"""The two layouts of a prompt, placing the same parts (stories.prompt.parts) around the story window.

The prefix-cache layout (the default): what changes rarely first, so that a model server's prefix
cache serves most of each prompt. AI instructions, plot essentials (with the protagonist), story
summary; then the recent story, whose window starts at an action of a fixed grid (every
``story_step(context)`` actions) and keeps that start for as long as the story from there fits,
then jumps; then what changes every turn, next to the newest action: the memories recalled for
this moment, what each character named in the recent story knows, triggered story cards, the
author's note.

The older order (an adventure's ``memories_before_story``): instructions, plot essentials,
summary, memories, what characters know and cards in the system message, then the recent story
(newest kept, oldest dropped one action at a time) with the author's note a few actions from the
end.
"""

from __future__ import annotations

from collections.abc import Callable

from stories.models import Action
from stories.prompt.context import Context, Part
from stories.prompt.parts import OVERHEAD, SEP, Counter, Fixed, Turn
from stories.prompt.voice import told

AUTHORS_NOTE_OFFSET = 3  # actions from the end where the author's note is placed (the older order)
STEP_TOKENS = 192  # of context per action of the grid the story window's start moves on (prefix-cache layout)
SYSTEM_FIXED = ("instructions", "plot_essentials", "summary", "cards_before")
TURN_PARTS = ("memories", "knows", "cards", "authors_note")  # after the story, in this order
SYSTEM_BEFORE = (*SYSTEM_FIXED, "memories", "knows", "cards")  # the older order's system message


def story_step(context_tokens: int) -> int:
    """Actions of the grid the story window's start moves on: one per STEP_TOKENS of context (11 at
    2k, 43 at 8k). The start holds for half a step's worth of turns, then jumps a step; the window
    is on average half a step short of full (bench/prompt_cache.py weighs one against the other)."""
    return max(4, round(context_tokens / STEP_TOKENS))


def _window(story: list[Action], cost: Callable[[Action], int], left: int, *, step: int) -> list[Action]:
    """The recent story that fits in ``left`` tokens. No ``step``: the newest actions, one dropped
    at a time. A ``step``: from the earliest action on the grid of depths 1, 1 + step, 1 + 2 step,
    ... from which the story to the newest action fits, so the start stays put turn after turn and
    then jumps a step; when not even the newest step fits, the newest actions. ``cost`` (an action's
    tokens) is asked from the newest back only as far as the story fits: a turn reads ~100 actions
    and ~40 fit (telling and counting the rest was ~1.5% of a web process)."""
    used, fit, grid = 0, len(story), None
    for i in range(len(story) - 1, -1, -1):
        spent = cost(story[i])
        if used + spent > left:
            break
        used, fit = used + spent, i
        if step and (story[i].depth - 1) % step == 0:
            grid = i
    return story[grid if grid is not None else fit :]


def _story_part(c: Counter, story: list[Action], kept: list[Action], *, step: int) -> Part:
    dropped = len(story) - len(kept)
    rendered = [told(a) for a in kept]
    text = SEP.join(rendered)
    reason = f"the newest {len(kept)} actions" + (f"; {dropped} older ones did not fit" if dropped else "")
    if step and kept and dropped:
        reason += f" (the window starts on a step of {step} actions, so the prompt's start holds)"
    window = {"first_depth": kept[0].depth if kept else None, "last_depth": kept[-1].depth if kept else None}
    return Part("story", text, c.joined(rendered), reason, [{**window, "dropped": dropped}])


def _with_depth_cards(rendered: list[str], parts: list[Part]) -> list[str]:
    """The story's rendered actions with the cards told inside it, each group ``depth`` actions from
    the newest (at the top when the window is shorter)."""
    groups = {}
    for part in parts:
        if part.name == "cards_at_depth":
            for item in part.items:
                if item["included"]:
                    groups[item["depth"]] = item["text"]
    if not groups:
        return rendered
    out = list(rendered)
    for depth in sorted(groups):  # the nearest first: each insert leaves the deeper ones' places
        out.insert(max(len(rendered) - depth, 0), groups[depth])
    return out


def _context(c: Counter, parts: list[Part], system: str, user: list[str], *, budget: int, recall_note: str) -> Context:
    """The messages: ``system``, and the user's from its pieces (its tokens counted from theirs)."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": SEP.join(user)}]
    total = c.count(system) + c.joined(user) + OVERHEAD
    return Context(
        messages=messages,
        parts=parts,
        total_tokens=total,
        budget=budget,
        encoding=c.encoding.name,
        recall_note=recall_note,
    )


def prefix_cache(
    c: Counter, fixed: Fixed, turn: Turn, story: list[Action], *, budget: int, recall_note: str
) -> Context:
    """Instructions, plot essentials, summary; the story window on its grid; then memories, what
    characters know, cards and the author's note after the newest action."""
    step = story_step(budget)
    kept = _window(story, lambda a: c.count(told(a) + "\n\n"), turn.left, step=step)
    parts = [*fixed.parts, _story_part(c, story, kept, step=step), *turn.parts]
    if fixed.note:
        parts.append(Part("authors_note", fixed.note, c.count(fixed.note), "the author's note, after the story"))
    system = "\n\n".join(p.text for p in parts if p.name in SYSTEM_FIXED)
    user = _with_depth_cards([told(a) for a in kept], parts) if kept else ["(The story begins.)"]
    user += [p.text for p in parts if p.name in TURN_PARTS]
    return _context(c, parts, system, user, budget=budget, recall_note=recall_note)


def older_order(c: Counter, fixed: Fixed, turn: Turn, story: list[Action], *, budget: int, recall_note: str) -> Context:
    """Instructions, plot essentials, summary, memories, what characters know and cards in the
    system message; the newest story that fits, with the author's note a few actions from its end."""
    kept = _window(story, lambda a: c.count(told(a) + "\n\n"), turn.left, step=0)
    parts = [*fixed.parts, *turn.parts, _story_part(c, story, kept, step=0)]
    rendered = _with_depth_cards([told(a) for a in kept], parts)
    if fixed.note:
        rendered.insert(max(len(rendered) - AUTHORS_NOTE_OFFSET, 0), fixed.note)
        where = f"placed {min(AUTHORS_NOTE_OFFSET, len(kept))} actions from the end"
        parts.append(Part("authors_note", fixed.note, c.count(fixed.note), f"the author's note, {where}"))
    system = "\n\n".join(p.text for p in parts if p.name in SYSTEM_BEFORE)
    return _context(c, parts, system, rendered or ["(The story begins.)"], budget=budget, recall_note=recall_note)
