"""The map of the house (docs/architecture.md), checked: the floors, no import cycle, no module that
holds five rooms, every module named on the map, and every setting documented."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROOMS = ("config", "stories", "memory", "play", "workers")
# The floors, the ground first: a module imports only from its own floor and those below it,
# at module or function level.
FLOORS = {"config": 1, "stories": 2, "memory": 3, "play": 4, "workers": 5}
MODULE_LINES_MAX = 420  # "no module over ~400 lines"

# The story's use cases that reach into memory (stories.play) and the moderators' pages: the only
# story modules that may import memory. Every other story module is lower and never does (memory
# learns of tree changes through signals).
STORY_UPPER = ("play", "stories.admin")


def _modules() -> dict[str, Path]:
    found = {}
    for room in ROOMS:
        for path in (ROOT / room).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def _imports(path: Path, *, module_level_only: bool) -> set[str]:
    """Project modules imported by the file (``from a import b`` counts a.b when
    it is a module, else a). Imports under ``if TYPE_CHECKING`` are skipped."""
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in out if name.split(".")[0] in ROOMS}


def _resolve(names: set[str], modules: dict[str, Path]) -> set[str]:
    return {name for name in names if name in modules}


def test_nothing_outside_workers_and_config_imports_workers():
    modules = _modules()
    offenders = sorted(
        f"{name} imports {imported}"
        for name, path in modules.items()
        if name.split(".")[0] not in ("workers", "config")
        for imported in _imports(path, module_level_only=False)
        if imported.split(".")[0] == "workers"
    )
    assert offenders == [], "memory work is asked for through config.jobs, never by importing workers:\n" + "\n".join(
        offenders
    )


def test_the_floors_hold_no_import_runs_back_up():
    """config <- stories <- memory <- play <- workers: no module imports a higher floor, at module or
    function level (memory learns of tree changes through signals; the use case hands the prompt
    builder what memory knows as data)."""
    modules = _modules()
    offenders = sorted(
        f"{name} (floor {FLOORS[name.split('.')[0]]}) imports {imported}"
        for name, path in modules.items()
        for imported in _imports(path, module_level_only=False)
        if FLOORS[imported.split(".")[0]] > FLOORS[name.split(".")[0]]
    )
    assert offenders == [], "imports that run back up a floor:\n" + "\n".join(offenders)


def test_there_is_no_import_cycle():
    """Not even through an import inside a function (the error family once reached
    stories.providers that way, which imports the error family)."""
    modules = _modules()
    graph = {
        name: _resolve(_imports(path, module_level_only=False), modules) - {name} for name, path in modules.items()
    }
    cycles, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(stack[stack.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    assert cycles == [], "import cycles:\n" + "\n".join(cycles)


def test_config_is_the_ground_and_imports_no_app():
    """config is what every room stands on: the apps reach it (and provide what its wiring needs
    when they are ready: the login throttle, the heartbeats, the job senders), never the reverse."""
    modules = _modules()
    offenders = sorted(
        f"{name} imports {imported}"
        for name, path in modules.items()
        if name.split(".")[0] == "config"
        for imported in _imports(path, module_level_only=False)
        if imported.split(".")[0] != "config"
    )
    assert offenders == [], "config imports no app module:\n" + "\n".join(offenders)


def test_story_memory_and_agent_memory_share_the_ground_and_not_each_other():
    """memory.story and memory.agents stand on memory's shared modules (models, embedder,
    embeddings, vectors, sentences), never on each other."""
    modules = _modules()
    offenders = sorted(
        f"{name} imports {imported}"
        for name, path in modules.items()
        for own, other in (("memory.story", "memory.agents"), ("memory.agents", "memory.story"))
        if name.startswith(own)
        for imported in _imports(path, module_level_only=False)
        if imported.startswith(other)
    )
    assert offenders == [], "\n".join(offenders)


def test_no_module_holds_five_rooms():
    long = sorted(
        f"{name}: {len(path.read_text().splitlines())} lines"
        for name, path in _modules().items()
        if len(path.read_text().splitlines()) > MODULE_LINES_MAX
    )
    assert long == [], "split these by purpose:\n" + "\n".join(long)


def test_the_map_names_every_module():
    """docs/architecture.md names every module of the rooms (by its file name in its folder's line)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    missing = sorted(
        name
        for name, path in _modules().items()
        if path.name != "__init__.py" and "management" not in path.parts and path.name not in text
    )
    assert missing == [], "docs/architecture.md does not name:\n" + "\n".join(missing)


def test_every_setting_the_settings_read_is_documented():
    """Every environment variable config/settings.py (and what it calls) reads is in
    docs/configuration.md."""
    import re

    sources = [ROOT / "config" / name for name in ("settings.py", "embedded.py", "asgi.py", "web_protocol.py")]
    sources += [ROOT / "config" / "management" / "commands" / name for name in ("runsite.py", "ensure_admin.py")]
    read = set()
    for source in sources:
        text = source.read_text()
        read |= set(re.findall(r'env_(?:str|int|bool|list|float|choice)\(\s*"([A-Z][A-Z0-9_]+)"', text))
        read |= set(re.findall(r'os\.environ(?:\.get|\.setdefault)?\(\s*"([A-Z][A-Z0-9_]+)"', text))
        read |= set(re.findall(r'os\.environ\[\s*"([A-Z][A-Z0-9_]+)"\s*\]', text))
    assert len(read) >= 60, sorted(read)
    documented = (ROOT / "docs" / "configuration.md").read_text()
    missing = sorted(name for name in read if f"`{name}`" not in documented)
    assert missing == [], "docs/configuration.md does not document:\n" + "\n".join(missing)


def test_every_import_is_used_and_sorted():
    """ruff (ruff.toml: pyflakes and isort) over the whole project: an unused or misplaced import
    fails the build, not a review. `ruff check --fix .` sorts them."""
    import subprocess
    import sys

    found = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert found.returncode == 0, found.stdout + found.stderr


def test_every_file_is_formatted_as_ruff_formats_it():
    """ruff format (ruff.toml: 120 columns) over the whole project: a diff in layout fails the build,
    so a review reads changes, not spacing. `ruff format .` formats."""
    import subprocess
    import sys

    found = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert found.returncode == 0, found.stdout + found.stderr
