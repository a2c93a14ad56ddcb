"""The commands the docs tell a person to type, read from the docs themselves.

Every fenced block of README.md and docs/*.md whose language is a shell's (``bash``, ``sh``,
``shell``, ``console``) or none at all is a *shell block*. Each carries, on the line just above
its fence, one marker saying what becomes of it:

    <!-- journey: NAME -->              the journey suite runs it (tests/journeys/, by NAME)
    <!-- illustrative: REASON -->       not run, and why (a synopsis, a sample, a benchmark)

Text that is not a command (a diagram, a formula, an excerpt of output alone) is fenced as
``text`` and is no shell block. ``test_doc_blocks.py`` fails on an unmarked shell block, on a
journey name no journey runs and on two blocks of one name, so a doc cannot drift from the
suite silently: a block changed to a wrong flag fails the journey that runs it.

A block's commands are its logical lines: a ``\\`` continues a line, blank lines and whole-line
comments are skipped, and in a ``console`` block only the ``$ ``-prompted lines are commands
(the lines after one are the output the doc shows for it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELL_LANGS = frozenset({"bash", "sh", "shell", "console", ""})
_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[A-Za-z0-9_+-]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*(?P<kind>journey|illustrative)\s*:\s*(?P<value>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Command:
    """One command of a block, and the output the doc shows after it (console blocks)."""

    text: str
    shown: tuple[str, ...] = ()


@dataclass(frozen=True)
class Block:
    path: Path  # relative to the checkout
    line: int  # of the opening fence, 1-based
    lang: str
    body: str
    kind: str | None = None  # "journey", "illustrative", or None (unmarked)
    value: str = ""  # the journey's name, or the reason it is illustrative
    commands: tuple[Command, ...] = field(default=())

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def shell(self) -> bool:
        return self.lang in SHELL_LANGS


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def read_blocks(path: Path, root: Path = ROOT) -> list[Block]:
    lines = path.read_text().split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not re.match(r"^\s*```\s*$", lines[end]):
            end += 1
        indent = len(fence.group("indent"))
        body = "\n".join(line[indent:] if line[:indent].isspace() else line for line in lines[i + 1:end])
        marker = _MARKER.match(lines[i - 1]) if i > 0 else None
        lang = fence.group("lang").lower()
        blocks.append(Block(
            path=path.relative_to(root), line=i + 1, lang=lang, body=body,
            kind=marker.group("kind") if marker else None, value=marker.group("value") if marker else "",
            commands=tuple(commands_of(body, console=lang == "console")) if lang in SHELL_LANGS else (),
        ))
        i = end + 1
    return blocks


def commands_of(body: str, console: bool = False) -> list[Command]:
    """The logical command lines of a shell block (see the module's docstring)."""
    texts: list[str] = []
    shown: list[list[str]] = []
    pending: str | None = None  # a command continued by a trailing backslash
    for raw in body.split("\n"):
        line = raw.rstrip()
        if pending is None:
            if console:
                if not line.startswith("$ "):
                    if texts:
                        shown[-1].append(line)
                    continue
                line = line[2:]
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            pending = ""
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        texts.append(pending + line)
        shown.append([])
        pending = None
    return [Command(text, tuple(out)) for text, out in zip(texts, shown)]


def all_blocks(root: Path = ROOT) -> list[Block]:
    return [block for path in doc_files(root) for block in read_blocks(path, root)]


def journey_blocks(root: Path = ROOT) -> dict[str, Block]:
    """The blocks marked ``journey: NAME``, by name."""
    return {b.value: b for b in all_blocks(root) if b.kind == "journey"}


def block(name: str, root: Path = ROOT) -> Block:
    found = journey_blocks(root)
    if name not in found:
        raise LookupError(f"no doc block is marked <!-- journey: {name} --> (README.md, docs/*.md)")
    return found[name]
