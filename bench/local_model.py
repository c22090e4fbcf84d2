"""The local demo model's speed on this machine, as a player meets it through the site's SDK.

Serves the model `make run` starts (config.local_model: Gemma 3 270M Q4_K_M on llama.cpp, built
on its first run: this bench builds it too when it is missing, a few minutes) on loopback, and
plays story turns at it through the OpenAI SDK, streamed, as the site does: a story's first turn
(its whole prompt read), the next turn of the same story (the engine reuses the prompt's common
start) and a reply of ``--reply-tokens``. For prompts of several sizes it prints the first token's
time, the reading speed (prompt tokens/s) and the writing speed (tokens/s), with a plot and a
final JSON line.

  python bench/local_model.py             # the real model (builds it if needed)
  python bench/local_model.py --smoke     # the stand-in engine, seconds (the test suite runs this)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

from _setup import ROOT, print_table, save

sys.path.insert(0, str(ROOT))

STORY = (
    "The rain had not stopped for three days when Mara reached the inn at the crossroads. Its sign, a "
    "lantern painted on a cracked board, swung above a door that had been mended more than once. Inside, "
    "a fire burned low, and the innkeeper, a broad man with ink on his fingers, looked up from his ledger. "
)


def _prompt_messages(tokens_wanted: int, turn: int) -> list[dict]:
    """A story prompt of about ``tokens_wanted`` tokens (~1.3 tokens a word), as the site sends one:
    a system instruction, the story so far, the player's action."""
    words = STORY.split()
    story = " ".join(words[n % len(words)] for n in range(int(tokens_wanted / 1.3)))
    return [
        {
            "role": "system",
            "content": "You are the narrator of an interactive story. Continue it in the second person.",
        },
        {"role": "user", "content": f"{story}\n\n> You ask the innkeeper about the road north (turn {turn})."},
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, nargs="+", default=[300, 1000, 2500, 5000])
    parser.add_argument("--reply-tokens", type=int, default=150)
    parser.add_argument("--runs", type=int, default=3, help="turns measured per prompt size (a median is shown)")
    parser.add_argument("--threads", type=int, default=0, help="engine threads (0: every core)")
    parser.add_argument("--smoke", action="store_true", help="the stand-in engine, tiny sizes: the suite runs this")
    args = parser.parse_args()
    if args.smoke:
        args.prompts, args.reply_tokens, args.runs = [50, 100], 5, 1
    os.environ.setdefault("TQDM_DISABLE", "0")
    import openai
    from tqdm import tqdm

    from config import local_model, local_model_server

    data_dir = Path(os.environ.get("DATA_DIR") or ROOT / ".data" / "bench")
    context = 8192
    if args.smoke:
        engine = local_model_server.StandIn()
    else:
        engine = local_model_server.Llama(context, args.threads)
        began = time.monotonic()
        engine.prepare(data_dir)  # the first run's build, as `make run` does it
        built = time.monotonic() - began
        began = time.monotonic()
        engine.load(data_dir)
        print(f"engine ready: prepared in {built:.0f} s, loaded in {time.monotonic() - began:.1f} s")
    server = local_model_server.Server(engine, key="sk-bench", context=context)
    server.ready.set()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), server.handler())
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1", api_key="sk-bench", max_retries=0)

    def turn(messages) -> dict:
        began, first, pieces, usage = time.monotonic(), None, [], None
        stream = client.chat.completions.create(
            model=local_model.MODEL_ID,
            messages=messages,
            max_tokens=args.reply_tokens,
            temperature=0.6,
            stream=True,
            stream_options={"include_usage": True},
        )
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            if chunk.choices and chunk.choices[0].delta.content:
                first = first if first is not None else time.monotonic() - began
                pieces.append(chunk.choices[0].delta.content)
        total = time.monotonic() - began
        completion = usage.completion_tokens if usage else len(pieces)
        writing = total - (first or total)
        return {
            "prompt_tokens": usage.prompt_tokens if usage else 0,
            "first_token_s": first or total,
            "tokens": completion,
            "tokens_per_s": (completion - 1) / writing if writing > 0 and completion > 1 else float("nan"),
            "text": "".join(pieces),
        }

    def median(values):
        values = sorted(v for v in values if v == v)
        return values[len(values) // 2] if values else float("nan")

    rows, sample = [], ""
    for size in tqdm(args.prompts, desc="prompt sizes", unit="size"):
        firsts, nexts, speeds, prompt_tokens = [], [], [], 0
        for run in range(args.runs):
            # a new story (nothing of its prompt read before), then its next turn (the start reused)
            story = _prompt_messages(size, 0)
            story[0]["content"] += f" (story {size}-{run})"  # no two stories share a start
            cold = turn(story)
            story[1]["content"] += f"\n\n{cold['text']}\n\n> You thank him and go to the stables."
            warm = turn(story)
            firsts.append(cold["first_token_s"])
            nexts.append(warm["first_token_s"])
            speeds += [cold["tokens_per_s"], warm["tokens_per_s"]]
            prompt_tokens = cold["prompt_tokens"]
            sample = sample or cold["text"]
        first = median(firsts)
        rows.append(
            {
                "prompt_tokens": prompt_tokens,
                "first_token_s": round(first, 2),
                "reading_tokens_per_s": round(prompt_tokens / first, 0) if first > 0 else None,
                "next_turn_first_token_s": round(median(nexts), 2),
                "writing_tokens_per_s": round(median(speeds), 1),
            }
        )
    httpd.shutdown()
    print_table(
        f"Local demo model ({'stand-in' if args.smoke else local_model.MODEL_ID}), {args.reply_tokens}-token replies, "
        f"median of {args.runs}",
        ["prompt tokens", "first token s", "reading tok/s", "next turn: first token s", "writing tok/s"],
        [
            [
                r["prompt_tokens"],
                r["first_token_s"],
                r["reading_tokens_per_s"],
                r["next_turn_first_token_s"],
                r["writing_tokens_per_s"],
            ]
            for r in rows
        ],
    )
    print(f"a reply, as written: {sample[:300]!r}")

    def plot(path):
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        sizes = [r["prompt_tokens"] for r in rows]
        ax.plot(sizes, [r["first_token_s"] for r in rows], "o-", label="first token, a story's first turn")
        ax.plot(sizes, [r["next_turn_first_token_s"] for r in rows], "o--", label="first token, its next turn")
        ax.set_xlabel("prompt tokens")
        ax.set_ylabel("seconds")
        ax.set_title(f"Local demo model: writes ~{median([r['writing_tokens_per_s'] for r in rows]):.0f} tokens/s")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path)

    result = {"engine": "stand-in" if args.smoke else local_model.MODEL_ID, "rows": rows}
    save("local_model" + ("-smoke" if args.smoke else ""), [result], plot)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
