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


SLURM_NAMES = frozenset({"sbatch", "squeue", "scancel", "sinfo", "sacct", "srun", "scontrol"})


def _invocations(text: str) -> list[list[str]]:
    """The ``horizon ...`` commands of one shell line, as argument lists: split at the shell's
    control operators, past leading ``VAR=value`` assignments; Slurm's names are Horizon's shims."""
    import shlex

    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError:  # an unbalanced quote: the runner would say so
        return []
    found, segment = [], []
    for token in [*tokens, ";"]:
        if token and set(token) <= set("&|;()<>"):
            while segment and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", segment[0]):
                segment.pop(0)
            if segment and segment[0] in ("eval", "time", "/usr/bin/time", "-v"):
                segment = [t for t in segment if t not in ("eval", "time", "/usr/bin/time", "-v")]
            if segment:
                program = segment[0].rsplit("/", 1)[-1]
                if program == "horizon":
                    found.append(segment[1:])
                elif program in SLURM_NAMES:
                    found.append(segment)
            segment = []
        else:
            segment.append(token)
    return found


def test_every_documented_horizon_flag_exists() -> None:
    """Every ``horizon`` command in a shell block, run or illustrative, names a real command and
    only options it has: a flag renamed in the code or mistyped in a doc fails here at once."""
    import click

    from services.front.cli.main import cli

    wrong = []
    for b in all_blocks():
        if not b.shell:
            continue
        for command in b.commands:
            for args in _invocations(command.text):
                cmd: click.Command = cli
                path = ["horizon"]
                while isinstance(cmd, click.Group) and args and not args[0].startswith("-"):
                    if args[0] not in cmd.commands:
                        wrong.append(f"{b.where}: {' '.join(path)} has no command {args[0]!r}: {command.text}")
                        break
                    path.append(args[0])
                    cmd = cmd.commands[args.pop(0)]
                else:
                    if cmd.context_settings.get("ignore_unknown_options"):
                        continue  # sbatch, srun, scontrol read Slurm's options themselves (their journeys run them)
                    names = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}
                    for arg in args:
                        if arg == "--":
                            break
                        flag = arg.split("=", 1)[0]
                        if flag.startswith("-") and flag not in ("-",) and not re.fullmatch(r"-\d.*", flag) \
                                and flag not in names:
                            wrong.append(f"{b.where}: {' '.join(path)} has no option {flag}: {command.text}")
    assert not wrong, "\n".join(wrong)
