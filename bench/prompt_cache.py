"""How much of each turn's prompt a model server's prefix cache has already seen (issue 32).

A long story (cards that trigger, a cast of characters, a memory bank the post-turn pass grows
and a running summary) is played into the database; at every turn the prompt the turn would send
is built exactly as a turn builds it (the turn's own recall, then stories.prompt.builder.build) for each
layout (the prefix-cache layout and the older "memories before the story" one) and context size
(2k, 8k, 32k tokens). Each prompt is tokenized as the model server sees it (system, then user);
the share of the previous turn's prompt that the new one starts with is what a prefix cache
serves. Printed per layout and size: the mean and the worst share (all turns, and outside the
window's jumps), tokens spared per turn, and the time to first token saved under a cost model
(prefill at PREFILL_MS_PER_TOKEN); a plot over the turns and a final JSON line.

    .venv/bin/python bench/prompt_cache.py [--turns 300] [--smoke]

STEP_TOKENS=N tries another grid for the story window (stories.prompt.layouts.STEP_TOKENS); EXPLAIN=1
prints where a prompt parted from the last one on each turn that reused less than half of it
without a jump of the window.
"""

from __future__ import annotations

import argparse
import json
import os
import random

from _setup import ROOT, django_setup, print_table, save

SIZES = (2048, 8192, 32768)
PREFILL_MS_PER_TOKEN = 0.25  # an 8B model's prefill on one GPU, about 4,000 tokens a second
NAMES = ("Maren", "Tobias", "Oskar")
PLACES = ("the lighthouse", "the harbor", "the chapel", "the market", "the old mill")
VERBS = ("studies", "points at", "hides", "finds", "mends", "carries", "opens", "burns", "counts", "buries")
THINGS = ("the map", "a brass key", "the ledger", "a lantern", "the letters", "a knife", "the nets", "a coin")
ACTS = ("look around", "follow the path", "ask about the ship", "open the door", "wait", "search the room")


def reply(rng: random.Random, turn: int) -> str:
    """A narrator's passage: three to five sentences naming the cast, places and things."""
    out = []
    for _ in range(rng.randint(3, 5)):
        who, what, where = rng.choice(NAMES), rng.choice(THINGS), rng.choice(PLACES)
        out.append(
            f"{who} {rng.choice(VERBS)} {what} near {where} while the wind rises over the roofs for the {turn}th time."
        )
    return " ".join(out)


def shared_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--smoke", action="store_true", help="a short story: the test suite runs this")
    args = parser.parse_args()
    turns = 30 if args.smoke else args.turns
    django_setup()

    from django.contrib.auth import get_user_model
    from tqdm import tqdm

    from memory.story import memory_pass, retrieval, summaries
    from stories.adventures import story_create
    from stories.models import Adventure, Branch, StoryCard
    from stories.prompt import builder, layouts, tokens
    from stories.tree import lineage, writes

    user, _ = get_user_model().objects.get_or_create(username="bench-prompt-cache")
    Adventure.objects.filter(owner=user).delete()
    adventure = story_create(
        owner_id=user.pk,
        title="The harbor of Vell",
        persona_name="Ilse",
        opening="The harbor of Vell lies under fog. Maren waits on the pier with a lantern.",
    )
    Adventure.objects.filter(pk=adventure.pk).update(
        plot_essentials="Ilse searches for her brother, lost at sea a year ago. The harbor master lies.",
        authors_note="Keep the tone quiet and eerie.",
    )
    adventure.refresh_from_db()
    for name in NAMES:
        StoryCard.objects.create(adventure=adventure, type="character", name=name, entry=f"{name} of Vell.")
    for place in PLACES[:3]:
        StoryCard.objects.create(
            adventure=adventure, type="location", name=place.title(), keys=[place.split()[-1]], entry=f"{place}: old."
        )
    if os.environ.get("STEP_TOKENS"):  # to try another grid
        layouts.STEP_TOKENS = int(os.environ["STEP_TOKENS"])
    rng = random.Random(7)
    enc = tokens.encoding_for("fake-model")
    previous: dict[tuple[bool, int], tuple[list[int], int | None, bool]] = {}
    # per (older order?, context): (turn, share reused, the window moved, the window full, tokens before)
    seen: dict[tuple[bool, int], list[tuple[int, float, bool, bool, int]]] = {}
    turn_parts: dict[tuple[bool, int], list[float]] = {}  # share of the prompt that changes every turn
    for turn in tqdm(range(1, turns + 1), desc="turns", unit="turn"):
        head = Branch.objects.get(pk=adventure.head_branch_id)
        writes.place(adventure_id=adventure.pk, branch_id=head.pk, kind="do", text=rng.choice(ACTS), ask_pass=False)
        head.refresh_from_db()
        cards = list(adventure.cards.all())
        for size in SIZES:
            story = lineage.recent(head, count=min(500, max(50, size // 40)))  # as a turn hands it over
            recalled = retrieval.recall_for_turn(
                adventure=adventure, branch=head, user_id=user.pk, top_k=5, story=story, record_use=False, cards=cards
            )
            for before in (False, True):
                adventure.memories_before_story = before
                ctx = builder.build(
                    adventure=adventure,
                    story=story,
                    cards=cards,
                    memories=recalled.items,
                    context_tokens=size,
                    model="fake-model",
                    knowledge=recalled.knowledge,
                    summaries=summaries.summary_frame(head, story[0].depth, current=adventure.story_summary)
                    if story and not adventure.memories_before_story
                    else None,
                )
                # the prompt as the server tokenizes it: each message, then the next (-1: a separator)
                ids = [t for m in ctx.messages for t in [-1, *enc.encode(m["content"], disallowed_special=())]]
                key = (before, size)
                window = next(p for p in ctx.parts if p.name == "story").items[0]
                full = window["dropped"] > 0
                moving = sum(p.tokens for p in ctx.parts if p.name in layouts.TURN_PARTS)
                turn_parts.setdefault(key, []).append(moving / max(ctx.total_tokens, 1))
                if key in previous:
                    prev, prev_first, prev_full = previous[key]
                    at = shared_prefix(prev, ids)
                    moved = window["first_depth"] != prev_first
                    seen.setdefault(key, []).append((turn, at / len(prev), moved, full and prev_full, len(prev)))
                    if os.environ.get("EXPLAIN") and at / len(prev) < 0.5 and not moved:
                        print(
                            size,
                            before,
                            turn,
                            window["first_depth"],
                            prev_first,
                            repr(enc.decode([t for t in prev[at : at + 20] if t >= 0])),
                            "NEW",
                            repr(enc.decode([t for t in ids[at : at + 30] if t >= 0])),
                        )
                previous[key] = (ids, window["first_depth"], full)
        writes.place(adventure_id=adventure.pk, branch_id=head.pk, kind="story", text=reply(rng, turn), ask_pass=False)
        if turn % 3 == 0:  # the post-turn pass, as the workers run it (memories, characters, summary)
            while memory_pass.run(adventure.pk).more_due:
                pass
            adventure.refresh_from_db()

    def mean(values):
        return round(sum(values) / len(values), 3) if values else None

    rows = []
    for (before, size), values in sorted(seen.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        full = [v for v in values if v[3]]
        growing = [v for v in values if not v[3]]
        spared = [share * n for _, share, _, _, n in values]
        rows.append(
            {
                "layout": "memories before story" if before else "prefix cache",
                "context": size,
                "turns_full": len(full),
                "mean_full": mean([v[1] for v in full]),
                "worst_full_outside_jumps": min((v[1] for v in full if not v[2]), default=None),
                "jumps_full": sum(1 for v in full if v[2]),
                "mean_full_outside_jumps": mean([v[1] for v in full if not v[2]]),
                "prompt_tokens_full": round(sum(v[4] for v in full) / len(full)) if full else None,
                "mean_growing": mean([v[1] for v in growing]),
                "worst_growing": min((v[1] for v in growing), default=None),
                "turn_parts_share": mean(turn_parts[(before, size)]),
                "tokens_spared_per_turn": round(sum(spared) / len(spared)),
                "ttft_saved_ms": round(sum(spared) / len(spared) * PREFILL_MS_PER_TOKEN),
            }
        )
        if rows[-1]["worst_full_outside_jumps"] is not None:
            rows[-1]["worst_full_outside_jumps"] = round(rows[-1]["worst_full_outside_jumps"], 3)
        if rows[-1]["worst_growing"] is not None:
            rows[-1]["worst_growing"] = round(rows[-1]["worst_growing"], 3)
    print_table(
        f"Share of the previous prompt each prompt starts with, over {turns} turns ("
        "full: the story window is full, as after a long story; growing: before that; "
        "turn parts: memories, characters, cards and note, the share of a prompt that changes every turn)",
        list(rows[0]),
        [list(r.values()) for r in rows],
    )

    def plot(path):
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(SIZES), figsize=(5.5 * len(SIZES), 3.8), sharey=True)
        for ax, size in zip(axes, SIZES):
            for before in (False, True):
                values = seen.get((before, size), [])
                ax.plot(
                    [v[0] for v in values], [v[1] for v in values], label=("older order" if before else "prefix cache")
                )
            ax.set_title(f"{size} tokens of context")
            ax.set_xlabel("turn")
            ax.set_ylim(0, 1.02)
        axes[0].set_ylabel("share of the previous prompt reused")
        axes[0].legend()
        fig.tight_layout()
        fig.savefig(path, dpi=110)

    save("prompt_cache", rows, plot)
    print(f"plot: {(ROOT / 'bench' / 'results' / 'prompt_cache.png').relative_to(ROOT)}")
    print(json.dumps({"bench": "prompt_cache", "turns": turns, "rows": rows}))


if __name__ == "__main__":
    main()
