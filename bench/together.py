"""Stories played together, on `make run`'s own server (`manage.py runsite`) and the bench's fake
streaming model (bench/_stream_model.py): --stories adventures of --players players each (the owner
and members playing characters), every player's page following its story live
(GET .../live/, server-sent events), each player playing a turn, thinking (exponential, mean
--think seconds) and playing again in free mode, so turns of one story collide and wait their place
in line. Then the same number of players each alone in a story of their own, as bench/evening.py
plays them, for the comparison.

It prints, for the together run and the alone run: turns/s served, errors, first token beyond the
model's own for the player who acted (p50 / p95) and for the members watching (their live stream's
first token of that turn, p50 / p95), actions lost, doubled and out of order (each story's stored
player nodes against the turns answered: must be 0), model calls per turn (must be 1), and CPU per
served turn by process; a plot of first-token overhead, and a final JSON line.

    .venv/bin/python bench/together.py [--stories 250] [--players 4] [--duration 90] [--think 30]
        [--model-seconds 10] [--first-token 0.5] [--drain-timeout 420] [--smoke]

Before each run it waits (up to --drain-timeout) for the memory work already queued to be done: the
players' setup and an earlier run leave passes behind, and a worker catching up on them competes with
the run it would be counted in (a run that began with a backlog read 17-40 ms a turn of worker CPU).

Target (issue #48, a 2-core machine): the watchers' and the actors' p95 within 1.3x of a player
alone at the same turns per second, 0 lost or reordered."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import time

from _setup import clock_bar, django_setup, percentile, print_table, save
from _under_way import give_history
from concurrency import _free_port, _players, _wait_live
from evening import (
    BENCH_PLAYERS,
    SITE_GROUPS,
    Sampler,
    _ahead,
    _counts,
    _drain,
    _model,
    _site,
    _turn,
    forget_players,
    mid_evening,
)

WAITED_S = 0.3  # a turn whose answer's head came later than this waited its place in line
PAGES_OPEN_S = 120.0  # the longest the pages are given to open before the players start
FOLLOW_AFTER_S = 1.0  # the pages follow this long after the last reply ends (its pieces reach them within ms)
TEXTS = ["look around", "open the door", "listen", "follow the road", "ask about the ford", "wait"]


def _forget_earlier_runs() -> int:
    """This bench's players of earlier runs, with their stories, deleted (evening.forget_players)."""
    return forget_players(BENCH_PLAYERS)


def _together(count: int, size: int, fake_url: str) -> list[dict]:
    """``count`` stories of ``size`` players: the owner (a player of _players) and size-1 members,
    each with a character card of the story; every player's (token, user id)."""
    from rest_framework.authtoken.models import Token

    from stories.models import Membership, StoryCard

    owners = _players(count, fake_url, prefix="bench-together-")
    guests = _players(count * (size - 1), fake_url, prefix="bench-guest-")  # their own stories stay idle
    tokens = {t.key: t.user_id for t in Token.objects.filter(key__in=[t for t, _ in owners + guests])}
    stories = []
    for n, (owner_token, aid) in enumerate(owners):
        seats = [(owner_token, tokens[owner_token])]
        for k, (token, _) in enumerate(guests[n * (size - 1) : (n + 1) * (size - 1)]):
            card = StoryCard.objects.create(
                adventure_id=aid, type="character", name=f"Guest{k}", keys=[f"Guest{k}"], in_cast=True
            )
            Membership.objects.create(adventure_id=aid, user_id=tokens[token], role="player", character=card)
            seats.append((token, tokens[token]))
        stories.append({"adventure_id": aid, "seats": seats})
    give_history([s["adventure_id"] for s in stories], seed=count)  # stories under way, their characters' too
    return stories


async def _follow(
    port: int, token: str, adventure_id: int, seen: dict, stop_at: float, refused: list, opened: list
) -> None:
    """A member's page on the story's live stream: the moment each turn's first reply piece comes. A
    stream the site refuses (not a 200) is opened again after a few seconds, as the play page does."""
    while time.monotonic() < stop_at:
        status = await _follow_once(port, token, adventure_id, seen, stop_at, opened)
        if status == 200:
            return
        refused.append(status)
        await asyncio.sleep(3 + random.random() * 2)


async def _follow_once(port: int, token: str, adventure_id: int, seen: dict, stop_at: float, opened: list):
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as exc:
        return exc.__class__.__name__
    writer.write(
        (
            f"GET /api/adventures/{adventure_id}/live/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Token {token}\r\nAccept: text/event-stream\r\n\r\n"
        ).encode()
    )
    current, event, buffered = None, "", b""
    try:
        status_line = await asyncio.wait_for(reader.readline(), 60)
        parts = status_line.split()
        status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else "no answer"
        if status != 200:
            return status
        opened.append(adventure_id)
        # the page's reading costs what a browser's would on another machine: a read takes what came, the
        # events in it are found by their names, and only a turn's data is parsed (a line at a time, this
        # bench's 1,000 pages took a quarter of a core from the site they measure)
        while time.monotonic() < stop_at:
            chunk = await asyncio.wait_for(reader.read(65536), max(0.1, stop_at - time.monotonic()))
            if not chunk:
                return f"ended after {event or 'nothing'}"  # the page follows again
            now = time.monotonic()
            buffered += chunk
            complete = buffered.rfind(b"\n\n")
            if complete < 0:
                continue
            events, buffered = buffered[: complete + 2], buffered[complete + 2 :]
            at = events.find(b"event: ")
            while at >= 0:
                end = events.find(b"\n", at)
                event = events[at + 7 : end].decode()
                if event == "turn":
                    data = events.find(b"data: ", end)
                    actions = json.loads(events[data + 6 : events.find(b"\n", data)])["actions"]
                    current = actions[0]["text"] if actions else None
                elif event == "token" and current is not None:
                    seen.setdefault(current, []).append(now)
                    current = None  # the first piece of this turn only
                at = events.find(b"event: ", end)
    except asyncio.TimeoutError:
        return 200  # followed to the end
    except (OSError, ValueError) as exc:
        return exc.__class__.__name__
    finally:
        writer.close()
    return 200


async def _play(
    port: int,
    stories: list[dict],
    *,
    duration: float,
    think: float,
    seed: int,
    live: bool,
    measure_from,
    model_seconds: float | None,
):
    """The pages open first (players have their story's page open before they play: 1,000 opening in
    one instant is not an evening's load), then ``measure_from()`` and the players' turns."""
    rng = random.Random(seed)
    results, watched, numbers, refused, opened, in_flight = [], {}, iter(range(10**9)), [], [], {}
    pages = [(token, s["adventure_id"]) for s in stories for token, _ in s["seats"]] if live else []
    followers = [
        asyncio.create_task(_follow(port, token, aid, watched, time.monotonic() + duration + 600, refused, opened))
        for token, aid in pages
    ]
    opening_ends = time.monotonic() + PAGES_OPEN_S
    bar = asyncio.create_task(clock_bar("pages opening", PAGES_OPEN_S, lambda: {"open": len(opened)}))
    while len(opened) < len(pages) and time.monotonic() < opening_ends:
        await asyncio.sleep(0.2)
    bar.cancel()
    measure_from()
    stop_at = time.monotonic() + duration

    bar = asyncio.create_task(clock_bar("together" if live else "alone", duration, lambda: _counts(results)))

    async def player(token: str, aid: int, me: int):
        if model_seconds is not None:  # as evening.py's players: mid-evening (None: the first turn at once)
            await asyncio.sleep(mid_evening(rng, think, model_seconds))
        while time.monotonic() < stop_at:
            text = f"{rng.choice(TEXTS)} #{next(numbers)}"  # one text per turn: the watchers' events name it
            busy = in_flight.get(aid, 0) > 0  # another player's turn of this story was on its way
            in_flight[aid] = in_flight.get(aid, 0) + 1
            try:
                result = await _turn(port, token, aid, text)
            finally:
                in_flight[aid] -= 1
            result.update(text=text, adventure_id=aid, user_id=me, story_busy=busy)
            results.append(result)
            wait = (result["retry_after"] or 1) if result["status"] == 503 else rng.expovariate(1.0 / think)
            await asyncio.sleep(max(0.0, min(wait, stop_at - time.monotonic())))

    players = [asyncio.create_task(player(token, s["adventure_id"], uid)) for s in stories for token, uid in s["seats"]]
    await asyncio.gather(*players)  # a player's turn ends with its reply's end: every reply is written now
    bar.cancel()
    await asyncio.sleep(FOLLOW_AFTER_S)  # the pages' last pieces on their way
    for page in followers:
        page.cancel()
    await asyncio.gather(*followers, return_exceptions=True)
    return results, watched, refused


def _turns_alone_each(think: float, model_seconds: float, duration: float, seed: int, players: int = 20_000) -> float:
    """The turns a player alone starts in ``duration`` as ``_play``'s players do (none refused, none in
    line): the mean over many simulated players."""
    rng, started = random.Random(seed), 0
    for _ in range(players):
        at = mid_evening(rng, think, model_seconds)
        while at < duration:
            started += 1
            at += model_seconds + rng.expovariate(1.0 / think)
    return max(started / players, 1e-9)


def _order_check(stories: list[dict], results: list[dict]) -> dict:
    """Each story's stored player nodes against the turns answered: lost, doubled, out of order."""
    from stories.models import Action

    lost = doubled = reordered = 0
    for s in stories:
        answered = sorted(
            (r for r in results if r["adventure_id"] == s["adventure_id"] and r["status"] == 201),
            key=lambda r: r["began"],
        )
        sent = {r["text"] for r in results if r["adventure_id"] == s["adventure_id"]}
        stored = [  # the players' nodes of this run (the story's history, bench/_under_way.py, is not theirs)
            text
            for text in Action.objects.filter(adventure_id=s["adventure_id"], kind="do", live=True)
            .order_by("depth")
            .values_list("text", flat=True)
            if text in sent
        ]
        counts: dict[str, int] = {}
        for text in stored:
            counts[text] = counts.get(text, 0) + 1
        lost += sum(1 for r in answered if r["text"] not in counts)
        doubled += sum(c - 1 for c in counts.values() if c > 1)
        position = {text: i for i, text in enumerate(stored)}
        placed = [position[r["text"]] for r in answered if r["text"] in position]
        began = [r["began"] for r in answered if r["text"] in position]
        reordered += sum(  # a turn sent clearly (50 ms) after another stored before it
            1
            for i in range(len(placed))
            for j in range(i + 1, len(placed))
            if placed[j] < placed[i] and began[j] - began[i] > 0.05
        )
    return {"lost": lost, "doubled": doubled, "out_of_order": reordered}


def _row(label, results, watched, cpu, args, model_calls) -> dict:
    served = [r for r in results if r["status"] == 201]
    errors = [r for r in results if r["status"] not in (201, 503)]
    actor = [(r["first"] - args.first_token) * 1000 for r in served if r["first"] is not None]
    # turns that found the story free (no other turn of it on its way when sent): a wait in line is the
    # story's own pace (another reply was being written, or stored), not the site's cost
    free = [(r["first"] - args.first_token) * 1000 for r in served if r["first"] is not None and not r["story_busy"]]
    # of which the answer's head (the site's first step: admission, access, the claim, the context)
    heads = [r["head"] * 1000 for r in served if r["first"] is not None and not r["story_busy"]]
    after = [
        (r["first"] - r["head"] - args.first_token) * 1000
        for r in served
        if r["first"] is not None and not r["story_busy"]
    ]
    # a watcher's first piece of a turn beyond the model's own, from the moment the actor sent it
    watchers = [(t - r["began"] - args.first_token) * 1000 for r in served for t in watched.get(r["text"], [])]
    # and behind the actor's own first piece (the relay through the live stream)
    behind = [
        (t - r["began"] - r["first"]) * 1000
        for r in served
        if r["first"] is not None
        for t in watched.get(r["text"], [])
    ]
    n = max(1, len(served))
    return {
        "run": label,
        **_head_phases([r for r in served if r["first"] is not None and not r["story_busy"]]),
        "turns": len(results),
        "served": len(served),
        "served_per_s": round(len(served) / args.duration, 2),
        "errors": len(errors),
        "refused": sum(1 for r in results if r["status"] == 503),
        "actor_first_token_overhead_ms": {p: round(percentile(actor, p), 1) for p in (50, 95)} if actor else {},
        "watcher_first_token_overhead_ms": {p: round(percentile(watchers, p), 1) for p in (50, 95)} if watchers else {},
        "watcher_samples": len(watchers),
        "actor_free_first_token_overhead_ms": {p: round(percentile(free, p), 1) for p in (50, 95)} if free else {},
        "actor_free_head_ms": {p: round(percentile(heads, p), 1) for p in (50, 95)} if heads else {},
        # and from the head to the first piece (the model call's start and the first piece's way back)
        "actor_free_after_head_ms": {p: round(percentile(after, p), 1) for p in (50, 95)} if after else {},
        "watcher_behind_actor_ms": {p: round(percentile(behind, p), 1) for p in (50, 95)} if behind else {},
        "waited_in_line": sum(1 for r in served if r["head"] >= WAITED_S),
        "sent_while_story_busy": sum(1 for r in served if r["story_busy"]),
        "model_calls_per_turn": round(model_calls / n, 3) if model_calls is not None else None,
        "cpu_ms_per_turn": {k: round(v * 1000 / n, 1) for k, v in cpu.items()},
        "site_cpu_ms_per_turn": round(sum(v for k, v in cpu.items() if k in SITE_GROUPS) * 1000 / n, 1),
    }


def _head_phases(turns: list[dict]) -> dict:
    """Where the free turns' heads went (the site's Server-Timing phases; "outside": the head the client saw
    beyond the site's own total: the request's parse, the loop, the answer's write): p50 and p95 of each
    phase over all of them, and the mean of each over the slowest twentieth."""
    timed = [r for r in turns if r.get("timing")]
    if not timed:
        return {}
    for r in timed:
        r["timing"]["outside"] = max(0.0, r["head"] * 1000 - r["timing"].get("total", 0.0))
    names = sorted({name for r in timed for name in r["timing"]})
    slowest = sorted(timed, key=lambda r: r["head"])[-max(1, len(timed) // 20) :]
    return {
        "free_head_phase_ms": {
            name: {p: round(percentile([r["timing"].get(name, 0.0) for r in timed], p), 1) for p in (50, 95)}
            for name in names
        },
        "free_head_slowest_5pct_phase_mean_ms": {
            name: round(sum(r["timing"].get(name, 0.0) for r in slowest) / len(slowest), 1) for name in names
        },
    }


def _model_calls(stories: list[dict]) -> int:
    """The turns' model calls the site logged for these stories (the memory pass's are its own)."""
    from stories.models import ProviderCall

    ids = [s["adventure_id"] for s in stories]
    return ProviderCall.objects.filter(adventure_id__in=ids, purpose=ProviderCall.Purpose.TURN).count()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stories", type=int, default=250)
    parser.add_argument("--players", type=int, default=4, help="players per story, the owner included")
    parser.add_argument("--duration", type=float, default=90.0)
    parser.add_argument("--think", type=float, default=30.0)
    parser.add_argument("--model-seconds", type=float, default=10.0)
    parser.add_argument("--first-token", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=48)
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=420.0,  # the together run leaves ~130-180 s of memory work (4 characters a story); 180 ran out
        help="seconds to wait before each run for the memory work already queued (the players' setup, an "
        "earlier run's turns) to be done: a worker catching up competes with the run it would be counted in",
    )
    parser.add_argument(
        "--together-only", action="store_true", help="no run of players alone (to profile the together run)"
    )
    parser.add_argument("--smoke", action="store_true", help="seconds, tiny sizes: the test suite runs this")
    args = parser.parse_args()
    if args.smoke:
        args.stories, args.players, args.duration, args.think = 2, 3, 2.0, 0.4
        args.model_seconds, args.first_token, args.drain_timeout = 1.0, 0.1, 0.0  # a smoke checks it runs
        os.environ.setdefault("WEB_CONCURRENCY", "1")
    django_setup()
    import psutil

    model, fake_url = _model(args)
    port = _free_port()
    site = _site(port, {"WEB_CONCURRENCY": os.environ.get("WEB_CONCURRENCY", "2"), "MCP_PORT": str(_free_port())})
    _ahead()
    rows, curves = [], {}
    try:
        _wait_live(f"http://127.0.0.1:{port}", site, timeout=180)
        if not args.smoke:
            print(f"forgot {_forget_earlier_runs()} players of earlier runs", flush=True)
            # every web process warm before anything is timed: the first run (together) met each process's
            # first turn (the token encoding's load, ~110 ms, was the slowest twentieth's largest phase
            # at light load) and the alone run after it did not
            warm = _together(4, args.players, fake_url)
            asyncio.run(
                _play(
                    port,
                    warm,
                    duration=0.5,
                    think=0.1,
                    seed=args.seed,
                    live=True,
                    measure_from=lambda: None,
                    model_seconds=None,
                )
            )
        together = _together(args.stories, args.players, fake_url)
        # the smoke checks the bench runs: the alone run is evening.py's, measured there too
        alone = not (args.smoke or args.together_only)
        for label, live in (("together", True),) + ((("alone", False),) if alone else ()):
            if live:
                stories = together
            else:  # players alone, as many as play the together run's served turns per second: how many
                # turns one player alone starts in the window, by the players' own clock (a first turn as
                # found mid-evening, then a reply and a think each): simulated, not the steady rate of one
                # turn per think + model seconds (with a first turn after a think that count offered ~1.4x)
                each = _turns_alone_each(args.think, args.model_seconds, args.duration, args.seed)
                count = max(1, round(rows[0]["served_per_s"] * args.duration / each))
                stories = [
                    {"adventure_id": aid, "seats": [(token, 0)]}
                    for token, aid in _players(count, fake_url, prefix="bench-alone-")
                ]
                give_history([s["adventure_id"] for s in stories], seed=count)
            # what is behind of every story of this bench (the together run's too, before the alone run)
            backlog, drained_s = _drain(args.drain_timeout, [s["adventure_id"] for s in together + stories])
            sampler = Sampler(site, {"bench model": [psutil.Process(model.pid)], "bench players": [psutil.Process()]})
            before, calls_before = {}, _model_calls(stories)
            results, watched, refused = asyncio.run(
                _play(
                    port,
                    stories,
                    duration=args.duration,
                    think=args.think,
                    seed=args.seed,
                    live=live,
                    measure_from=lambda: before.update(sampler.totals()),
                    model_seconds=args.model_seconds,
                )
            )
            after, calls_after = sampler.totals(), _model_calls(stories)
            cpu = {k: max(0.0, after.get(k, 0.0) - before.get(k, 0.0)) for k in after}
            calls = calls_after - calls_before
            row = _row(label, results, watched, cpu, args, calls)
            row["players"] = sum(len(st["seats"]) for st in stories)
            row["live_refused"] = {str(k): refused.count(k) for k in set(refused)}
            row["memory_backlog_before"] = {"adventures": backlog, "drained_s": drained_s}  # None: not within
            row.update(_order_check(stories, results) if live else {"lost": 0, "doubled": 0, "out_of_order": 0})
            rows.append(row)
            curves[label] = sorted((r["first"] - args.first_token) * 1000 for r in results if r["first"] is not None)
            if live:
                curves["watchers"] = sorted(
                    (t - r["began"] - args.first_token) * 1000
                    for r in results
                    if r["status"] == 201
                    for t in watched.get(r["text"], [])
                )
    finally:
        os.killpg(site.pid, signal.SIGTERM)
        try:
            site.wait(40)
        except subprocess.TimeoutExpired:
            os.killpg(site.pid, signal.SIGKILL)
        model.stdin.close()
        model.wait(10)

    print_table(
        f"{args.stories} stories of {args.players} players, think {args.think:g} s, model {args.model_seconds:g} s",
        [
            "run",
            "served/s",
            "errors",
            "waited in line",
            "actor first token + p50/p95 ms (story free)",
            "watchers p50/p95 ms (behind the actor)",
            "lost/doubled/reordered",
            "model calls/turn",
            "CPU ms/turn",
        ],
        [
            [
                r["run"],
                r["served_per_s"],
                r["errors"],
                r["waited_in_line"],
                "/".join(str(r["actor_first_token_overhead_ms"].get(p, "-")) for p in (50, 95))
                + " ("
                + "/".join(str(r["actor_free_first_token_overhead_ms"].get(p, "-")) for p in (50, 95))
                + ")",
                "/".join(str(r["watcher_first_token_overhead_ms"].get(p, "-")) for p in (50, 95))
                + " ("
                + "/".join(str(r["watcher_behind_actor_ms"].get(p, "-")) for p in (50, 95))
                + ")",
                f"{r['lost']}/{r['doubled']}/{r['out_of_order']}",
                r["model_calls_per_turn"],
                r["site_cpu_ms_per_turn"],
            ]
            for r in rows
        ],
    )
    alone_p95 = rows[1]["actor_first_token_overhead_ms"].get(95) if len(rows) > 1 else None
    ratios = {
        who: round(rows[0][key].get(95) / alone_p95, 2) if alone_p95 and rows[0][key].get(95) else None
        for who, key in (
            ("actor", "actor_first_token_overhead_ms"),
            ("actor_story_free", "actor_free_first_token_overhead_ms"),
            ("watchers", "watcher_first_token_overhead_ms"),
        )
    }
    print(
        f"p95 against a player alone: actor {ratios['actor']}x ({ratios['actor_story_free']}x when the story was "
        f"free), watchers {ratios['watchers']}x (target <= 1.3x)"
    )

    def plot(path):
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 4))
        for name, values in curves.items():
            if values:
                ax.plot(values, [i / len(values) for i in range(len(values))], label=name)
        ax.set_xlabel("first token beyond the model's own (ms)")
        ax.set_ylabel("share of turns")
        ax.set_title("Played together against alone")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path)

    result = {
        "bench": "together",
        "smoke": args.smoke,
        "stories": args.stories,
        "players": args.players,
        "rows": rows,
        "p95_ratio_to_alone": ratios,
    }
    save("together", result, plot=plot)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
