"""What the prompt builder is handed and what it answers: the recalled memories, what each character
knows, the summaries of the story before the window (all read by the use case, handed over as
data), and the prompt part by part with what each costs and why it is there (Insights shows it)."""

from __future__ import annotations

from dataclasses import dataclass, field


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
    untold: list[dict] = field(default_factory=list)  # Insights: the parts not told this turn, and why

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
            "untold": self.untold,
        }


@dataclass(frozen=True)
class SummaryFrame:
    """The summaries the path holds around the story handed to the builder, read by the use case
    (memory.story.summaries.summary_frame): ``current`` (the path's summary), ``base`` (what a
    rewrite starts from: the player's text), and the snapshots ``(depth, player, text)``, newest
    last, from the newest one below the story handed over to the path's tip."""

    current: str
    base: str = ""
    snapshots: tuple[tuple[int, bool, str], ...] = ()

    def before(self, depth: int) -> str:
        """The summary for a window starting at ``depth``: the newest snapshot below it (it tells
        what the window does not show, and stays the same until the window moves on, so a model
        server's prefix cache keeps serving the prompt's start). ``current`` when the player's own
        text hangs in the window or is the newest, when the path has no snapshot, and when none lies
        below a window that does not start at the opening."""
        if not self.snapshots:
            return self.current
        inside = [s for s in self.snapshots if s[0] >= depth]
        below = [s for s in self.snapshots if s[0] < depth]
        if any(player for _, player, _ in inside) or self.snapshots[-1][1]:
            return self.current
        if below:
            return below[-1][2]
        # none below yet (a long import's pass writes its first at the tip): the story before the
        # window is told by the base, else by the current summary, overlapping the window, until one is
        return self.base or (self.current if depth > 1 else "")
