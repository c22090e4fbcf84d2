"""Who knows what: the cast's memories against scripted stories (bench/cast_stories.json).

Every story is played into the database, the post-turn pass writes its memories, and for every
fact and cast member the bench asks the turn's own recall "ask <member> about <fact>": does the
member's "What <member> knows" part tell the fact? The answer is scored against whether the member
witnessed it (precision and recall of witnessed facts, and the share answered right). Three rows:
- presence: the sentences the scene reading gives each member (memory.story.presence.present), the ceiling
  of what any writer can keep;
- offline: the extractive writer (no model);
- model: the model writer through the fake model, which answers with the sentences of each
  member's part that name it (plumbing: the real prompt, JSON answer and parsing; not a model's
  quality);
- everyone: the baseline of a cast that knows everything (every question answered "knows").
Every set of the data file gets its rows ("dev" and "held-out": short scripted stories; "narrator":
stories written the way a language-model narrator writes), and the reading's cost per block.

    .venv/bin/python bench/cast.py

Ends with one line of JSON."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _setup import ROOT, django_setup, print_table, save

STORIES = Path(__file__).resolve().parent / "cast_stories.json"


def told(words: str, text: str) -> bool:
    """Whether ``text`` holds ``words`` as whole words, any case."""
    import re

    return re.search(r"(?<!\w)" + re.escape(words) + r"(?!\w)", text, re.IGNORECASE) is not None


def score(rows: list[tuple[bool, bool]]) -> dict:
    """Precision and recall of "knows" answers against the truth, and the share answered right."""
    tp = sum(1 for said, truth in rows if said and truth)
    fp = sum(1 for said, truth in rows if said and not truth)
    fn = sum(1 for said, truth in rows if not said and truth)
    right = sum(1 for said, truth in rows if said == truth)
    return {
        "questions": len(rows),
        "precision": round(tp / (tp + fp), 3) if tp + fp else 1.0,
        "recall": round(tp / (tp + fn), 3) if tp + fn else 1.0,
        "accuracy": round(right / len(rows), 3),
        "told_while_absent": fp,
        "not_told_though_there": fn,
    }


# The reading's knobs chosen by cross-validation: blocks read before a block (presence.LOOKBACK_BLOCKS)
# and members remembering one block (presence.CAST_MEMORIES_PER_BLOCK).
KNOBS = [(lookback, most) for lookback in (1, 2, 3) for most in (3, 4, 5)]


def reading_right(story, members, actions, presence, marks, lookback: int, most: int) -> tuple[int, int]:
    """Questions the scene reading answers right for ``story`` with these knobs, and questions asked."""
    default = presence.CAST_MEMORIES_PER_BLOCK
    presence.CAST_MEMORIES_PER_BLOCK = most
    seen: dict[str, list[str]] = {name: [] for name in members}
    try:
        for start in range(0, len(actions) - len(actions) % marks.MEMORY_INTERVAL, marks.MEMORY_INTERVAL):
            block = actions[start : start + marks.MEMORY_INTERVAL]
            before = actions[max(start - lookback * marks.MEMORY_INTERVAL, 0) : start]
            for w in presence.present(cast=list(members.values()), actions=block, before=before, name=story["persona"]):
                seen[w.member.name] += w.sentences
    finally:
        presence.CAST_MEMORIES_PER_BLOCK = default
    rows = [
        (any(told(word, " ".join(seen[name])) for word in fact["words"]), truth)
        for fact in story["facts"]
        for name, truth in fact["knows"].items()
    ]
    return sum(1 for said, truth in rows if said == truth), len(rows)


def cross_validated(grid: dict, part: str) -> tuple[float, dict]:
    """Leave one story out: the knobs that answer the other stories best (the defaults on a tie) read
    the one left out. The share answered right over ``part``'s stories, and how often each setting won."""
    default = (2, 4)
    right = asked = 0
    chosen: dict[tuple[int, int], int] = {}
    for key in [k for k in grid if part in ("all", k[0])]:
        others = [k for k in grid if k != key]

        def total(knobs):
            return sum(grid[k][knobs][0] for k in others)

        best = max(KNOBS, key=lambda knobs: (total(knobs), knobs == default))
        chosen[best] = chosen.get(best, 0) + 1
        right += grid[key][best][0]
        asked += grid[key][best][1]
    return (round(right / asked, 3) if asked else 0.0), chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="one story: the test suite runs this")
    args = parser.parse_args()
    django_setup()

    from django.contrib.auth import get_user_model
    from tqdm import tqdm

    from memory.models import Memory
    from memory.story import marks, memory_pass, presence, retrieval, scene
    from stories.accounts import ai_settings
    from stories.adventures import story_create
    from stories.models import Action, Adventure, Branch, StoryCard
    from stories.tree import lineage, writes
    from tests.support.fake_llm import FakeLLM
    from tests.support.story import memory_reply

    data = json.loads(STORIES.read_text())["stories"]
    if args.smoke:  # one story of each set
        data = [
            next(story for story in data if story.get("set", "dev") == part)
            for part in dict.fromkeys(story.get("set", "dev") for story in data)
        ]
    fake = FakeLLM(reply=memory_reply)
    user, _ = get_user_model().objects.get_or_create(username="bench-cast")
    answers: dict[tuple[str, str], list[tuple[bool, bool]]] = {}
    per_story: dict[tuple[str, str], list[tuple[bool, bool]]] = {}
    misses: list[str] = []
    unshown: dict[str, int] = {}  # per writer: witnessed facts held in memory but not in the part
    costs: dict[str, list[float]] = {}  # ms of the scene reading per block, per set
    grid: dict[tuple[str, str], dict[tuple[int, int], tuple[int, int]]] = {}  # (set, story) -> knobs -> right, asked
    try:
        for writer in ("offline", "model"):
            ai_settings.ai_settings_update(
                user_id=user.pk,
                endpoint_url=fake.url if writer == "model" else "",
                api_key="sk-bench" if writer == "model" else "",
                model="fake-model",
                embedding_model="",
            )
            Adventure.objects.filter(owner=user).delete()
            for story in tqdm(data, desc=f"{writer} writer", unit="story"):
                adventure = story_create(
                    owner_id=user.pk,
                    title=story["title"],
                    persona_name=story["persona"],
                    opening=story["actions"][0][1],
                )
                cards = [
                    StoryCard.objects.create(
                        adventure=adventure, type="character", name=c["name"], keys=c.get("keys", [])
                    )
                    for c in story["cast"]
                ]
                for kind, text in story["actions"][1:]:
                    writes.place(
                        adventure_id=adventure.pk,
                        branch_id=adventure.head_branch_id,
                        kind=kind,
                        text=text,
                        ask_pass=False,
                    )
                while memory_pass.run(adventure.pk).more_due:
                    pass
                head = Branch.objects.get(pk=adventure.head_branch_id)
                members = {m.name: m for m in scene.members(cards)}
                actions = list(lineage.story(head).order_by("depth"))
                seen: dict[str, list[str]] = {name: [] for name in members}
                for start in range(0, len(actions) - len(actions) % marks.MEMORY_INTERVAL, marks.MEMORY_INTERVAL):
                    block = actions[start : start + marks.MEMORY_INTERVAL]
                    before = actions[max(start - presence.LOOKBACK_BLOCKS * marks.MEMORY_INTERVAL, 0) : start]
                    began = time.perf_counter()
                    witnesses = presence.present(
                        cast=list(members.values()), actions=block, before=before, name=story["persona"]
                    )
                    if writer == "offline":
                        costs.setdefault(story["set"], []).append((time.perf_counter() - began) * 1000)
                    for w in witnesses:
                        seen[w.member.name] += w.sentences
                if writer == "offline":  # the reading under each setting of its knobs, for cross-validation
                    grid[(story["set"], story["title"])] = {
                        knobs: reading_right(story, members, actions, presence, marks, *knobs) for knobs in KNOBS
                    }
                for fact in story["facts"]:
                    for name, truth in fact["knows"].items():
                        ask = Action(kind="do", text=f"ask {name} about {fact['about']}", depth=head.tip_depth + 1)
                        recalled = retrieval.recall_for_turn(
                            adventure=adventure,
                            branch=head,
                            user_id=user.pk,
                            top_k=5,
                            story=lineage.recent(head, count=retrieval.QUERY_ACTIONS) + [ask],
                            record_use=False,
                            cards=cards,
                        )
                        part = " ".join(m.text for k in recalled.knowledge if k.name == name for m in k.items).lower()
                        said = any(told(word, part) for word in fact["words"])
                        answers.setdefault((writer, story["set"]), []).append((said, truth))
                        per_story.setdefault((story["title"], writer), []).append((said, truth))
                        if writer == "offline":
                            answers.setdefault(("everyone", story["set"]), []).append((True, truth))
                            there = any(told(word, " ".join(seen[name])) for word in fact["words"])
                            answers.setdefault(("presence", story["set"]), []).append((there, truth))
                            if there != truth:
                                misses.append(
                                    f"presence: {story['title']}: {name} {'saw' if there else 'did not see'}"
                                    f" {fact['about']} ({'witnessed' if truth else 'absent'})"
                                )
                            per_story.setdefault((story["title"], "presence"), []).append((there, truth))
                        if said != truth:
                            # a fact the character's memories hold but its best 4 for this question leave out
                            held = truth and any(
                                told(word, text)
                                for text in Memory.objects.filter(
                                    adventure=adventure, character__name=name
                                ).values_list("text", flat=True)
                                for word in fact["words"]
                            )
                            if held:
                                unshown[writer] = unshown.get(writer, 0) + 1
                            misses.append(
                                f"{writer}: {story['title']}: {name} {'was told' if said else 'was not told'}"
                                f" {fact['about']} ({'witnessed' if truth else 'absent'})"
                                + (" (held in its memories, not among the 4 the part shows)" if held else "")
                            )
    finally:
        fake.stop()
        Adventure.objects.filter(owner=user).delete()

    readings = ("presence", "offline", "model", "everyone")
    sets = list(dict.fromkeys(story.get("set", "dev") for story in data))
    results = {
        part: {
            reading: score(
                answers.get((reading, part), [])
                if part != "all"
                else [row for one in sets for row in answers.get((reading, one), [])]
            )
            for reading in readings
        }
        for part in (*sets, "all")
    }
    cost = {
        part: round(sum(ms) / len(ms), 2)
        if (ms := (costs.get(part, []) if part != "all" else [x for one in sets for x in costs.get(one, [])]))
        else 0.0
        for part in (*sets, "all")
    }
    print_table(
        "Who knows what (bench/cast_stories.json)",
        [
            "stories",
            "reading",
            "questions",
            "precision",
            "recall",
            "right",
            "told while absent",
            "not told though there",
            "reading ms/block",
        ],
        [
            [
                part,
                reading,
                r["questions"],
                r["precision"],
                r["recall"],
                r["accuracy"],
                f"{r['told_while_absent']} ({r['told_while_absent'] / max(r['questions'], 1) * 20:.1f} in 20)",
                r["not_told_though_there"],
                cost[part] if reading == "presence" else "",
            ]
            for part, rows in results.items()
            for reading, r in rows.items()
        ],
    )
    validated = {part: cross_validated(grid, part) for part in (*sets, "all")}
    print_table(
        "The scene reading, cross-validated (leave one story out over lookback blocks x members per block)",
        ["stories", "all data (defaults 2 x 4)", "cross-validated", "knobs chosen (lookback, members): folds"],
        [
            [part, results[part]["presence"]["accuracy"], figure, ", ".join(f"{k}: {n}" for k, n in chosen.items())]
            for part, (figure, chosen) in validated.items()
        ],
    )
    titles = list(dict.fromkeys(title for title, _ in per_story))
    print_table(
        "Share answered right, per story",
        ["story", "presence", "offline", "model"],
        [[t, *(score(per_story[(t, row)])["accuracy"] for row in ("presence", "offline", "model"))] for t in titles],
    )
    for miss in misses:
        print("  miss:", miss)
    print(
        "witnessed facts a character's memories hold but its part for the question does not show: "
        + ", ".join(f"{writer} {n}" for writer, n in unshown.items())
    )

    def plot(path):
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(sets), figsize=(5.5 * len(sets), 4), sharey=True, squeeze=False)
        metrics = ["precision", "recall", "accuracy"]
        width = 0.8 / len(readings)
        for ax, part in zip(axes[0], sets):
            for i, reading in enumerate(readings):
                ax.bar(
                    [x + i * width for x in range(len(metrics))],
                    [results[part][reading][m] for m in metrics],
                    width=width,
                    label=reading,
                )
            ax.set_xticks([x + 0.4 - width / 2 for x in range(len(metrics))], ["precision", "recall", "answered right"])
            ax.set_ylim(0, 1.05)
            ax.set_title(f"{part} stories: {results[part]['offline']['questions']} questions")
        axes[0][0].legend()
        fig.suptitle("Who knows what: a character's part against what it witnessed")
        fig.tight_layout()
        fig.savefig(path, dpi=120)

    save(
        "cast",
        [
            {
                "stories": part,
                "reading": reading,
                **r,
                **({"reading_ms_per_block": cost[part]} if reading == "presence" else {}),
            }
            for part, rows in results.items()
            for reading, r in rows.items()
        ],
        plot,
    )
    print(f"plot: {(ROOT / 'bench' / 'results' / 'cast.png').relative_to(ROOT)}")
    print(
        json.dumps(
            {
                "bench": "cast",
                **{part.replace("-", "_"): rows for part, rows in results.items()},
                "reading_ms_per_block": cost,
                "held_not_shown": unshown,
                "presence_cross_validated": {part: figure for part, (figure, _) in validated.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
