"""LoCoMo retrieval benchmark for agent memory.

Each conversation of a LoCoMo-format file is ingested through the project's own
API as `say` events (one agent per speaker, the other speaker as partner and
listener, session dates as event times, each turn's dia_id in the metadata);
the local embedder embeds the memories. Every question of categories 1-4 is
then asked through the recall API as the conversation's first speaker, and
Recall@5/10/25 of the evidence turns is scored (evidence ids normalised; the
data has malformed ones; questions without evidence are skipped).

    .venv/bin/python bench/locomo.py [path/to/locomo.json] [--limit-conversations N] [--ablation]

Ends with one line of JSON: {"n": ..., "R@5": ..., "R@10": ..., "R@25": ...}
(percentages, categories 1-4). The data is for evaluation only (CC BY-NC 4.0).
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
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
ABLATIONS = [
    ("no conversational context", {"context": 0.0}),
    ("no named-actor boost", {"named_actor": 0.0}),
    ("neither", {"context": 0.0, "named_actor": 0.0}),
    ("neither, rrf_k 20", {"context": 0.0, "named_actor": 0.0, "rrf_k": 20}),
    ("vector only", {"context": 0.0, "named_actor": 0.0, "text": 0.0}),
    ("full text (BM25) only", {"context": 0.0, "named_actor": 0.0, "vector": 0.0}),
]


def normalise_evidence(raw) -> set[str]:
    """"D8:6; D9:17", "D:11:26", "D30:05" and space-joined lists -> {"D8:6", "D9:17", "D11:26", "D30:5"}."""
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
    parser.add_argument("--ablation", action="store_true",
                        help="also ask every question with each part of the ranking turned off or changed")
    args = parser.parse_args()
    samples = json.loads(Path(args.data).read_text())
    if args.limit_conversations:
        samples = samples[: args.limit_conversations]
    django_setup()

    from django.conf import settings
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient
    from tqdm import tqdm

    from memory import agent_upkeep, worlds
    from memory.models import Agent, AgentMemory, World
    from workers.locks import client as redis_client

    owner, _ = get_user_model().objects.get_or_create(username="bench-locomo")
    World.objects.filter(owner=owner).delete()
    ingested = []  # (world, api client, asker, questions with valid evidence)
    for sample in samples:
        conv = sample["conversation"]
        a, b = conv["speaker_a"], conv["speaker_b"]
        world = World.objects.create(owner=owner, name=f"locomo {sample.get('sample_id', '')}", agent_capacity=100_000)
        _, token = worlds.token_create(world=world)
        api = APIClient(SERVER_NAME="localhost")
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        events, known = [], set()
        sessions = sorted((int(m.group(1)), key) for key in conv
                          if (m := re.fullmatch(r"session_(\d+)", key)))
        for number, key in sessions:
            when = session_time(conv[f"session_{number}_date_time"])
            for turn in conv[key]:
                speaker = turn["speaker"]
                other = b if speaker == a else a
                text = turn["text"]
                if turn.get("blip_caption"):
                    text += f" [shares a photo: {turn['blip_caption']}]"
                known.add(turn["dia_id"])
                events.append({"type": "say", "actor": speaker, "target": other, "nearby": [other], "text": text[:2000],
                               "time": when.isoformat(), "metadata": {"dia_id": turn["dia_id"]}})
        for start in tqdm(range(0, len(events), 500), desc=f"ingest {sample.get('sample_id', '')}", unit="batch"):
            response = api.post(f"/api/worlds/{world.pk}/events/", {"events": events[start:start + 500]}, format="json")
            assert response.status_code == 201, response.content
        redis_client().delete("celery")  # this bench embeds in-process below
        for agent in Agent.objects.filter(world=world):
            while agent_upkeep.agent_memories_embed(agent_id=agent.pk):
                pass
        questions = []
        for qa in sample["qa"]:
            evidence = normalise_evidence(qa.get("evidence", [])) & known
            if qa.get("category") in CATEGORIES and evidence:
                questions.append((qa, evidence))
        ingested.append((world, api, a, questions))

    def ask(label):
        """Every question through the recall API; per-k and per-category recall, and latencies."""
        hits = {k: [] for k in KS}
        by_category = {c: {k: [] for k in KS} for c in CATEGORIES}
        latencies = []
        for world, api, asker, questions in ingested:
            for qa, evidence in tqdm(questions, desc=f"{label}: {world.name}", unit="q"):
                started = time.perf_counter()
                response = api.post(f"/api/worlds/{world.pk}/agents/{asker}/recall/",
                                    {"query": qa["question"], "limit": max(KS), "cooldown_seconds": 0,
                                     "since": "1900-01-01T00:00:00Z", "token_budget": 100_000}, format="json")
                latencies.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200, response.content
                ids = [m["id"] for m in response.json()["memories"]]
                dia = dict(AgentMemory.objects.filter(pk__in=ids).values_list("pk", "metadata__dia_id"))
                ranked = [dia.get(i) for i in ids]
                for k in KS:
                    found = len(evidence & set(ranked[:k])) / len(evidence)
                    hits[k].append(found)
                    by_category[qa["category"]][k].append(found)
        return hits, by_category, latencies

    base_conf = dict(settings.AGENT_RECALL)
    hits, by_category, latencies = ask("recall")
    ablations = []
    if args.ablation:
        for label, overrides in ABLATIONS:
            settings.AGENT_RECALL = {**base_conf, **overrides}
            ablation_hits, _, _ = ask(label)
            ablations.append((label, ablation_hits))
        settings.AGENT_RECALL = base_conf

    def pct(values):
        return round(100 * sum(values) / len(values), 1) if values else float("nan")

    result = {"n": len(hits[5]), **{f"R@{k}": pct(hits[k]) for k in KS}}
    latencies.sort()
    p50, p95 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.95)]
    rows = [[f"{c} {name}", len(by_category[c][5]), *[pct(by_category[c][k]) for k in KS]]
            for c, name in CATEGORIES.items()]
    rows.append(["all (1-4)", result["n"], *[result[f"R@{k}"] for k in KS]])
    print_table(f"LoCoMo evidence recall through the recall API ({len(samples)} conversations, local embedder)",
                ["category", "questions", "R@5", "R@10", "R@25"], rows)
    print(f"Recall API latency (in-process, query embedding included): p50 {p50:.1f} ms, p95 {p95:.1f} ms")
    if ablations:
        print_table("What each part of the ranking adds (the same questions, one part changed)",
                    ["ranking", "R@5", "R@10", "R@25"],
                    [["as configured", *[result[f"R@{k}"] for k in KS]]]
                    + [[label, *[pct(h[k]) for k in KS]] for label, h in ablations])
    print("Reference points (same local model over raw turns, from the issue): cosine 41.4/50.6/63.7, "
          "BM25 43.6/50.9/60.0, RRF 49.0/58.4/70.5; DRAGON (LoCoMo paper) R@10 66.2; target R@10 >= 72, R@5 >= 62.")

    def plot(path):
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for c, name in CATEGORIES.items():
            ax.plot(KS, [pct(by_category[c][k]) for k in KS], "o-", label=name)
        ax.plot(KS, [result[f"R@{k}"] for k in KS], "k--", label="all")
        ax.axhline(72, color="red", linestyle=":", label="target R@10")
        ax.set_xlabel("k")
        ax.set_ylabel("evidence recall, %")
        ax.set_title("LoCoMo Recall@k")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=120)

    save("locomo", [result, {"by_category": {CATEGORIES[c]: {f"R@{k}": pct(v[k]) for k in KS}
                                             for c, v in by_category.items()},
                             "latency_ms": {"p50": round(p50, 2), "p95": round(p95, 2)},
                             "ablations": {label: {f"R@{k}": pct(h[k]) for k in KS} for label, h in ablations}}],
         plot)
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
