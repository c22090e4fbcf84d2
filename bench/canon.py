"""The story keeps the canon current: planted-change stories (bench/canon_stories.txt) against the claims.

Every story is played passage by passage into the database with its cards, the post-turn pass runs
after each passage (the offline reader: no model), and a player who accepts the new cards the story
plants (and nothing else) is simulated. Then, per set ("dev": the stories the reader's patterns were
written against; "held-out": written before and never tuned on), per class:
- changes reflected: a claim of the planted card and slot, its value holding the planted word, read
  from the planted passage (or the block it is in) and standing by the end of the next block;
- false claims: decoys (plans, threats, rumours, dreams, lies, a faked death, sleep, wounds) that made
  a claim of their card and slot;
- reversals: the value standing at the story's end;
- new cards: names proposed against the names planted (precision, recall), duplicates (a name proposed
  that is a card or an alias already, or twice), overwrites of the player's text (must be 0);
- the reading's cost per block.
The reader has no knob chosen on data (its patterns are rules), so there is no cross-validated figure:
the held-out row is the figure on stories it was not tuned on.

    .venv/bin/python bench/canon.py [--smoke]

Ends with one line of JSON."""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

from _setup import django_setup, print_table, save

STORIES = Path(__file__).resolve().parent / "canon_stories.txt"
TARGETS = {"changes": 0.85, "false_claims": 0.05, "reversals": 0.90, "overwrites": 0, "duplicates": 0}


def parse(text: str) -> list[dict]:
    """The stories file (its format is described at its top)."""
    stories: list[dict] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("= "):
            title, genre, part, persona = [x.strip() for x in line[2:].split("|")]
            stories.append(
                {"title": title, "genre": genre, "set": part, "persona": persona, "cards": [], "passages": []}
            )
            story = stories[-1]
            story.update(changes=[], decoys=[], ends=[], new=[], aliases=[])
            continue
        story = stories[-1]
        if line.startswith("card:"):
            name, kind, keys, entry = [x.strip() for x in line[5:].split("|")]
            story["cards"].append(
                {"name": name, "type": kind, "keys": [k.strip() for k in keys.split(",") if k.strip()], "entry": entry}
            )
        elif line.startswith("@"):
            verb, rest = line[1:].split(" ", 1)
            at = len(story["passages"])
            if verb in ("new",):
                story["new"].append(rest.strip())
                continue
            if verb == "alias":
                card, alias = [x.strip() for x in rest.split("|")]
                story["aliases"].append({"card": card, "alias": alias})
                continue
            names = [c["name"] for c in story["cards"]] + story["new"] + re.findall(r"^([A-Z]\w+)", rest)
            card = max((n for n in names if rest.startswith(n + " ")), key=len)
            words = rest[len(card) :].split(None, 1)
            slot, value = words[0], (words[1] if len(words) > 1 else "")
            planted = {"card": card, "slot": slot, "value": value, "at": at}
            {"change": story["changes"], "decoy": story["decoys"], "end": story["ends"]}[verb].append(planted)
        else:
            kind, text = line.split(":", 1)  # "story:" is the narrator's (the model's) passage
            story["passages"].append(("ai" if kind.strip() == "story" else kind.strip(), text.strip()))
    return stories


def ratio(hit: int, of: int) -> float:
    return round(hit / of, 3) if of else 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="one story of each set: the test suite runs this")
    parser.add_argument(
        "--misses", default="dev", help="the sets whose misses are printed (dev, held-out, all): tune on dev only"
    )
    args = parser.parse_args()
    django_setup()

    from django.contrib.auth import get_user_model
    from tqdm import tqdm

    from memory.models import CardClaim
    from memory.story import claims, claims_reader, marks, memory_pass, proposals
    from stories.accounts import ai_settings
    from stories.adventures import story_create
    from stories.models import Adventure, Branch, StoryCard
    from stories.tree import lineage, writes

    data = parse(STORIES.read_text())
    sets = list(dict.fromkeys(s["set"] for s in data))
    if args.smoke:
        data = [next(s for s in data if s["set"] == part) for part in sets]
    user, _ = get_user_model().objects.get_or_create(username="bench-canon")
    ai_settings.ai_settings_update(user_id=user.pk, endpoint_url="", api_key="", model="", embedding_model="")
    Adventure.objects.filter(owner=user).delete()
    tally: dict[tuple[str, str], list[int]] = {}  # (set, measure) -> [hit, of]
    misses: list[str] = []
    costs: dict[str, list[float]] = {}

    def count(part: str, measure: str, hit: bool) -> None:
        row = tally.setdefault((part, measure), [0, 0])
        row[0] += int(hit)
        row[1] += 1

    try:
        for story in tqdm(data, desc="stories", unit="story"):
            part = story["set"]
            adventure = story_create(
                owner_id=user.pk, title=story["title"], persona_name=story["persona"], opening=story["passages"][0][1]
            )
            for c in story["cards"]:
                StoryCard.objects.create(
                    adventure=adventure,
                    type=c["type"],
                    name=c["name"],
                    keys=c["keys"],
                    entry=c["entry"],
                    in_cast=c["type"] == "character",
                )
            seen_at: dict[int, int] = {}  # claim id -> the tip when it first stood
            accepted: dict[str, int] = {}
            ever_proposed: dict[str, int] = {}
            last = len(story["passages"])
            padding = [("do", "wait"), ("ai", "Time passes quietly.")] * marks.MEMORY_INTERVAL
            filler = padding[: ((last - 1) // marks.MEMORY_INTERVAL + 2) * marks.MEMORY_INTERVAL - last]
            for kind, text in story["passages"][1:] + filler:
                writes.place(
                    adventure_id=adventure.pk, branch_id=adventure.head_branch_id, kind=kind, text=text, ask_pass=False
                )
                while memory_pass.run(adventure.pk).more_due:
                    pass
                head = Branch.objects.get(pk=adventure.head_branch_id)
                for pk in claims.on_path(head).values_list("pk", flat=True):
                    seen_at.setdefault(pk, head.tip_depth)
                for p in proposals.proposed(head):
                    ever_proposed.setdefault(p["name"], head.tip_depth)
                    planted = next((n for n in story["new"] if proposals.same_name(n, p["name"])), None)
                    if planted and p["name"] not in accepted:
                        accepted[p["name"]] = proposals.proposal_accept(adventure=adventure, proposal_id=p["id"]).pk
            head = Branch.objects.get(pk=adventure.head_branch_id)
            actions = list(lineage.story(head).order_by("depth"))
            cards = {c.name: c for c in StoryCard.every.filter(adventure=adventure)}
            for name in story["new"]:  # a planted name is the card made from its proposal ("Sabine Marsh")
                made = next((c for n, c in cards.items() if proposals.same_name(name, n)), None)
                if made is not None:
                    cards.setdefault(name, made)
            every = list(claims.on_path(head).select_related("action", "card"))
            block = marks.MEMORY_INTERVAL

            for change in story["changes"]:
                card = cards.get(change["card"])
                end_of_next = ((change["at"] - 1) // block + 2) * block
                hit = card is not None and any(
                    c.card_id == card.pk
                    and c.slot == change["slot"]
                    and change["value"].lower() in c.value.lower()
                    and (c.action.depth - 1) // block in {(change["at"] - 1) // block, (change["at"] - 2) // block}
                    and change["at"] - 1 <= c.action.depth
                    and seen_at.get(c.pk, 10**9) <= end_of_next
                    for c in every
                )
                count(part, "changes", hit)
                count(part, f"slot:{change['slot']}", hit)
                if not hit:
                    why = "no card" if card is None else "not read"
                    misses.append(
                        f"[{part}] {story['title']}: change missed ({why}): {change} | {actions[change['at'] - 1].text}"
                    )
            for decoy in story["decoys"]:
                card = cards.get(decoy["card"])
                wrong = [
                    c
                    for c in every
                    if card is not None
                    and c.card_id == card.pk
                    and c.slot == decoy["slot"]
                    and c.action.depth == decoy["at"]
                ]
                count(part, "false_claims", bool(wrong))
                for c in wrong:
                    misses.append(
                        f"[{part}] {story['title']}: decoy claimed: {c.card.name} {c.slot} = {c.value} | {c.text}"
                    )
            standing = {
                (c.card_id, c.slot): c for c in sorted(every, key=lambda c: (c.action.depth, c.pk)) if c.topic == ""
            }
            for end in story["ends"]:
                card = cards.get(end["card"])
                held = standing.get((card.pk, end["slot"])) if card else None
                hit = held is not None and end["value"].lower() in held.value.lower()
                count(part, "reversals", hit)
                if not hit:
                    misses.append(
                        f"[{part}] {story['title']}: end state wrong: {end} stands as {held.value if held else None}"
                    )

            def planted_as(proposal: str) -> str | None:  # "Sabine Marsh" proposes the planted "Marsh"
                return next((n for n in story["new"] if proposals.same_name(n, proposal)), None)

            for name in story["new"]:
                hit = any(planted_as(p) == name for p in ever_proposed)
                count(part, "new_recall", hit)
                if not hit:
                    misses.append(f"[{part}] {story['title']}: new card not proposed: {name}")
            for name in ever_proposed:
                count(part, "new_precision", planted_as(name) is not None)
                if planted_as(name) is None:
                    misses.append(f"[{part}] {story['title']}: proposed, not planted: {name}")
            known = (
                {story_card["name"].lower() for story_card in story["cards"]}
                | {k.lower() for c in story["cards"] for k in c["keys"]}
                | {a["alias"].lower() for a in story["aliases"]}
            )
            surnames: dict[str, list[str]] = {}
            for name in ever_proposed:
                surnames.setdefault(name.split()[-1], []).append(name)
            duplicates = [n for n in ever_proposed if n.lower() in known] + [
                n for group in surnames.values() if len(group) > 1 for n in group[1:]
            ]
            for name in duplicates:
                misses.append(f"[{part}] {story['title']}: duplicate card proposed: {name}")
            tally.setdefault((part, "duplicates"), [0, 0])[0] += len(duplicates)
            planted = {c["name"]: c["entry"] for c in story["cards"]}
            overwrites = [n for n, e in planted.items() if cards[n].entry != e]
            tally.setdefault((part, "overwrites"), [0, 0])[0] += len(overwrites)
            tally.setdefault((part, "claims"), [0, 0])[0] += len(every)
            cast_cards = list(StoryCard.objects.filter(adventure=adventure))
            for start in range(0, len(actions) - len(actions) % block, block):
                began = time.perf_counter()
                claims_reader.read_block(
                    actions=actions[start : start + block], cards=cast_cards, name=story["persona"]
                )
                costs.setdefault(part, []).append((time.perf_counter() - began) * 1000)
            planted_keys = {(c["card"], c["slot"], c["at"]) for c in story["changes"]}
            planted_keys |= {(a["card"], "alias", depth) for a in story["aliases"] for depth in range(1, last + 1)}
            for c in every:
                if (c.card.name, c.slot, c.action.depth) not in planted_keys and not any(
                    (c.card.name, c.slot) == (ch["card"], ch["slot"])
                    and (c.action.depth - 1) // block == (ch["at"] - 1) // block
                    for ch in story["changes"]
                ):
                    misses.append(
                        f"[{part}] {story['title']}: unplanted claim: {c.card.name} {c.slot} = {c.value} | {c.text}"
                    )
                    tally.setdefault((part, "unplanted"), [0, 0])[0] += 1
    finally:
        Adventure.objects.filter(owner=user).delete()
        CardClaim.objects.filter(adventure__owner=user).delete()

    parts = [p for p in sets if any(s["set"] == p for s in data)]

    def figure(part: str, measure: str) -> float | int:
        rows = [tally.get((p, measure), [0, 0]) for p in (parts if part == "all" else [part])]
        hit, of = sum(r[0] for r in rows), sum(r[1] for r in rows)
        if measure in ("duplicates", "overwrites", "claims", "unplanted"):
            return hit
        return ratio(hit, of)

    def of(part: str, measure: str) -> int:
        return sum(tally.get((p, measure), [0, 0])[1] for p in (parts if part == "all" else [part]))

    results = {}
    for part in (*parts, "all"):
        ms = [x for p in (parts if part == "all" else [part]) for x in costs.get(p, [])]
        results[part] = {
            "stories": sum(1 for s in data if part in ("all", s["set"])),
            "changes": figure(part, "changes"),
            "changes_planted": of(part, "changes"),
            "false_claims": figure(part, "false_claims"),
            "decoys": of(part, "false_claims"),
            "reversals": figure(part, "reversals"),
            "ends": of(part, "reversals"),
            "new_recall": figure(part, "new_recall"),
            "new_precision": figure(part, "new_precision"),
            "duplicates": figure(part, "duplicates"),
            "overwrites": figure(part, "overwrites"),
            "claims": figure(part, "claims"),
            "unplanted_claims": figure(part, "unplanted"),
            "reading_ms_per_block": round(sum(ms) / len(ms), 2) if ms else 0.0,
        }
    print_table(
        "The canon the story keeps (offline reader; bench/canon_stories.txt)",
        [
            "stories",
            "changes reflected",
            "false claims / decoys",
            "reversals right",
            "new cards P / R",
            "duplicates",
            "overwrites",
            "claims (unplanted)",
            "ms / block",
        ],
        [
            [
                f"{part} ({r['stories']})",
                f"{r['changes']} of {r['changes_planted']}",
                f"{r['false_claims']} of {r['decoys']}",
                f"{r['reversals']} of {r['ends']}",
                f"{r['new_precision']} / {r['new_recall']}",
                r["duplicates"],
                r["overwrites"],
                f"{r['claims']} ({r['unplanted_claims']})",
                r["reading_ms_per_block"],
            ]
            for part, r in results.items()
        ],
    )
    slots = sorted({m.split(":", 1)[1] for _, m in tally if m.startswith("slot:")})
    print_table(
        "Changes reflected, per slot (reflected of planted)",
        ["stories", *slots],
        [
            [part, *(f"{figure(part, f'slot:{slot}')} of {of(part, f'slot:{slot}')}" for slot in slots)]
            for part in (*parts, "all")
        ],
    )
    for part in (*parts, "all"):
        results[part]["per_slot"] = {slot: figure(part, f"slot:{slot}") for slot in slots}
    print("targets (offline reader, stories not tuned on):", TARGETS)
    shown = [m for m in misses if args.misses == "all" or m.startswith(f"[{args.misses}]")]
    for miss in shown:
        print("  ", miss)
    print(f"misses printed: {len(shown)} of {len(misses)} (--misses {args.misses})")

    def plot(path):
        import matplotlib.pyplot as plt

        measures = [
            ("changes", "changes reflected"),
            ("false_claims", "false claims"),
            ("reversals", "reversals"),
            ("new_precision", "new cards: precision"),
            ("new_recall", "new cards: recall"),
        ]
        fig, ax = plt.subplots(figsize=(9, 4))
        width = 0.8 / len(results)
        for i, (part, r) in enumerate(results.items()):
            bars = ax.bar(
                [x + i * width for x in range(len(measures))], [r[m] for m, _ in measures], width=width, label=part
            )
            ax.bar_label(bars, fmt="%.2f", fontsize=7)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(measures))], [label for _, label in measures])
        ax.axhline(TARGETS["changes"], color="grey", linestyle=":", linewidth=1)
        ax.set_ylim(0, 1.12)
        ax.legend(loc="upper center", ncol=3, bbox_to_anchor=(0.5, -0.1))
        ax.set_title("The canon the story keeps: the offline reader on planted-change stories")
        fig.tight_layout()
        fig.savefig(path, dpi=120)

    save("canon", [{"stories": part, **r} for part, r in results.items()], plot=plot)
    print(json.dumps({"bench": "canon", "smoke": args.smoke, **{part: r for part, r in results.items()}}))


if __name__ == "__main__":
    main()
