"""The local demo model's state, as the site reads it: `make run` (runsite) starts the model as a
supervised part when no DEMO_ENDPOINT_URL is set (LOCAL_MODEL=auto), so a newcomer's first story
gets real replies; config.local_model_server is its process.

The process keeps its state in ``<DATA_DIR>/local-model/status.json`` (``status()``):
``preparing`` (installing and building), ``loading``, ``ready`` or ``failed``, with its pid, so the
pages say when the demo model will join (``describe``) and a turn sent before is refused with that
sentence instead of a connection error.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

MODEL_ID = "gemma-3-270m"  # the name the site asks for (DEMO_MODELS)


def state_dir(data_dir: Path) -> Path:
    return Path(data_dir) / "local-model"


def write_status(data_dir: Path, state: str, detail: str = "", **extra) -> None:
    folder = state_dir(data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"state": state, "detail": detail, "since": time.time(), "pid": os.getpid(), **extra}
    tmp = folder / f"status.json.{os.getpid()}"
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, folder / "status.json")


def status(data_dir: Path) -> dict:
    """The local model's state as its process last wrote it: ``state`` is preparing, loading,
    ready or failed, or ``starting`` when nothing is written yet or the process that wrote it
    is gone (the supervisor is starting it again)."""
    try:
        doc = json.loads((state_dir(data_dir) / "status.json").read_text())
    except (OSError, ValueError):
        return {"state": "starting", "detail": "", "since": None}
    if not isinstance(doc, dict) or not _alive(doc.get("pid")):
        return {"state": "starting", "detail": "", "since": None}
    return doc


def _alive(pid) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def describe(doc: dict) -> str:
    """One sentence for a player: where the demo model is on its way to playing."""
    state = doc.get("state")
    since = doc.get("since")
    waited = f" (for {max(1, round((time.time() - since) / 60))} min so far)" if since else ""
    if state == "ready":
        return "The site's demo model is ready."
    if state == "preparing":
        return (
            "The site's demo model is being built for this machine, once: this takes about 5 minutes on "
            f"two cores{waited}. You can start a story now; your turns play when it is ready."
        )
    if state == "loading":
        return "The site's demo model is loading; it plays in a few seconds."
    if state == "failed":
        return (
            "The site's demo model could not start"
            + (f" ({doc.get('detail')})" if doc.get("detail") else "")
            + ". Set up your own model in Settings to play."
        )
    return "The site's demo model is starting; it plays in a moment."
