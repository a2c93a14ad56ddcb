"""Slurm's command names as small scripts: ``sbatch``, ``squeue``, ``srun`` ... that run Horizon's.

A shim is a POSIX shell script named like a Slurm command that execs this Python on
``services.front.cli.slurm_dispatch`` with the command's name and arguments; that dispatcher runs
``horizon NAME`` with Slurm's option parsing. Two writers use ``write_shims``:

* ``horizon slurm-shims DIR``: a person, into a directory of their choosing, which they then
  put on their PATH themselves (never installed on the default PATH by the package);
* a node agent: into a job's own directory, put first on that job's PATH, so that ``srun`` and
  ``scontrol`` inside a batch script are Horizon's (``guard=False``: inside a Horizon job they
  must be Horizon's, whatever else the machine has).

How shims never shadow a real Slurm on the same machine (docs/slurm.md, "The commands under
their own names"):

1. ``horizon slurm-shims`` refuses to write when ``real_slurm`` finds one of Slurm's commands on
   PATH, unless told ``--force`` (then the shims are written unguarded: the person chose);
2. a guarded shim (the default) looks along PATH each time it runs: when a real command of its
   name is there (an executable file that is not a shim), it execs that one instead, unchanged,
   so a Slurm installed after the shims were written is what its users get;
3. a file that is not a shim is never overwritten or removed (``ShimError``);
4. a Horizon that drives a real Slurm (the planned Slurm backend) finds Slurm's commands with
   ``real_slurm`` when it starts and calls them by absolute path, never through PATH.

Plumbing: files only, no service, no CLI (services/runtime may be imported by the agent).
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["SLURM_COMMANDS", "MARKER", "ShimError", "shim_text", "write_shims", "remove_shims", "is_shim",
           "real_slurm"]

# The Slurm commands Horizon answers to, in the order people meet them.
SLURM_COMMANDS = ("sbatch", "squeue", "scancel", "sinfo", "sacct", "srun", "scontrol")
MARKER = "horizon-slurm-shim"  # in every shim's first lines: how a shim is told from a real command
_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the ``services`` package
_PEEK = 512  # bytes read to find the marker


class ShimError(Exception):
    """A shim cannot be written or removed where asked; the message says which file and why."""


def shim_text(name: str, *, python: str, guard: bool = True, env: Mapping[str, str] | None = None,
              root: Path | None = None) -> str:
    """The script for Slurm's ``name``: sh, which execs ``python`` on the dispatcher.

    ``python -P``: the working directory is not put on ``sys.path`` (a ``services`` folder where the
    user stands must not be imported); the package's own directory is put first instead, so the
    shim runs the Horizon that wrote it. ``env``: defaults for variables (``HORIZON_NATS_URL``, ...)
    that the caller's environment overrides. ``guard``: step aside for a real Slurm (module doc).
    """
    if name not in SLURM_COMMANDS:
        raise ShimError(f"{name!r} is not one of Slurm's commands Horizon answers to: {', '.join(SLURM_COMMANDS)}")
    code = (f"import sys; sys.path.insert(0, {str(root or _ROOT)!r}); "
            "from services.front.cli.slurm_dispatch import main; main()")
    lines = [
        "#!/bin/sh",
        f"# {MARKER}: this {name} is Horizon's (horizon {name}), not Slurm's.",
        "# Written by horizon slurm-shims or a Horizon node agent; docs/slurm.md, \"The commands under their own",
        "# names\". horizon slurm-shims --remove DIR removes it.",
    ]
    for var, value in sorted((env or {}).items()):
        if not var.isidentifier():
            raise ShimError(f"{var!r} is not a variable name")
        lines.append(f': "${{{var}:={_sh_default(value)}}}"; export {var}')
    if guard:
        # Step aside for a real Slurm command of this name anywhere on PATH (not a shim).
        lines += [
            "set -f; _horizon_ifs=$IFS; IFS=:",
            "for _horizon_dir in $PATH; do",
            f'  _horizon_real="${{_horizon_dir:-.}}/{name}"',
            '  if [ -f "$_horizon_real" ] && [ -x "$_horizon_real" ] && '
            f'! head -c {_PEEK} "$_horizon_real" 2>/dev/null | grep -q {MARKER}; then',
            '    IFS=$_horizon_ifs; set +f; exec "$_horizon_real" "$@"',
            "  fi",
            "done",
            "IFS=$_horizon_ifs; set +f",
        ]
    lines.append(f"exec {shlex.quote(python)} -P -c {shlex.quote(code)} {name} \"$@\"")
    return "\n".join(lines) + "\n"


def _sh_default(value: str) -> str:
    """``value`` inside ``"${VAR:=...}"``: double-quoted context, so escape what expands there."""
    return "".join("\\" + ch if ch in '"$`\\}' else ch for ch in value)


def is_shim(path: Path | str) -> bool:
    """A file written by ``write_shims`` (its first bytes carry ``MARKER``)."""
    try:
        with open(path, "rb") as f:
            return MARKER.encode() in f.read(_PEEK)
    except OSError:
        return False


def write_shims(directory: Path | str, names: Iterable[str] = SLURM_COMMANDS, *, python: str | None = None,
                guard: bool = True, env: Mapping[str, str] | None = None) -> list[Path]:
    """Write a shim for each of ``names`` into ``directory`` (made if missing); the paths written.

    A file of that name that is not a shim is never overwritten: ``ShimError`` before anything is
    written. Each shim is written whole (a temporary file renamed into place), executable by all.
    ``python`` defaults to the running interpreter (for the agent: the agent's own).
    """
    target = Path(directory)
    names = list(dict.fromkeys(names))
    texts = {name: shim_text(name, python=python or sys.executable, guard=guard, env=env) for name in names}
    blocked = [target / n for n in names if (target / n).exists() and not is_shim(target / n)]
    if blocked:
        raise ShimError(f"{', '.join(map(str, blocked))}: not written by Horizon; a shim never replaces another "
                        "program (choose another directory)")
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in texts.items():
        path = target / name
        tmp = target / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(text)
        tmp.chmod(0o755)
        os.replace(tmp, path)
        written.append(path)
    return written


def remove_shims(directory: Path | str) -> list[Path]:
    """Remove the shims in ``directory`` (only files written by ``write_shims``); the paths removed."""
    target = Path(directory)
    removed = []
    for name in SLURM_COMMANDS:
        path = target / name
        if path.is_file() and is_shim(path):
            path.unlink()
            removed.append(path)
    return removed


def real_slurm(path: str | None = None, names: Iterable[str] = SLURM_COMMANDS) -> dict[str, Path]:
    """Slurm's commands found along ``path`` (default ``$PATH``), first hit of each, shims skipped.

    An executable file named like a Slurm command that is not a shim counts as Slurm's: this is
    what a shim steps aside for, what ``horizon slurm-shims`` refuses to shadow, and how a Horizon
    driving a real Slurm finds the commands it then calls by absolute path.
    """
    found: dict[str, Path] = {}
    for entry in (os.environ.get("PATH", "") if path is None else path).split(os.pathsep):
        folder = Path(entry or ".")
        for name in names:
            if name in found:
                continue
            candidate = folder / name
            if candidate.is_file() and os.access(candidate, os.X_OK) and not is_shim(candidate):
                found[name] = candidate.absolute()
    return found
