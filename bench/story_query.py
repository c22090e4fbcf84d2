"""How much of the recent story a turn's query embedding must read: recall quality
against the CPU the local embedder spends, per query window.

A turn's query is the newest four story actions (memory.story.retrieval.query_text). The
local MiniLM's cost grows with the text it reads; its tokenizer used to keep the
*first* 256 word pieces, so with narrator-length passages the player's newest action
fell off the end. Here each LoCoMo conversation stands for a story: its lines are the
memory bank (one memory a line, embedded as the pass embeds memories, the lines before the
recent story), and two kinds of turn are asked: "asks" (the recent story is three
narrator-length passages, the conversation's last 15 lines five to a passage, and the
player's action is a LoCoMo question about something long ago) and "goes on" (the recent
story is the 15 lines right after the question's evidence and the player only looks
around: what the scene just before the prompt's window held should come back). For each window (``first-256``:
the old reading; ``end-N``: the newest N word pieces) it prints evidence recall@5/@10
and the milliseconds one query costs on this CPU; then the window chosen by
leave-one-conversation-out cross-validation (the smallest window within 0.5 points
of the best R@5 on the other conversations), scored on the one held out. A plot and
a final JSON line.

    .venv/bin/python bench/story_query.py [data.json] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from _setup import django_setup, print_table, save
from locomo import CATEGORIES, DEFAULT_DATA, normalise_evidence

WINDOWS = [16, 24, 32, 64, 96, 128, 192, 256]
PASSAGE_LINES = 5  # LoCoMo lines joined into one narrator-length passage
CONTEXT_PASSAGES = 3  # passages before the player's action (the query holds four actions)
KS = (5, 10)
SCENARIOS = ("asks", "goes on")


def _lines(sample: dict) -> list[tuple[str, str]]:
    conv, out, n = sample["conversation"], [], 1
    while f"session_{n}" in conv:
        for turn in conv[f"session_{n}"]:
            out.append((turn["dia_id"], f"{turn['speaker']}: {turn['text']}"))
        n += 1
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", nargs="?", default=str(DEFAULT_DATA))
    parser.add_argument("--smoke", action="store_true", help="one conversation's first sessions, 10 cases, two windows")
    parser.add_argument("--windows", type=int, nargs="+", default=WINDOWS, help="end-N windows to score (word pieces)")
    args = parser.parse_args()
    django_setup()
    from tqdm import tqdm

    from memory import embedder
    from memory.story import retrieval
    from stories.models import Action

    samples = json.load(open(args.data))
    if args.smoke:  # one conversation's first two sessions (no cross-validation with one)
        samples = samples[:1]
        for sample in samples:
            conv = sample["conversation"]
            for key in [
                k for k in conv if k.startswith("session_") and k.split("_")[1].isdigit() and int(k.split("_")[1]) > 2
            ]:
                del conv[key]
    windows = ["first-256"] + [f"end-{n}" for n in (args.windows[:1] if args.smoke else args.windows)]
    local = embedder._local()

    def embed(texts: list[str], window: str) -> np.ndarray:
        """Each query alone on the query kernels, as a turn embeds it (settings.LOCAL_EMBEDDER_INT8: int8
        kernels, whose vectors depend a little on the batch; LOCAL_EMBEDDER_INT8=0 scores the shipped ones)."""
        tokenizer = None if window == "first-256" else local.query_tokenizer(int(window.split("-")[1]))
        return np.array([local.embed([text], tokenizer=tokenizer, query=True)[0] for text in texts], dtype=np.float32)

    def passages(lines):
        return [
            Action(kind=Action.Kind.STORY, text="\n".join(t for _, t in lines[k : k + PASSAGE_LINES]))
            for k in range(0, len(lines), PASSAGE_LINES)
        ]

    span = PASSAGE_LINES * CONTEXT_PASSAGES
    per_conv: dict[str, dict[tuple[str, str], list[dict]]] = {}
    cost: dict[str, list[float]] = {w: [] for w in windows}
    for sample in tqdm(samples, desc="conversations", unit="conversation"):
        lines = _lines(sample)
        ids = [i for i, _ in lines]
        where = {i: n for n, i in enumerate(ids)}
        vectors = np.array(embedder.embed_local([t for _, t in lines]), dtype=np.float32)
        cases = []  # (scenario, query text, bank size: the lines before the recent story, evidence)
        for qa in sample["qa"]:
            evidence = normalise_evidence(qa.get("evidence", [])) & set(ids)
            if qa.get("category") not in CATEGORIES or not evidence:
                continue
            # asks: the player asks, at the end of the story, about something long ago
            bank = len(lines) - span
            if evidence & set(ids[:bank]):
                story = passages(lines[bank:]) + [Action(kind=Action.Kind.SAY, text=qa["question"])]
                cases.append(("asks", retrieval.query_text(None, story=story), bank, evidence))
            # goes on: the story goes on right after the evidence; the player does something plain
            bank = max(where[e] for e in evidence) + 1
            if bank + span <= len(lines):
                story = passages(lines[bank : bank + span]) + [Action(kind=Action.Kind.DO, text="look around")]
                cases.append(("goes on", retrieval.query_text(None, story=story), bank, evidence))
        if args.smoke:
            cases = cases[:10]
        found = per_conv.setdefault(sample["sample_id"], {})
        for window in windows:
            queries = embed([text for _, text, _, _ in cases], window)
            for (scenario, _, bank, evidence), query in zip(cases, queries):
                order = np.argsort(-(vectors[:bank] @ query), kind="stable")
                ranked = [ids[i] for i in order[: max(KS)]]
                found.setdefault((scenario, window), []).append(
                    {k: len(evidence & set(ranked[:k])) / len(evidence) for k in KS}
                )
            for _, text, _, _ in cases[:10]:  # one query at a time, as a turn embeds it
                began = time.perf_counter()
                embed([text], window)
                cost[window].append((time.perf_counter() - began) * 1000)

    def score(convs, window, k, scenario=None):
        """Evidence recall in %, the mean of the two scenarios' (each its own mean over questions)."""
        parts = []
        for name in [scenario] if scenario else SCENARIOS:
            rows = [r[k] for c in convs for r in per_conv[c].get((name, window), [])]
            parts.append(100 * sum(rows) / max(1, len(rows)))
        return sum(parts) / len(parts)

    convs = list(per_conv)
    rows = [
        {
            "window": w,
            "r5": round(score(convs, w, 5), 1),
            "r10": round(score(convs, w, 10), 1),
            **{f"{name} r5": round(score(convs, w, 5, name), 1) for name in SCENARIOS},
            "ms_p50": round(float(np.percentile(cost[w], 50)), 2),
        }
        for w in windows
    ]
    folds = []
    for held in convs if len(convs) > 1 else []:
        train = [c for c in convs if c != held]
        best = max(score(train, w, 5) for w in windows[1:])
        chosen = next(w for w in windows[1:] if score(train, w, 5) >= best - 0.5)
        folds.append(
            {
                "held_out": held,
                "chosen": chosen,
                "r5": score([held], chosen, 5),
                "r10": score([held], chosen, 10),
                "first_r5": score([held], "first-256", 5),
                "first_r10": score([held], "first-256", 10),
            }
        )
    cv = {
        key: round(sum(f[key] for f in folds) / max(1, len(folds)), 1) for key in ("r5", "r10", "first_r5", "first_r10")
    }
    questions = sum(len(v) for c in convs for (name, w), v in per_conv[c].items() if w == "first-256")
    print_table(
        f"Story recall by query window ({len(convs)} conversations, {questions} cases, local MiniLM)",
        ["window", "R@5 (mean of both)", "R@10", *(f"{n} R@5" for n in SCENARIOS), "ms per query p50"],
        [[r["window"], r["r5"], r["r10"], *(r[f"{n} r5"] for n in SCENARIOS), r["ms_p50"]] for r in rows],
    )
    print_table(
        "Leave one conversation out",
        ["held out", "window chosen", "R@5", "R@10", "first-256 R@5 / R@10"],
        [
            [
                f["held_out"],
                f["chosen"],
                round(f["r5"], 1),
                round(f["r10"], 1),
                f"{f['first_r5']:.1f} / {f['first_r10']:.1f}",
            ]
            for f in folds
        ],
    )
    print(
        f"cross-validated (mean over held-out conversations): R@5 {cv['r5']} / R@10 {cv['r10']} "
        f"(the old first-256 reading: {cv['first_r5']} / {cv['first_r10']})"
    )

    def plot(path):
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        xs = [r["ms_p50"] for r in rows]
        ax.plot(xs[1:], [r["r5"] for r in rows[1:]], "o-", label="end-N R@5")
        ax.plot(xs[1:], [r["r10"] for r in rows[1:]], "s--", label="end-N R@10")
        for r in rows[1:]:
            ax.annotate(r["window"], (r["ms_p50"], r["r5"]), fontsize=7)
        ax.plot([xs[0]], [rows[0]["r5"]], "r*", markersize=12, label="first-256 (old) R@5")
        ax.set_xlabel("ms per query embedding (p50, this CPU)")
        ax.set_ylabel("evidence recall, %")
        ax.set_title("Story query window: quality against cost")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path)

    result = {"windows": rows, "cross_validated": cv, "folds": folds}
    save("story-query" + ("-smoke" if args.smoke else ""), [result], plot)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
