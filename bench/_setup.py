"""Shared bootstrap for bench scripts: Django on its own embedded Postgres and
Redis under .data/bench (or DATABASE_URL / REDIS_URL), migrated, and helpers
to print a table and save results under bench/results/."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(os.environ.get("BENCH_RESULTS") or ROOT / "bench" / "results")  # the smoke tests write elsewhere


def django_setup() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DATA_DIR", str(ROOT / ".data" / "bench"))
    # The bench's own Postgres holds its hot indexes in memory, as a database server would be sized
    # (Postgres's default is 128 MB; docs/agent-memory.md).
    os.environ.setdefault("EMBEDDED_PG_SHARED_BUFFERS", "4GB")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    # a bench loads banks of thousands of rows in one statement: the web's 5 s statement deadline
    # (DB_QUERY_TIMEOUT) is for a player's request, not for a bulk load on a busy machine
    os.environ.setdefault("DB_QUERY_TIMEOUT", "120")
    # the site a bench starts plays its own fake model: the local demo model would only take the cores
    # (bench/local_model.py measures that one)
    os.environ.setdefault("LOCAL_MODEL", "off")
    if not sys.stderr.isatty():  # progress bars only on a terminal (tqdm reads TQDM_* overrides)
        os.environ.setdefault("TQDM_DISABLE", "1")
    # Benches measure the engine, not the abuse limits: a bench may ingest or play far past them.
    for name in (
        "TURNS_PER_MINUTE",
        "MODEL_CALLS_PER_MINUTE",
        "WORLD_EVENTS_PER_MINUTE",
        "IMPORTS_PER_HOUR",
        "SIGNUPS_PER_HOUR",
        "WRITES_PER_MINUTE",
        "FILE_IMPORTS_PER_HOUR",
        "SCENARIO_PLAYS_PER_HOUR",
        "SHARES_PER_HOUR",
        "RECALLS_PER_MINUTE",
    ):
        os.environ.setdefault(name, "0")
    from config.embedded import one_machine_environment

    one_machine_environment()  # the bench's own embedded servers, unless DATABASE_URL / REDIS_URL name others
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


async def clock_bar(label: str, seconds: float, counts) -> None:
    """A progress bar over a timed phase's seconds, showing ``counts()`` (a dict) as it goes; cancel
    it to close it early. tqdm: off when not on a terminal."""
    import asyncio
    import time

    from tqdm import tqdm

    began = time.monotonic()
    with tqdm(total=round(seconds), desc=label, leave=False, bar_format="{desc}: {bar} {n}/{total} s{postfix}") as bar:
        try:
            while (done := min(seconds, time.monotonic() - began)) < seconds:
                bar.n = round(done)
                bar.set_postfix(counts(), refresh=True)
                await asyncio.sleep(1.0)
        except asyncio.CancelledError:
            pass
        bar.n = round(min(seconds, time.monotonic() - began))
        bar.set_postfix(counts(), refresh=True)


def percentile(values: list[float], p: float) -> float:
    import numpy as np

    return float(np.percentile(values, p)) if values else float("nan")


def save(name: str, rows: list[dict], plot=None) -> None:
    """Write rows as JSON (and a PNG if ``plot(path)`` is given) under bench/results/."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(rows, indent=2))
    if plot:
        import matplotlib

        matplotlib.use("Agg")
        plot(RESULTS / f"{name}.png")


def print_table(title: str, columns: list[str], rows: list[list]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*[str(x) for x in row])
    Console(width=140).print(table)
