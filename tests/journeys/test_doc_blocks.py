"""Every shell block of README.md and docs/*.md runs in a journey or says why it does not."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from tests.journeys.docblocks import all_blocks, commands_of

HERE = Path(__file__).parent


def test_every_shell_block_is_a_journey_or_illustrative() -> None:
    unmarked = [b.where for b in all_blocks() if b.shell and b.kind is None]
    assert not unmarked, ("shell blocks with no <!-- journey: NAME --> or <!-- illustrative: REASON --> marker "
                          f"on the line above (a diagram or formula is fenced as ```text): {unmarked}")


def test_illustrative_blocks_say_why() -> None:
    bare = [b.where for b in all_blocks() if b.kind == "illustrative" and len(b.value) < 8]
    assert not bare, f"illustrative blocks need a reason: {bare}"


def test_journey_names_are_unique_and_each_one_runs() -> None:
    names = Counter(b.value for b in all_blocks() if b.kind == "journey")
    assert not [n for n, k in names.items() if k > 1], f"two blocks share a journey name: {names}"
    sources = "\n".join(p.read_text() for p in HERE.glob("*.py") if p.name != Path(__file__).name)
    unrun = [n for n in names if not re.search(rf"[\"']{re.escape(n)}[\"']", sources)]
    assert not unrun, f"doc blocks marked as journeys that no journey runs: {unrun}"


def test_commands_are_read_as_a_shell_reads_them() -> None:
    body = "# a comment\nhorizon a --x \\\n  --y   # trailing\n\nhorizon b\n"
    assert [c.text for c in commands_of(body)] == ["horizon a --x   --y   # trailing", "horizon b"]
    console = "$ horizon c\nError: no\n$ horizon d\nok\n"
    assert [(c.text, c.shown) for c in commands_of(console, console=True)] == [
        ("horizon c", ("Error: no",)), ("horizon d", ("ok", ""))]
