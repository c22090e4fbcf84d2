"""LoCoMo retrieval benchmark for agent memory.

Each conversation of a LoCoMo-format file is ingested through the project's own
API as `say` events (one agent per speaker, the other speaker as partner and
listener, session dates as event times, each turn's dia_id in the metadata);
the local embedder embeds the memories. Every question of categories 1-4 is
then asked through the recall API as the conversation's first speaker, and
Recall@5/10/25 of the evidence turns is scored (evidence ids normalised; the
data has malformed ones; questions without evidence are skipped).

    .venv/bin/python bench/locomo.py [path/to/locomo.json] [--limit-conversations N] [--ablation] [--cv]
                                     [--candidates]

``--cv`` chooses the ranking's parameters by cross-validation over the
conversations: for each conversation, the grid point (GRID) with the best
R@10 on the other conversations is used to score it, and the mean over those
held-out conversations is printed beside the all-data score (the default
settings, and the grid point that is best on all of them). A figure that only
the all-data column shows was tuned on its own questions.

``--candidates`` asks every question again with recall's candidate path forced
on (memory.agents.agent_recall: the bank ranked over candidates read from indexes, as
banks past AGENT_RECALL["exact_up_to"] are) and prints it beside exact scoring.

Beside R@k it reports recall at a token budget (BUDGETS: the memories recall returns when cut to
500, 1,000 and 2,000 tokens, as an agent's prompt holds them: a unit that does not depend on what a
memory is, a turn or a chunk), all-evidence recall (every evidence turn of a question recalled, not a
share: what a multi-hop question needs), and bootstrap 95% intervals (questions resampled).

Ends with one line of JSON: {"n": ..., "R@5": ..., "R@10": ..., "R@25": ...}
(percentages, categories 1-4; with --cv also "cv": the held-out figures; with
--candidates also "candidate_path").
The data is for evaluation only (CC BY-NC 4.0).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from _setup import ROOT, django_setup, print_table, save

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo" / "locomo_dev.json"
KS = (5, 10, 25)
BUDGETS = (500, 1000, 2000)  # tokens of recalled memories (the recall API's token_budget)
BOOTSTRAP = 1000  # resamples of the questions for the 95% intervals
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
ABLATIONS = [
    ("no fact keys", {"keys": 0.0}),
    ("no conversational context", {"context": 0.0}),
    ("no named-actor boost", {"named_actor": 0.0}),
    ("no time cues", {"time_words": 0.0, "period": 0.0}),
    ("no discount for a line that only asks", {"asks": 0.0}),
    ("no larger share for the reply to a question", {"answers": 0.0}),
    ("neither of those two", {"asks": 0.0, "answers": 0.0}),
    ("the second hop (0.3) for questions asking for many", {"list_hop": 0.3}),
    ("meaning not weighted up for questions asking for many", {"list_vector": 1.0}),
    ("the second hop (0.3) for every question", {"hop": 0.3}),
    ("BM25 counting words most memories hold", {"bm25_common_share": 1.0}),
    (
        "the ranking before issue 17",
        {
            "time_words": 0.0,
            "period": 0.0,
            "hop": 0.0,
            "list_hop": 0.0,
            "list_vector": 1.0,
            "bm25_common_share": 1.0,
            "asks": 0.0,
            "answers": 0.0,
        },
    ),
    ("neither", {"context": 0.0, "named_actor": 0.0}),
    ("neither, rrf_k 20", {"context": 0.0, "named_actor": 0.0, "rrf_k": 20}),
    ("vector only", {"context": 0.0, "named_actor": 0.0, "text": 0.0}),
    ("full text (BM25) only", {"context": 0.0, "named_actor": 0.0, "vector": 0.0}),
]


# --candidates: every bank takes the candidate path, and its nearest-by-meaning arm the HNSW index
# (memory.agents.agent_recall; these banks are small, and would otherwise be scored exactly).
FORCED_CANDIDATES = {"exact_up_to": 0, "hnsw_row_cost": 0}

# The parameters --cv chooses among (each grid point overrides settings.AGENT_RECALL). named_actor
# (0 or 0.3) was cross-validated with rrf_k (5, 20) and context (0, 0.25, 0.5) before time and the
# second hop existed, and hop (0, 0.3, 0.6) with rrf_k (5, 20), context and time_words (0, 0.3, 0.6);
# then rrf_k (5, 10) and context (0.25, 0.5) with time_words: every fold chose named_actor 0.3,
# rrf_k 5 and context 0.25, four of five hop 0, so they are held there (docs/benchmarks.md). asks (0.1 to 0.7)
# and answers (0 to 2) were searched wider with time_words (0.6 to 1.2) and list_hop: no fold chose
# time_words 1.2, asks 0.5 or more, or answers below 1 or above 1.5. With fact keys, keys (0.5, 0.7, 0.85)
# and time_words (0.6, 0.9) were searched with list_hop, asks and answers: every fold chose keys 0.7 and
# time_words 0.6, so they are held there while list_vector (the meaning's weight for a question asking
# for many) is searched.
GRID = {
    "list_vector": [1.0, 1.5, 2.0],
    "list_hop": [0.0, 0.3],
    "asks": [0.2, 0.3, 0.4],
    "answers": [1.0, 1.5],
}


def grid_points() -> list[dict]:
    import itertools

    names = list(GRID)
    return [dict(zip(names, values)) for values in itertools.product(*(GRID[n] for n in names))]


def normalise_evidence(raw) -> set[str]:
    """ "D8:6; D9:17", "D:11:26", "D30:05" and space-joined lists -> {"D8:6", "D9:17", "D11:26", "D30:5"}."""
    items = raw if isinstance(raw, list) else [raw]
    out = set()
    for item in items:
        for d, t in re.findall(r"D:?(\d+):(\d+)", str(item)):
            out.add(f"D{int(d)}:{int(t)}")
    return out


def session_time(text: str) -> datetime:
    """LoCoMo dates look like "1:56 pm on 8 May, 2023"."""
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y"):
        try:
            return datetime.strptime(text.strip(), fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    raise ValueError(f"unrecognised session time {text!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", nargs="?", default=str(DEFAULT_DATA), help="a LoCoMo-format JSON file")
    parser.add_argument("--limit-conversations", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="seconds, tiny sizes: the test suite runs this")
    parser.add_argument(
        "--ablation",
        action="store_true",
        help="also ask every question with each part of the ranking turned off or changed",
    )
    parser.add_argument(
        "--cv",
        action="store_true",
        help="choose the parameters by leave-one-conversation-out cross-validation over GRID",
    )
    parser.add_argument(
        "--candidates",
        action="store_true",
        help="also ask every question with recall's candidate path forced on (every bank ranked "
        "over candidates from indexes, not exactly) and print both",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a ranking setting for every pass (settings.AGENT_RECALL), e.g. --set list_hop=0.3",
    )
    args = parser.parse_args()
    samples = json.loads(Path(args.data).read_text())
    if args.limit_conversations:
        samples = samples[: args.limit_conversations]
    if args.smoke:  # one conversation's first two sessions, the questions they answer
        samples = samples[:1]
        conv = samples[0]["conversation"]
        for key in [k for k in conv if (m := re.fullmatch(r"session_(\d+)(_date_time)?", k)) and int(m.group(1)) > 2]:
            del conv[key]
    django_setup()

    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection
    from rest_framework.test import APIClient
    from tqdm import tqdm

    from config.celery import QUEUES
    from memory import embedder
    from memory.agents import agent_recall, agent_upkeep, worlds
    from memory.models import Agent, AgentMemory, World
    from workers.locks import client as redis_client

    owner, _ = get_user_model().objects.get_or_create(username="bench-locomo")
    World.objects.filter(owner=owner).delete()
    with connection.cursor() as cursor:  # the last run's rows gone from the indexes too, as autovacuum would
        cursor.execute("VACUUM (ANALYZE) memory_agentmemory")
    ingested = []  # (world, api client, asker, questions with valid evidence)
    for sample in samples:
        conv = sample["conversation"]
        a, b = conv["speaker_a"], conv["speaker_b"]
        world = World.objects.create(owner=owner, name=f"locomo {sample.get('sample_id', '')}", agent_capacity=100_000)
        _, token = worlds.token_create(world=world)
        api = APIClient(SERVER_NAME="localhost")
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        events, known = [], set()
        sessions = sorted((int(m.group(1)), key) for key in conv if (m := re.fullmatch(r"session_(\d+)", key)))
        for number, key in sessions:
            when = session_time(conv[f"session_{number}_date_time"])
            for turn in conv[key]:
                speaker = turn["speaker"]
                other = b if speaker == a else a
                text = turn["text"]
                if turn.get("blip_caption"):
                    text += f" [shares a photo: {turn['blip_caption']}]"
                known.add(turn["dia_id"])
                events.append(
                    {
                        "type": "say",
                        "actor": speaker,
                        "target": other,
                        "nearby": [other],
                        "text": text[:2000],
                        "time": when.isoformat(),
                        "metadata": {"dia_id": turn["dia_id"]},
                    }
                )
        for start in tqdm(range(0, len(events), 500), desc=f"ingest {sample.get('sample_id', '')}", unit="batch"):
            response = api.post(
                f"/api/worlds/{world.pk}/events/", {"events": events[start : start + 500]}, format="json"
            )
            assert response.status_code == 201, response.content
        redis_client().delete(*QUEUES)  # this bench embeds in-process below
        for agent in Agent.objects.filter(world=world):
            agent_upkeep.agent_catch_up(agent_id=agent.pk)
        questions = []
        for qa in sample["qa"]:
            evidence = normalise_evidence(qa.get("evidence", [])) & known
            if qa.get("category") in CATEGORIES and evidence:
                questions.append((qa, evidence))
        ingested.append((world, api, a, questions))

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memory_agentmemory")
    dia_of = dict(AgentMemory.objects.filter(world__in=[w for w, *_ in ingested]).values_list("pk", "metadata__dia_id"))

    def ask(label, overrides=None, *, through_api=True):
        """Every question, with ``overrides`` of the ranking's settings, through the
        recall API (or, for the grid's many passes, the function behind it and
        behind MCP): one record per question (conversation, category, share of
        its evidence found in the top k), and latencies."""
        settings.AGENT_RECALL = {**base_conf, **(overrides or {})}
        records, latencies = [], []
        try:
            for conv, (world, api, asker, questions) in enumerate(ingested):
                agent = Agent.objects.get(world=world, external_id=asker)
                for qa, evidence in tqdm(questions, desc=f"{label}: {world.name}", unit="q"):
                    started = time.perf_counter()
                    if through_api:
                        response = api.post(
                            f"/api/worlds/{world.pk}/agents/{asker}/recall/",
                            {
                                "query": qa["question"],
                                "limit": max(KS),
                                "cooldown_seconds": 0,
                                "since": "1900-01-01T00:00:00Z",
                                "token_budget": 100_000,
                            },
                            format="json",
                        )
                        assert response.status_code == 200, response.content
                        ids = [m["id"] for m in response.json()["memories"]]
                    else:
                        found, _ = agent_recall.agent_recall(
                            world=world,
                            agent=agent,
                            query=qa["question"],
                            limit=max(KS),
                            cooldown_s=0,
                            since=datetime(1900, 1, 1, tzinfo=timezone.utc),
                            token_budget=100_000,
                            record=False,
                        )
                        ids = [m.id for m in found]
                    latencies.append((time.perf_counter() - started) * 1000)
                    ranked = [dia_of.get(i) for i in ids]
                    records.append(
                        {
                            "conv": conv,
                            "category": qa["category"],
                            "found": {k: len(evidence & set(ranked[:k])) / len(evidence) for k in KS},
                            "all": {k: float(evidence <= set(ranked[:k])) for k in KS},
                        }
                    )
        finally:
            settings.AGENT_RECALL = base_conf
        return records, latencies

    def ask_budget(budget: int) -> list[dict]:
        """Every question, the memories cut to ``budget`` tokens by recall itself (as many as fit, up
        to recall's most): the share of its evidence among them, whether all of it is, and what was
        returned (memories, tokens)."""
        from stories.prompt import tokens as token_counter

        records = []
        for conv, (world, _api, asker, questions) in enumerate(ingested):
            agent = Agent.objects.get(world=world, external_id=asker)
            for qa, evidence in tqdm(questions, desc=f"{budget} tokens: {world.name}", unit="q"):
                found, _ = agent_recall.agent_recall(
                    world=world,
                    agent=agent,
                    query=qa["question"],
                    limit=agent_recall.RECALL_LIMIT_MAX,
                    cooldown_s=0,
                    since=datetime(1900, 1, 1, tzinfo=timezone.utc),
                    token_budget=budget,
                    record=False,
                )
                got = {dia_of.get(m.id) for m in found}
                records.append(
                    {
                        "conv": conv,
                        "category": qa["category"],
                        "share": len(evidence & got) / len(evidence),
                        "all": float(evidence <= got),
                        "memories": len(found),
                        "tokens": sum(token_counter.count(m.content) for m in found),
                    }
                )
        return records

    def pct(values):
        return round(100 * sum(values) / len(values), 1) if values else float("nan")

    def interval(values) -> list[float]:
        """The bootstrap 95% interval of a mean, in percent (the questions resampled BOOTSTRAP times)."""
        import numpy as np

        if not values:
            return [float("nan"), float("nan")]
        data = np.asarray(values, dtype=float)
        means = np.random.default_rng(17).choice(data, size=(BOOTSTRAP, len(data)), replace=True).mean(axis=1)
        return [round(100 * float(np.percentile(means, 2.5)), 1), round(100 * float(np.percentile(means, 97.5)), 1)]

    def score(records) -> dict:
        """R@k over all questions and per category, in percent (with all-evidence R@k and bootstrap
        95% intervals of R@5 and R@10 where the records carry them)."""
        out = {"n": len(records), **{f"R@{k}": pct([r["found"][k] for r in records]) for k in KS}}
        out["by_category"] = {
            c: {f"R@{k}": pct([r["found"][k] for r in records if r["category"] == c]) for k in KS} for c in CATEGORIES
        }
        return out

    def detail(records) -> dict:
        """All-evidence R@k and the 95% intervals, over all questions and per category."""

        def of(rows):
            return {
                **{f"all-evidence R@{k}": pct([r["all"][k] for r in rows]) for k in KS},
                **{f"R@{k} 95%": interval([r["found"][k] for r in rows]) for k in (5, 10)},
            }

        return {
            "all": of(records),
            **{CATEGORIES[c]: of([r for r in records if r["category"] == c]) for c in CATEGORIES},
        }

    base_conf = {
        **settings.AGENT_RECALL,
        **{name: json.loads(value) for name, value in (item.split("=", 1) for item in args.set)},
    }
    records, latencies = ask("recall")
    result_full = score(records)
    details = detail(records)
    result = {k: v for k, v in result_full.items() if k != "by_category"}
    # Later passes ask the same questions: embed each once (what they compare is the ranking).
    real_embed, vectors = embedder.embed, {}

    def embed_once(*, user_id, texts, **kwargs):
        key = tuple(texts)
        if key not in vectors:
            vectors[key] = real_embed(user_id=user_id, texts=texts, **kwargs)
        return vectors[key]

    embedder.embed = embed_once
    ablations, cv, forced = [], None, None
    try:
        budgets = {budget: ask_budget(budget) for budget in BUDGETS}
        if args.candidates:
            forced = score(ask("candidate path", FORCED_CANDIDATES, through_api=False)[0])
        if args.ablation:
            for label, overrides in ABLATIONS:
                ablations.append((label, score(ask(label, overrides, through_api=False)[0])))
        if args.cv:
            points = grid_points()
            per_point = [
                ask(f"grid {n + 1}/{len(points)}", point, through_api=False)[0]
                for n, point in enumerate(tqdm(points, desc="grid", unit="point"))
            ]
    finally:
        embedder.embed = real_embed

    if args.cv:

        def r_at(records, k):
            return sum(r["found"][k] for r in records) / max(len(records), 1)

        def best_point(keep) -> int:
            return max(
                range(len(points)),
                key=lambda j: (
                    r_at([r for r in per_point[j] if keep(r)], 10),
                    r_at([r for r in per_point[j] if keep(r)], 5),
                ),
            )

        held, folds = [], []
        for conv, (world, *_rest) in enumerate(ingested):
            chosen = best_point(lambda r: r["conv"] != conv)
            mine = [r for r in per_point[chosen] if r["conv"] == conv]
            held += mine
            folds.append(
                [
                    world.name,
                    ", ".join(f"{k} {v}" for k, v in points[chosen].items()),
                    score(mine)["R@10"],
                    score([r for r in records if r["conv"] == conv])["R@10"],
                ]
            )
        best_all = best_point(lambda r: True)
        cv = {
            "held_out": score(held),
            "best_on_all_data": score(per_point[best_all]),
            "best_on_all_data_point": points[best_all],
            "folds": folds,
        }

    latencies.sort()
    p50, p95 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.95)]
    rows = [
        [
            f"{c} {name}",
            len([r for r in records if r["category"] == c]),
            *[result_full["by_category"][c][f"R@{k}"] for k in KS],
        ]
        for c, name in CATEGORIES.items()
    ]
    rows.append(["all (1-4)", result["n"], *[result[f"R@{k}"] for k in KS]])
    print_table(
        f"LoCoMo evidence recall through the recall API ({len(samples)} conversations, local embedder)",
        ["category", "questions", "R@5", "R@10", "R@25"],
        rows,
    )
    print(f"Recall API latency (in-process, query embedding included): p50 {p50:.1f} ms, p95 {p95:.1f} ms")
    print_table(
        "Bootstrap 95% intervals (questions resampled), and all-evidence recall (every evidence turn recalled)",
        ["category", "R@5 [95%]", "R@10 [95%]", "all-evidence R@5 / R@10 / R@25"],
        [
            [
                label,
                f"{source['R@5']} {details[key]['R@5 95%']}",
                f"{source['R@10']} {details[key]['R@10 95%']}",
                " / ".join(str(details[key][f"all-evidence R@{k}"]) for k in KS),
            ]
            for label, key, source in [
                *[(f"{c} {name}", name, result_full["by_category"][c]) for c, name in CATEGORIES.items()],
                ("all (1-4)", "all", result),
            ]
        ],
    )
    budget_rows = []
    budget_result = {}
    for budget, rows_b in budgets.items():
        multi = [r for r in rows_b if r["category"] == 1]
        entry = {
            "evidence recall": pct([r["share"] for r in rows_b]),
            "95%": interval([r["share"] for r in rows_b]),
            "all-evidence": pct([r["all"] for r in rows_b]),
            "multi-hop": pct([r["share"] for r in multi]),
            "multi-hop all-evidence": pct([r["all"] for r in multi]),
            "memories": round(sum(r["memories"] for r in rows_b) / max(len(rows_b), 1), 1),
            "tokens": round(sum(r["tokens"] for r in rows_b) / max(len(rows_b), 1)),
        }
        budget_result[budget] = entry
        budget_rows.append(
            [
                f"{budget:,}",
                f"{entry['evidence recall']} {entry['95%']}",
                entry["all-evidence"],
                f"{entry['multi-hop']} / {entry['multi-hop all-evidence']}",
                f"{entry['memories']} ({entry['tokens']} tokens)",
            ]
        )
    print_table(
        f"Recall at a token budget (the memories recall returns cut to the budget; R@10 above: {result['R@10']})",
        ["tokens", "evidence recall [95%]", "all-evidence", "multi-hop: recall / all-evidence", "memories returned"],
        budget_rows,
    )
    if forced:
        print_table(
            "Exact scoring against the candidate path forced on (every bank ranked over index candidates)",
            ["category", "exact R@5 / R@10", "candidate path R@5 / R@10"],
            [
                [
                    f"{c} {name}",
                    f"{result_full['by_category'][c]['R@5']} / {result_full['by_category'][c]['R@10']}",
                    f"{forced['by_category'][c]['R@5']} / {forced['by_category'][c]['R@10']}",
                ]
                for c, name in CATEGORIES.items()
            ]
            + [["all (1-4)", f"{result['R@5']} / {result['R@10']}", f"{forced['R@5']} / {forced['R@10']}"]],
        )
    if ablations:
        print_table(
            "What each part of the ranking adds (the same questions, one part changed)",
            ["ranking", "R@5", "R@10", "R@25"],
            [["as configured", *[result[f"R@{k}"] for k in KS]]]
            + [[label, *[h[f"R@{k}"] for k in KS]] for label, h in ablations],
        )
    if cv:

        def cells(scored, c=None):
            source = scored if c is None else scored["by_category"][c]
            return [f"{source['R@5']} / {source['R@10']}"]

        print_table(
            f"Cross-validated (leave one conversation out, {len(grid_points())} grid points): R@5 / R@10",
            ["category", "settings as shipped (all data)", "best grid point on all data", "cross-validated (held out)"],
            [
                [f"{c} {name}", *cells(result_full, c), *cells(cv["best_on_all_data"], c), *cells(cv["held_out"], c)]
                for c, name in CATEGORIES.items()
            ]
            + [["all (1-4)", *cells(result_full), *cells(cv["best_on_all_data"]), *cells(cv["held_out"])]],
        )
        print_table(
            "Each fold: the grid point chosen on the other conversations, and the held-out R@10",
            ["held out", "chosen", "R@10 held out", "R@10 as shipped"],
            cv["folds"],
        )
    print(
        "Reference points (same local model over raw turns): cosine 41.4/50.6/63.7, BM25 43.6/50.9/60.0, "
        "RRF 49.0/58.4/70.5; DRAGON (LoCoMo paper) R@10 66.2; target (issue 17, cross-validated) "
        "R@5 >= 65, R@10 >= 75."
    )
    by_category = {c: {k: [r["found"][k] for r in records if r["category"] == c] for k in KS} for c in CATEGORIES}

    def plot(path):
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for c, name in CATEGORIES.items():
            ax.plot(KS, [pct(by_category[c][k]) for k in KS], "o-", label=name)
        ax.plot(KS, [result[f"R@{k}"] for k in KS], "k--", label="all")
        if cv:
            ax.plot(KS, [cv["held_out"][f"R@{k}"] for k in KS], "k:", marker="x", label="all, cross-validated")
        ax.axhline(75, color="red", linestyle=":", label="target R@10")
        ax.set_xlabel("k")
        ax.set_ylabel("evidence recall, %")
        ax.set_title("LoCoMo Recall@k")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=120)

    save(
        "locomo",
        [
            result,
            {
                "by_category": {CATEGORIES[c]: result_full["by_category"][c] for c in CATEGORIES},
                "intervals_and_all_evidence": details,
                "token_budgets": budget_result,
                "latency_ms": {"p50": round(p50, 2), "p95": round(p95, 2)},
                "ablations": {label: {f"R@{k}": h[f"R@{k}"] for k in KS} for label, h in ablations},
                "cv": cv,
                "candidate_path": forced,
            },
        ],
        plot,
    )
    result["at_tokens"] = {str(b): budget_result[b]["evidence recall"] for b in BUDGETS}
    if cv:
        result["cv"] = {k: cv["held_out"][k] for k in ("n", *[f"R@{k}" for k in KS])}
    if forced:
        result["candidate_path"] = {k: forced[k] for k in ("n", *[f"R@{k}" for k in KS])}
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
