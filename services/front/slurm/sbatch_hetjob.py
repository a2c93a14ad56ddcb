"""A heterogeneous job's batch script and command line, read the way ``sbatch`` reads them. Pure.

Slurm's two forms (docs/slurm.md, "Heterogeneous jobs"):

* in the script, ``#SBATCH hetjob`` (or the older ``packjob``) lines separate the directives of one
  component from the next, in the leading block of directives (``script_components``);
* on the command line, a lone ``:`` separates the options of one component from the next:
  ``sbatch -n1 --mem=16g : -n8 job.sh`` (``split_het_command_line``).

Each component is then read as a job of its own (``parse_sbatch``): its script directives, the
``SBATCH_*`` variables (they apply to every component, as in Slurm) and its command-line options (the
segment of its index, or every option when the command line has no ``:``, as Slurm's sbatch applies
them). The job is component 0's; each later component gives its shape (``ComponentRequest``: nodes,
tasks, CPUs, memory, GPUs, ``--exclusive``, ``--constraint``, ``--partition``). Every other option
of a later component is the job's in Horizon, which has one time limit, account, output, ... for the
whole job: one that differs from component 0's is a warning (``component 1: --time ...``), and
``--nodelist`` in a later component is refused (only the first component may name its nodes).

The batch script runs once, on the first node of component 0, as Slurm's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from events import catalogue as c
from services.front.slurm.sbatch import SbatchDefaults, parse_sbatch, split_command_line
from services.front.slurm.sbatch_options import _PREFIXES, SbatchError, _arguments

__all__ = ["script_components", "split_het_command_line", "parse_het_sbatch", "SHAPE_FIELDS"]

_SEPARATORS = ("hetjob", "packjob")
# The JobSubmitted fields a component has of its own (ComponentRequest's); the rest are the job's.
SHAPE_FIELDS = tuple(c.ComponentRequest.__struct_fields__)
_OPTION_OF = {"time_limit_s": "--time", "name": "--job-name", "account": "--account", "stdout": "--output",
              "stderr": "--error", "qos": "--qos", "dependencies": "--dependency", "exclude_nodes": "--exclude",
              "labels": "--comment", "nice": "--nice", "array": "--array", "cwd": "--chdir",
              "time_min_s": "--time-min", "limit_signal": "--signal", "begin_ts": "--begin", "hold": "--hold",
              "requeue": "--requeue", "licenses": "--licenses", "min_nodes": "--nodes"}
_OWN = ("command", "env", "submit_env")  # the job's, from component 0, whatever later components say


def script_components(text: str) -> tuple[list[str], list[str]]:
    """The script once per component, each with only its own directives (the other components'
    directive lines and the separators blanked, so line numbers stay), and the problems found. A
    script without separators: ``[text]``."""
    lines = text.split("\n")
    marks: list[int] = []  # the separator lines (0-based)
    owner: dict[int, int] = {}  # directive line -> its component
    problems: list[str] = []
    for i, line in enumerate(lines):
        prefix = next((p for p in _PREFIXES if line.startswith(p)), None)
        if prefix is None:
            stripped = line.lstrip()
            if stripped and not stripped.startswith("#"):
                break  # the first command ends the block of directives, as for sbatch
            continue
        try:
            tokens = _arguments(line[len(prefix):], f"line {i + 1}")
        except SbatchError:
            tokens = []  # read_directives reports it
        if tokens and tokens[0].lower() in _SEPARATORS:
            if len(tokens) > 1:
                problems.append(f"line {i + 1}: {line.strip()}: a {tokens[0]} line separates components and holds "
                                "no options")
            marks.append(i)
            continue
        owner[i] = len(marks)
    if not marks:
        return [text], problems
    parts = []
    for k in range(len(marks) + 1):
        kept = [line if owner.get(i, -1) == k or (i not in owner and i not in marks) else ""
                for i, line in enumerate(lines)]
        parts.append("\n".join(kept))
    return parts, problems


def split_het_command_line(args: Sequence[str]) -> tuple[dict[str, Any], list[list[str]], list[str], list[str]]:
    """``horizon sbatch`` arguments -> (Horizon's options, sbatch options of each component, [script] or
    [], the script's arguments): ``split_command_line`` for each part between lone ``:``."""
    ours: dict[str, Any] = {}
    segments: list[list[str]] = []
    rest = list(args)
    while True:
        mine, sbatch, script, script_args = split_command_line(rest)
        for key, value in mine.items():
            if key == "dataset":
                ours.setdefault("dataset", []).extend(value)
            else:
                ours[key] = value
        segments.append(sbatch)
        if script != [":"]:
            return ours, segments, script, script_args
        rest = script_args


def parse_het_sbatch(text: str, *, defaults: SbatchDefaults, segments: Sequence[Sequence[str]],
                     wrap: str | None = None, warnings: list[str] | None = None,
                     flags: set[str] | None = None) -> tuple[dict[str, Any], str]:
    """``parse_sbatch`` for a job that may be heterogeneous (script separators or command-line
    segments): the ``JobSubmitted`` fields, with ``components`` when it has more than one, and the
    script's body. Raises ``SbatchError`` listing every component's problems."""
    parts, problems = (script_components(text) if wrap is None else ([text], []))
    count = max(len(parts), len(segments))
    if count == 1:
        if problems:
            raise SbatchError(problems)
        return parse_sbatch(text, defaults=defaults, command_line=list(segments[0]) if segments else [],
                            wrap=wrap, warnings=warnings, flags=flags)
    read: list[dict[str, Any]] = []
    body = ""
    notes: list[str] = []
    for k in range(count):
        part = parts[k] if k < len(parts) else _directives_blanked(text)
        line = list(segments[k] if k < len(segments) else []) if len(segments) > 1 else list(segments[0])
        mine: list[str] = []
        try:
            fields, part_body = parse_sbatch(part, defaults=defaults, command_line=line, wrap=wrap, warnings=mine,
                                             flags=flags)
        except SbatchError as exc:
            problems.extend(p if k == 0 or p.startswith("line ") else f"component {k}: {p}" for p in exc.problems)
            continue
        notes.extend(n for n in mine if n not in notes)
        read.append(fields)
        if k == 0:
            body = part_body
            if wrap is None and fields["command"] and fields["command"][-1] == part:
                fields["command"] = [*fields["command"][:-1], text]  # the job runs the script as written
    if problems:
        raise SbatchError(problems)
    job = read[0]
    components = []
    for k, fields in enumerate(read[1:], 1):
        line = list(segments[k] if k < len(segments) else []) if len(segments) > 1 else list(segments[0])
        unset, _ = parse_sbatch(_directives_blanked(text), defaults=defaults, command_line=line, wrap=wrap)
        problems.extend(_later(k, fields, unset, job, notes))
        components.append(c.ComponentRequest(**{name: fields[name] for name in SHAPE_FIELDS if name in fields}))
    if problems:
        raise SbatchError(problems)
    job["components"] = components
    if warnings is not None:
        warnings.extend(notes)
    return job, body


def _later(k: int, fields: dict[str, Any], unset: dict[str, Any], job: dict[str, Any],
           notes: list[str]) -> list[str]:
    """What a later component says beside its shape: a problem (it names nodes), or a warning for
    each of the job's fields it gives otherwise (appended to ``notes``). ``unset``: the component's
    fields when its script gives no directive (what it did not give is the job's, as Slurm propagates
    its options from one component to the next)."""
    if fields.get("nodelist"):
        return [f"component {k}: --nodelist: only the first component of a heterogeneous job may name its nodes "
                "here"]
    for name in sorted(set(fields) | set(job)):
        if name in SHAPE_FIELDS or name in _OWN or fields.get(name) in (job.get(name), unset.get(name)):
            continue
        option = _OPTION_OF.get(name, name)
        notes.append(f"component {k}: {option}: a heterogeneous job's components share the job's {option} in "
                     f"Horizon; component 0's counts ({job.get(name)!r}, not {fields.get(name)!r})")
    return []


def _directives_blanked(text: str) -> str:
    """The script with no directives of its own (a component the command line adds beyond the script's)."""
    lines = text.split("\n")
    out = []
    ended = False
    for line in lines:
        if not ended and any(line.startswith(p) for p in _PREFIXES):
            out.append("")
            continue
        stripped = line.lstrip()
        if stripped and not stripped.startswith("#"):
            ended = True
        out.append(line)
    return "\n".join(out)
