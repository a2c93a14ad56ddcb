"""The house's walls, read from the code's own imports (``ast``, nothing is executed).

Layer = folder (docs/architecture.md, "The layers"), bottom to top:

===========  ===================================================  ==========================================
layer        where                                                may import (besides its own folder)
===========  ===================================================  ==========================================
events       ``events/``                                          nothing of ours
domain       ``services/domain/``                                 events
runtime      ``services/runtime/``                                events, domain
a service    ``services/{submission,scheduling,placement,``       events, domain, runtime
             ``preemption,inventory,quota}/``
nodes        ``services/nodes/`` (the agent, ``backends/``)       events, domain, runtime
projections  ``projections/``                                     events, domain, runtime
front        ``services/front/`` but ``cli/`` (client, audit,     all of the above
             simulation, host, bench, Slurm face)
cli          ``services/front/cli/``                              anything; nothing imports it
===========  ===================================================  ==========================================

so services never import each other, projections never import a service, the plumbing imports no
service, node or front end, and the CLI is a front end that nothing imports. The CLI is also the only
code that imports click: a front library raises ``services/front/client/problems.py``'s errors and
returns what to print, and the CLI speaks click. No circle of imports
between files, and none between folders (``services/front/host/`` importing ``services/front/audit/``
while the audit imports the host is a circle of folders even when no two files import each other).
The pure code (the domain package and every ``core.py`` of a service or of the nodes) imports no I/O
or randomness (asyncio, nats, sqlite, sockets, processes, random, uuid, os) and reads no clock.

A folder under ``services/`` that is in no layer fails too: a new room is placed in a layer here, on
purpose.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOPS = ("events", "services", "projections")
SERVICES = ("submission", "scheduling", "placement", "preemption", "inventory", "quota")
DOMAIN = ("domain",)
MAY_IMPORT: Mapping[str, frozenset[str]] = {
    "events": frozenset(),
    "domain": frozenset({"events"}),
    "runtime": frozenset({"events", "domain"}),
    "service": frozenset({"events", "domain", "runtime"}),
    "nodes": frozenset({"events", "domain", "runtime"}),
    "projections": frozenset({"events", "domain", "runtime"}),
    "front": frozenset({"events", "domain", "runtime", "service", "nodes", "projections"}),
    "cli": frozenset({"events", "domain", "runtime", "service", "nodes", "projections", "front"}),
}
WHY = {
    "events": "events import nothing of ours",
    "domain": "the shared domain package is pure and imports only events",
    "runtime": "services/runtime/ is plumbing: it imports no service, node, projection or front end",
    "service": "a service imports only events, the domain package and the runtime, never another service",
    "nodes": "the nodes (agent and backends) import only events, the domain package and the runtime",
    "projections": "projections never import a service (shared logic lives in services/domain/)",
    "front": "nothing imports the CLI: it is click wiring; what it uses lives in services/front/<room>/",
}
IMPURE = frozenset({"asyncio", "nats", "aiosqlite", "sqlite3", "socket", "subprocess", "random", "uuid", "os",
                    "threading"})
CLI_ONLY = frozenset({"click"})  # imported by services/front/cli/ alone
CLOCK_CALLS = frozenset({("time", "time"), ("time", "monotonic"), ("time", "perf_counter"), ("datetime", "now"),
                         ("datetime", "utcnow"), ("uuid", "uuid4")})


def layer(module: str, domain: tuple[str, ...] = DOMAIN) -> tuple[str, str] | None:
    """(layer, room) of a module of ours; room tells two services apart. None: not ours."""
    parts = module.split(".")
    if parts[0] in ("events", "projections"):
        return parts[0], parts[0]
    if parts[0] != "services" or len(parts) < 2:
        return None
    room = parts[1]
    if room in SERVICES:
        return "service", room
    if room in domain:
        return "domain", room
    if room in ("runtime", "nodes"):
        return room, room
    if room == "front":
        return ("cli", "cli") if parts[2:3] == ["cli"] else ("front", "front")
    return "unplaced", room


def _modname(root: Path, path: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(root: Path) -> tuple[dict[str, Path], dict[str, set[tuple[str, int, bool]]], dict[str, ast.Module]]:
    files: dict[str, Path] = {}
    trees: dict[str, ast.Module] = {}
    for top in TOPS:
        for path in sorted((root / top).rglob("*.py")):
            mod = _modname(root, path)
            files[mod] = path
            trees[mod] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    edges: dict[str, set[tuple[str, int, bool]]] = {}
    for mod, tree in trees.items():
        package = mod if files[mod].name == "__init__.py" else mod.rpartition(".")[0]
        # imports under `if TYPE_CHECKING:` are for annotations: the walls hold for them too, and so
        # does the rule against circles (a circle in the annotations is one in the design)
        typing_only = {inner.lineno for node in ast.walk(tree) if isinstance(node, ast.If) and
                       _is_type_checking(node.test) for inner in ast.walk(node)
                       if isinstance(inner, (ast.Import, ast.ImportFrom))}
        out = edges.setdefault(mod, set())
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                targets = [f"{base}.{a.name}" for a in node.names]
            for target in targets:
                if target.split(".")[0] in (*TOPS, *IMPURE, *CLI_ONLY):
                    out.add((_resolve(target, files), node.lineno, node.lineno in typing_only))
    return files, edges, trees


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _resolve(target: str, files: Mapping[str, Path]) -> str:
    """A name imported from a module counts as that module."""
    while target not in files and "." in target:
        target = target.rpartition(".")[0]
    return target


def _pure(mod: str, path: Path, domain: tuple[str, ...]) -> bool:
    where = layer(mod, domain)
    return where is not None and (where[0] == "domain" or (where[0] in ("service", "nodes") and path.name == "core.py"))


def broken_walls(root: Path = ROOT, domain: tuple[str, ...] = DOMAIN) -> list[str]:
    """Every import that breaks a wall, as "module:line -> target (the rule)"; circles; impure pure code."""
    files, edges, trees = _imports(root)
    bad: list[str] = []
    for mod in sorted(edges):
        here = layer(mod, domain)
        if here is None:
            continue
        if here[0] == "unplaced":
            bad.append(f"{mod}: services/{here[1]}/ is in no layer (place it in tests/contract/test_walls.py)")
            continue
        for target, line, _ in sorted(edges[mod]):
            top = target.split(".")[0]
            if top in CLI_ONLY:
                if here[0] != "cli":
                    bad.append(f"{mod}:{line} -> {target} (only services/front/cli/ imports click: a library "
                               "raises services/front/client/problems.py's errors and returns what to print)")
                continue
            if top in IMPURE:
                if _pure(mod, files[mod], domain):
                    bad.append(f"{mod}:{line} -> {target} (pure code does no I/O and draws no random numbers)")
                continue
            there = layer(target, domain)
            if there is None or there[1] == here[1] or there[0] == "unplaced":
                continue
            if there[0] not in MAY_IMPORT[here[0]]:
                bad.append(f"{mod}:{line} -> {target} ({WHY[here[0]]})")
    for mod, tree in sorted(trees.items()):
        if not _pure(mod, files[mod], domain):
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and (node.func.value.id, node.func.attr) in CLOCK_CALLS):
                bad.append(f"{mod}:{node.lineno} calls {node.func.value.id}.{node.func.attr}() "
                           "(pure code reads no clock: 'now' is the triggering event's time)")
    bad += [f"circle: {c}" for c in circles(files, edges)]
    bad += [f"circle of folders: {c}" for c in folder_circles(files, edges)]
    return bad


def _loops(graph: Mapping[str, list[str]]) -> list[list[str]]:
    """The circles a depth-first walk of ``graph`` finds, each as its nodes with the first repeated last."""
    found: list[list[str]] = []
    seen: set[str] = set()

    def visit(u: str, path: list[str], on_path: set[str]) -> None:
        seen.add(u)
        path.append(u)
        on_path.add(u)
        for v in graph.get(u, ()):
            if v in on_path:
                found.append([*path[path.index(v):], v])
            elif v not in seen:
                visit(v, path, on_path)
        path.pop()
        on_path.discard(u)

    for node in sorted(graph):
        if node not in seen:
            visit(node, [], set())
    return found


def circles(files: Mapping[str, Path], edges: Mapping[str, set[tuple[str, int, bool]]]) -> list[str]:
    """Import circles between files (imports for type checking only left out)."""
    graph = {m: sorted({t for t, _, _typing in ts if t in files and t != m})
             for m, ts in edges.items()}
    return [" -> ".join(loop) for loop in _loops(graph)]


def folder_circles(files: Mapping[str, Path], edges: Mapping[str, set[tuple[str, int, bool]]]) -> list[str]:
    """Import circles between folders: each folder (its own files, not its subfolders') one node, an edge
    where a file of one imports a file of another, unless one folder holds the other (a package and its
    own subpackages, ``domain/`` and ``domain/fit/``, are one body). Each circle is named with one import
    per step."""
    def folder(mod: str) -> str:
        return mod if files[mod].name == "__init__.py" else mod.rpartition(".")[0]

    via: dict[tuple[str, str], str] = {}
    for mod, targets in sorted(edges.items()):
        for target, line, _typing in sorted(targets):
            if target not in files:
                continue
            a, b = folder(mod), folder(target)
            if not (a == b or a.startswith(b + ".") or b.startswith(a + ".")):
                via.setdefault((a, b), f"{mod}:{line} -> {target}")
    graph: dict[str, list[str]] = {}
    for (a, b) in sorted(via):
        graph.setdefault(a, []).append(b)
    return [" -> ".join(loop) + " (" + "; ".join(via[(x, y)] for x, y in zip(loop, loop[1:])) + ")"
            for loop in _loops(graph)]


def test_no_import_breaks_a_wall() -> None:
    bad = broken_walls()
    assert not bad, f"{len(bad)} imports break the house's walls:\n" + "\n".join(bad)


def _tree(tmp_path: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for top in TOPS:
        (tmp_path / top).mkdir(exist_ok=True)
    return tmp_path


CLEAN = {
    "events/catalogue.py": "X = 1\n",
    "services/domain/jobs.py": "from events import catalogue\n",
    "services/runtime/log.py": "import asyncio\nfrom services.domain.jobs import X\n",
    "services/scheduling/core.py": "from services.domain import jobs\nfrom events.catalogue import X\n",
    "services/scheduling/app.py": "import asyncio\nfrom services.scheduling.core import Y\nfrom services.runtime import log\n",
    "services/preemption/core.py": "from services.domain.jobs import Job\n",
    "projections/view.py": "from services.domain.jobs import Job\nfrom services.runtime.log import Record\n",
    "services/front/cli/main.py": ("import click\nfrom services.scheduling.core import Y\n"
                                   "from projections.view import V\n"),
    "services/front/host/stack.py": "from services.preemption.core import P\n",
}


def test_a_clean_tree_passes(tmp_path: Path) -> None:
    assert broken_walls(_tree(tmp_path, CLEAN)) == []


def test_each_offending_import_is_named_with_its_rule(tmp_path: Path) -> None:
    """Add an offending import by hand, one per rule: the checker names the import, its line and the rule."""
    cases = {
        "services/preemption/core.py": ("from services.scheduling.core import SchedulingCore\n",
                                        "services.preemption.core:1 -> services.scheduling.core (a service imports "
                                        "only events, the domain package and the runtime, never another service)"),
        "projections/view.py": ("from services.preemption.core import P\n",
                                "projections.view:1 -> services.preemption.core (projections never import a service"),
        "services/runtime/log.py": ("from services.front.host.stack import Stack\n",
                                    "services.runtime.log:1 -> services.front.host.stack (services/runtime/ is plumbing"),
        "services/domain/jobs.py": ("from services.runtime.log import Record\n",
                                    "services.domain.jobs:1 -> services.runtime.log (the shared domain package is "
                                    "pure and imports only events)"),
        "events/catalogue.py": ("from services.domain.jobs import Job\n",
                                "events.catalogue:1 -> services.domain.jobs (events import nothing of ours)"),
    }
    for name, (line, expected) in cases.items():
        files = dict(CLEAN)
        files[name] = line + files[name]
        bad = broken_walls(_tree(tmp_path / name.replace("/", "_"), files))
        assert any(b.startswith(expected) for b in bad), (name, bad)


def test_circles_impurity_and_unplaced_rooms_are_found(tmp_path: Path) -> None:
    files = dict(CLEAN)
    files["services/front/cli/jobs.py"] = "from services.front.cli import sbatch\n"
    files["services/front/cli/sbatch.py"] = "from services.front.cli.jobs import submit\n"
    files["services/scheduling/core.py"] = "import time\nimport random\nnow = time.time()\n"
    files["services/misc/util.py"] = "X = 1\n"
    bad = broken_walls(_tree(tmp_path, files))
    assert "circle: services.front.cli.jobs -> services.front.cli.sbatch -> services.front.cli.jobs" in bad
    assert any(b.startswith("services.scheduling.core:2 -> random (pure code") for b in bad), bad
    assert any(b.startswith("services.scheduling.core:3 calls time.time()") for b in bad), bad
    assert any(b.startswith("services.misc.util: services/misc/ is in no layer") for b in bad), bad


def test_type_checking_imports_count_for_circles(tmp_path: Path) -> None:
    files = dict(CLEAN)
    files["services/runtime/a.py"] = "from services.runtime.b import B\n"
    files["services/runtime/b.py"] = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                      "    from services.runtime.a import A\n")
    assert broken_walls(_tree(tmp_path, files)) == [
        "circle: services.runtime.a -> services.runtime.b -> services.runtime.a"]


def test_a_file_moved_into_the_wrong_folder_fails(tmp_path: Path) -> None:
    """Layer = folder: the same file breaks a wall once it sits in a folder whose layer may not import
    what it imports, and a room's files importing each other across sibling folders make a circle."""
    files = dict(CLEAN)
    files["services/nodes/agent/app.py"] = "import asyncio\nfrom services.runtime.log import Record\n"
    files["services/front/client/client.py"] = "from services.runtime.log import Record\n"
    files["services/front/audit/story.py"] = "from services.front.client.client import query\n"
    assert broken_walls(_tree(tmp_path / "clean", files)) == []
    # the dashboard's code moved into the agent: the agent would import a service
    moved = {**files, "services/nodes/agent/dashboard.py": "from services.preemption.core import P\n"}
    assert any(b.startswith("services.nodes.agent.dashboard:1 -> services.preemption.core (the nodes") for b in
               broken_walls(_tree(tmp_path / "agent", moved)))
    # a library in the front that leans on the CLI
    leaning = {**files, "services/front/host/stack.py": "from services.front.cli.main import cli\n"}
    assert any(b.startswith("services.front.host.stack:1 -> services.front.cli.main (nothing imports the CLI") for b in
               broken_walls(_tree(tmp_path / "lean", leaning)))
    # the client importing the audit while the audit imports the client: a circle of folders, no circle of files
    looped = {**files, "services/front/client/paging.py": "from services.front.audit.story import S\n"}
    bad = broken_walls(_tree(tmp_path / "loop", looped))
    assert [b for b in bad if b.startswith("circle:")] == []
    assert any(b.startswith("circle of folders: services.front.audit -> services.front.client -> services.front.audit")
               for b in bad), bad
    # a library of the front that speaks click itself instead of leaving it to the CLI
    clicking = {**files, "services/front/client/client.py": "from click import echo\n"}
    assert any(b.startswith("services.front.client.client:1 -> click (only services/front/cli/ imports click") for b in
               broken_walls(_tree(tmp_path / "click", clicking)))
    # a pure core that reads the clock, in the nodes as in the services
    impure = {**files, "services/nodes/agent/core.py": "import time\nnow = time.monotonic()\n"}
    assert any(b.startswith("services.nodes.agent.core:2 calls time.monotonic()") for b in
               broken_walls(_tree(tmp_path / "impure", impure)))
