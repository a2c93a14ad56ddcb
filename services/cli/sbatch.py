"""``horizon sbatch SCRIPT``: a Slurm batch script, read the way ``sbatch`` reads it, submitted as a ``JobSubmitted``.

Reading (the pure part, ``parse_sbatch``), as Slurm's ``sbatch``:

* the script must start with ``#!`` and an interpreter, which runs it;
* directives are lines that *begin* with ``#SBATCH`` (``#SLURM``, the old
  prefix, too), in the leading block of comments and blank lines: the first
  other line ends the block, and ``#SBATCH`` lines after it are comments;
* a directive line holds one or more options, split like a command line
  (quotes group, a backslash escapes, an unquoted ``#`` starts a comment);
  ``--opt=value``, ``--opt value``, ``-Xvalue``, ``-X value``, and long
  options may be shortened to a unique prefix (``getopt_long``);
* options on the ``horizon sbatch`` command line override the script's;
  a later option overrides an earlier one.

Every option Horizon cannot honour exactly is an error naming the option and
its line, never ignored; all such problems of a script are reported together.
The mapping and its limits are in docs/slurm.md, and in ``OPTIONS`` below.

How the job runs: the agent runs a short ``/bin/sh`` wrapper that changes to
the working directory (the directory ``horizon sbatch`` ran in, or
``--chdir``), sets the Slurm variables only known on the node
(``SLURM_ARRAY_TASK_ID``, ``SLURMD_NODENAME``, ...), redirects output as
``--output``/``--error`` say, and execs the script's interpreter on the
script's path with its arguments. The script is read from its path when the
job starts (Slurm keeps a copy taken at submission): do not edit a script
while its job waits.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import msgspec

from events import catalogue as c
from events.arrays import parse_array
from events.resources import ResourceError, parse_gpu_model
from events.subjects import valid_token

__all__ = ["SbatchError", "SbatchDefaults", "Directive", "parse_sbatch", "read_directives", "slurm_time",
           "slurm_memory", "parse_dependencies", "OPTIONS", "register"]


class SbatchError(ValueError):
    """One or more problems with a batch script or sbatch options; the message lists each with its line."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(problems[0] if len(problems) == 1 else
                         f"{len(problems)} problems:\n  " + "\n  ".join(problems))


class _Problem(Exception):
    """A problem with one option's value (located by the caller)."""


# --------------------------------------------------------------------------
# The options sbatch knows, and what Horizon does with each
# --------------------------------------------------------------------------

REQUIRED, OPTIONAL, NONE = "required", "optional", "none"


@dataclass(frozen=True)
class _Opt:
    long: str
    short: str | None
    arg: str  # REQUIRED | OPTIONAL | NONE
    unsupported: str | None = None  # why Horizon cannot honour it (None: supported)
    horizon: bool = False  # a horizon sbatch option (command line only), not Slurm's


def _opts() -> dict[str, _Opt]:
    ok = [
        ("account", "A", REQUIRED), ("array", "a", REQUIRED), ("chdir", "D", REQUIRED), ("comment", None, REQUIRED),
        ("cpus-per-gpu", None, REQUIRED), ("cpus-per-task", "c", REQUIRED), ("dependency", "d", REQUIRED),
        ("error", "e", REQUIRED), ("export", None, REQUIRED), ("gpus", "G", REQUIRED),
        ("gpus-per-node", None, REQUIRED), ("gpus-per-task", None, REQUIRED), ("gres", None, REQUIRED),
        ("job-name", "J", REQUIRED), ("kill-on-invalid-dep", None, REQUIRED), ("mem", None, REQUIRED),
        ("mem-per-cpu", None, REQUIRED), ("mem-per-gpu", None, REQUIRED), ("nice", None, OPTIONAL),
        ("nodes", "N", REQUIRED), ("ntasks", "n", REQUIRED), ("ntasks-per-node", None, REQUIRED),
        ("open-mode", None, REQUIRED), ("output", "o", REQUIRED), ("parsable", None, NONE),
        ("partition", "p", REQUIRED), ("qos", "q", REQUIRED), ("quiet", "Q", NONE), ("time", "t", REQUIRED),
        ("verbose", "v", NONE), ("wrap", None, REQUIRED),
    ]
    no_exclusive = "Horizon does not reserve whole nodes; ask for the node's CPUs, memory and GPUs instead"
    no_nodes = "Horizon does not pin jobs to named nodes; use horizon submit --node-selector with node labels"
    no_layout = "Horizon places tasks by CPUs, memory and GPUs only; it has no socket, core or binding layout"
    no_mail = "Horizon sends no mail; follow a job with horizon watch --job JOB"
    unsupported = [
        ("acctg-freq", None, REQUIRED, "Horizon has no accounting sampling"),
        ("batch", None, REQUIRED, "Horizon has no batch-host features"),
        ("bb", None, REQUIRED, "Horizon has no burst buffers"),
        ("bbf", None, REQUIRED, "Horizon has no burst buffers"),
        ("begin", "b", REQUIRED, "Horizon has no deferred start; submit the job later"),
        ("cluster-constraint", None, REQUIRED, "Horizon schedules one cluster"),
        ("clusters", "M", REQUIRED, "Horizon schedules one cluster"),
        ("constraint", "C", REQUIRED, "Horizon has no node features; use horizon submit --node-selector with "
                                      "node labels, or a GPU type with --gres=gpu:TYPE:N"),
        ("container", None, REQUIRED, "Horizon runs no containers itself"),
        ("container-id", None, REQUIRED, "Horizon runs no containers itself"),
        ("contiguous", None, NONE, no_nodes),
        ("core-spec", "S", REQUIRED, no_layout),
        ("cores-per-socket", None, REQUIRED, no_layout),
        ("cpu-freq", None, REQUIRED, "Horizon does not set CPU frequencies"),
        ("deadline", None, REQUIRED, "Horizon has no deadline; horizon submit --scheduling-timeout gives up on a "
                                     "job not started in time"),
        ("delay-boot", None, REQUIRED, "Horizon does not reboot nodes"),
        ("distribution", "m", REQUIRED, no_layout),
        ("exclude", "x", REQUIRED, no_nodes),
        ("exclusive", None, OPTIONAL, no_exclusive),
        ("export-file", None, REQUIRED, "name the variables with --export=VAR,VAR=value"),
        ("extra", None, REQUIRED, "Horizon has no node features"),
        ("extra-node-info", "B", REQUIRED, no_layout),
        ("get-user-env", None, OPTIONAL, "Horizon does not load login environments"),
        ("gid", None, REQUIRED, "Horizon runs jobs as the node agent's user"),
        ("gpu-bind", None, REQUIRED, no_layout),
        ("gpu-freq", None, REQUIRED, "Horizon does not set GPU frequencies"),
        ("gpus-per-socket", None, REQUIRED, no_layout),
        ("gres-flags", None, REQUIRED, no_layout),
        ("hint", None, REQUIRED, no_layout),
        ("hold", "H", NONE, "a job cannot be submitted held; submit it, then horizon hold JOB"),
        ("ignore-pbs", None, NONE, "Horizon reads only #SBATCH directives"),
        ("immediate", "I", OPTIONAL, "Horizon has no immediate mode"),
        ("input", "i", REQUIRED, "Horizon does not connect a job's standard input"),
        ("jobid", None, REQUIRED, "Horizon job ids are given with horizon sbatch --job-id"),
        ("licenses", "L", REQUIRED, "Horizon has no licenses"),
        ("mail-type", None, REQUIRED, no_mail),
        ("mail-user", None, REQUIRED, no_mail),
        ("mcs-label", None, REQUIRED, "Horizon has no MCS labels"),
        ("mem-bind", None, REQUIRED, no_layout),
        ("mincpus", None, REQUIRED, "ask for CPUs per task with --cpus-per-task"),
        ("network", None, REQUIRED, "Horizon has no network options"),
        ("no-kill", "k", OPTIONAL, "Horizon ends a job whose node is lost"),
        ("no-requeue", None, NONE, "Horizon's requeue is its restart policy (horizon submit --restart-policy)"),
        ("nodefile", "F", REQUIRED, no_nodes),
        ("nodelist", "w", REQUIRED, no_nodes),
        ("ntasks-per-core", None, REQUIRED, no_layout),
        ("ntasks-per-gpu", None, REQUIRED, "give --ntasks-per-node and --gpus-per-task"),
        ("ntasks-per-socket", None, REQUIRED, no_layout),
        ("overcommit", "O", NONE, "Horizon never overcommits CPUs"),
        ("oversubscribe", "s", NONE, "Horizon never oversubscribes resources"),
        ("power", None, REQUIRED, "Horizon has no power options"),
        ("prefer", None, REQUIRED, "Horizon has no node features"),
        ("priority", None, REQUIRED, "use --qos, --nice, or horizon sbatch --priority-class"),
        ("profile", None, REQUIRED, "Horizon does not profile jobs (a Horizon profile is --partition)"),
        ("propagate", None, OPTIONAL, "Horizon does not propagate resource limits"),
        ("reboot", None, NONE, "Horizon does not reboot nodes"),
        ("requeue", None, NONE, "Horizon's requeue is its restart policy (horizon submit --restart-policy)"),
        ("reservation", None, REQUIRED, "Horizon's reservations belong to accounts: a job of the account may use "
                                        "them without naming them"),
        ("signal", None, REQUIRED, "Horizon signals a job only when it is preempted (its checkpoint signal, "
                                   "horizon submit), not before its time limit"),
        ("sockets-per-node", None, REQUIRED, no_layout),
        ("spread-job", None, NONE, no_layout),
        ("switches", None, REQUIRED, "Horizon places a gang inside one interconnect domain by itself"),
        ("test-only", None, NONE, "horizon sbatch --dry-run prints the job without submitting it (no start "
                                  "estimate)"),
        ("thread-spec", None, REQUIRED, no_layout),
        ("threads-per-core", None, REQUIRED, no_layout),
        ("time-min", None, REQUIRED, "Horizon has one time limit per job (--time)"),
        ("tmp", None, REQUIRED, "Horizon does not schedule local disk"),
        ("tres-per-task", None, REQUIRED, "give --cpus-per-task and --gpus-per-task"),
        ("uid", None, REQUIRED, "Horizon runs jobs as the node agent's user"),
        ("use-min-nodes", None, NONE, "Horizon's gangs have a fixed number of nodes"),
        ("wait", "W", NONE, "follow the job with horizon watch --job JOB"),
        ("wait-all-nodes", None, REQUIRED, "Horizon starts a job when all its nodes are allocated"),
        ("wckey", None, REQUIRED, "Horizon has no workload keys"),
        ("help", None, NONE, "run horizon sbatch --help"),
        ("usage", "u", NONE, "run horizon sbatch --help"),
        ("version", "V", NONE, "run horizon --version"),
    ]
    horizon = [
        ("nats", None, REQUIRED), ("tenant", None, REQUIRED), ("job-id", None, REQUIRED), ("json", None, NONE),
        ("dry-run", None, NONE), ("check", None, NONE), ("no-wait", None, NONE), ("sim-runtime", None, REQUIRED),
        ("priority-class", None, REQUIRED),
    ]
    table: dict[str, _Opt] = {}
    for long, short, arg in ok:
        table[long] = _Opt(long, short, arg)
    for long, short, arg, why in unsupported:
        table[long] = _Opt(long, short, arg, unsupported=why)
    for long, short, arg in horizon:
        table[long] = _Opt(long, short, arg, horizon=True)
    return table


OPTIONS: dict[str, _Opt] = _opts()
_SHORT: dict[str, _Opt] = {o.short: o for o in OPTIONS.values() if o.short}
# Slurm accepts --wrap only on the command line; the output flags are horizon sbatch's there too.
_COMMAND_LINE_ONLY = {"wrap", "parsable", "quiet", "verbose"}


# --------------------------------------------------------------------------
# Reading directives
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Directive:
    """One option: its long name, value (``None`` for a flag), where it was given and how it was spelt."""

    option: str
    value: str | None
    where: str  # "line 7" or "command line"
    given: str  # "-N" or "--nodes"

    def problem(self, text: str) -> str:
        return f"{self.where}: {self.given}: {text}"


def _arguments(line: str, where: str) -> list[str]:
    """Split a directive line as Slurm's ``_get_argument`` does: quotes group, ``\\`` escapes, ``#`` comments."""
    args: list[str] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i].isspace():
            i += 1
        if i >= n:
            return args
        arg: list[str] = []
        quote = ""
        escaped = False
        while i < n and (quote or not line[i].isspace()):
            ch = line[i]
            i += 1
            if escaped:
                escaped = False
                arg.append(ch)
            elif ch == "\\":
                escaped = True
            elif quote:
                if ch == quote:
                    quote = ""
                else:
                    arg.append(ch)
            elif ch in "\"'":
                quote = ch
            elif ch == "#":
                if arg:
                    args.append("".join(arg))
                return args  # the rest of the line is a comment
            else:
                arg.append(ch)
        if quote:
            raise SbatchError([f"{where}: unmatched {quote} in {line.strip()!r}"])
        args.append("".join(arg))


def _find_long(name: str, where: str, given: str) -> _Opt:
    if name in OPTIONS:
        return OPTIONS[name]
    matches = [o for long, o in OPTIONS.items() if long.startswith(name)]
    if len(matches) == 1 and name:
        return matches[0]
    if len(matches) > 1:
        raise _Problem(f"{where}: {given}: ambiguous: {', '.join('--' + m.long for m in matches)}")
    raise _Problem(f"{where}: {given}: not an sbatch option")


def getopt(tokens: Sequence[str], where: str | Sequence[str]) -> tuple[list[Directive], int, list[str]]:
    """Options from ``tokens`` up to the first operand (``getopt_long`` rules without permutation).

    ``where`` is one place for all the tokens, or one per token. Returns the directives, the
    index of the first operand (``len(tokens)`` if none), and the problems found.
    """
    places = [where] * len(tokens) if isinstance(where, str) else list(where)
    out: list[Directive] = []
    problems: list[str] = []
    i = 0
    while i < len(tokens):
        token, place = tokens[i], places[i]
        if token == "--":
            return out, i + 1, problems
        if not token.startswith("-") or token == "-":
            return out, i, problems
        i += 1
        try:
            if token.startswith("--"):
                name, eq, value = token[2:].partition("=")
                opt = _find_long(name, place, token if not eq else f"--{name}")
                given = f"--{opt.long}"
                if opt.arg == NONE:
                    if eq:
                        raise _Problem(f"{place}: {given}: takes no value")
                    out.append(Directive(opt.long, None, place, given))
                elif eq or opt.arg == OPTIONAL:
                    out.append(Directive(opt.long, value if eq else None, place, given))
                elif i < len(tokens):
                    out.append(Directive(opt.long, tokens[i], place, given))
                    i += 1
                else:
                    raise _Problem(f"{place}: {given}: needs a value")
                continue
            chars = token[1:]
            while chars:
                letter, chars = chars[0], chars[1:]
                opt = _SHORT.get(letter)  # type: ignore[assignment]
                if opt is None:
                    raise _Problem(f"{place}: -{letter}: not an sbatch option")
                given = f"-{letter}"
                if opt.arg == NONE:
                    out.append(Directive(opt.long, None, place, given))
                    continue
                if chars:
                    value, chars = chars[1:] if chars.startswith("=") else chars, ""
                    out.append(Directive(opt.long, value, place, given))
                elif opt.arg == OPTIONAL:
                    out.append(Directive(opt.long, None, place, given))
                elif i < len(tokens):
                    out.append(Directive(opt.long, tokens[i], place, given))
                    i += 1
                else:
                    raise _Problem(f"{place}: {given}: needs a value")
        except _Problem as exc:
            problems.append(str(exc))
    return out, len(tokens), problems


_PREFIXES = ("#SBATCH", "#SLURM")


def read_directives(text: str) -> tuple[list[Directive], str, list[str]]:
    """The ``#SBATCH`` directives of a script's leading comment block, the rest of the script, and the
    problems found (bad syntax, options that are not sbatch's)."""
    lines = text.splitlines()
    directives: list[Directive] = []
    problems: list[str] = []
    body_start = len(lines)
    for number, line in enumerate(lines, 1):
        prefix = next((p for p in _PREFIXES if line.startswith(p)), None)
        if prefix is None:
            stripped = line.lstrip()
            if stripped and not stripped.startswith("#"):
                body_start = number - 1
                break
            continue
        where = f"line {number}"
        try:
            tokens = _arguments(line[len(prefix):], where)
        except SbatchError as exc:
            problems.extend(exc.problems)
            continue
        if any(t.lower() in ("packjob", "hetjob") for t in tokens):
            problems.append(f"{where}: {line.strip()}: heterogeneous jobs are not supported")
            continue
        found, stop, bad = getopt(tokens, where)
        problems.extend(bad)
        directives.extend(found)
        if stop < len(tokens):
            problems.append(f"{where}: {tokens[stop]!r} is not an option (a directive line holds options only)")
    return directives, "\n".join(lines[body_start:]), problems


# --------------------------------------------------------------------------
# Values in Slurm's syntax
# --------------------------------------------------------------------------

_TIME_FORMS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (e.g. 90, 1:30:00, 2-00:00:00)"
_TIME_RE = [
    (re.compile(r"^(\d+)$"), lambda m: int(m[1]) * 60),
    (re.compile(r"^(\d+):(\d+)$"), lambda m: int(m[1]) * 60 + int(m[2])),
    (re.compile(r"^(\d+):(\d+):(\d+)$"), lambda m: int(m[1]) * 3600 + int(m[2]) * 60 + int(m[3])),
    (re.compile(r"^(\d+)-(\d+)$"), lambda m: int(m[1]) * 86400 + int(m[2]) * 3600),
    (re.compile(r"^(\d+)-(\d+):(\d+)$"), lambda m: int(m[1]) * 86400 + int(m[2]) * 3600 + int(m[3]) * 60),
    (re.compile(r"^(\d+)-(\d+):(\d+):(\d+)$"),
     lambda m: int(m[1]) * 86400 + int(m[2]) * 3600 + int(m[3]) * 60 + int(m[4])),
]


def slurm_time(text: str) -> float:
    """Slurm's ``--time``: a bare number is **minutes**. ``"90"`` -> 5400.0, ``"1-12"`` -> 129600.0."""
    value = text.strip()
    if value.upper() in ("INFINITE", "UNLIMITED", "-1"):
        raise _Problem("no time limit is not supported: every Horizon job has one (at most 30 days)")
    for pattern, seconds in _TIME_RE:
        m = pattern.match(value)
        if m:
            total = seconds(m)
            if total == 0:
                raise _Problem("0 means no time limit in Slurm; every Horizon job has one")
            return float(total)
    raise _Problem(f"{text!r} is not a time; accepted: {_TIME_FORMS}")


_MEM_RE = re.compile(r"^(\d+)([KMGTkmgt]?)$")
_MEM_UNITS = {"": 1 << 20, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def slurm_memory(text: str) -> int:
    """Slurm's memory sizes: a whole number, megabytes unless suffixed K, M, G or T (binary). ``"4G"`` -> 4 GiB."""
    m = _MEM_RE.match(text.strip())
    if m is None:
        raise _Problem(f"{text!r} is not a memory size; accepted: a whole number of megabytes, or with a "
                       "K, M, G or T suffix (4000, 16G, 512M)")
    return int(m[1]) * _MEM_UNITS[m[2].lower()]


def _count(text: str, what: str, minimum: int = 1) -> int:
    value = text.strip()
    if not value.isdigit() or int(value) < minimum:
        raise _Problem(f"{text!r} is not {what} (a whole number of at least {minimum})")
    return int(value)


_DEP_KINDS = {"after": "after", "afterok": "after-ok", "afternotok": "after-not-ok", "afterany": "after-any"}
_DEP_UNSUPPORTED = {
    "singleton": "singleton (one job of a name and user at a time) is not supported; name the jobs to wait for "
                 "with afterany:JOB",
    "aftercorr": "aftercorr (array task by array task) is not supported: Horizon waits for the whole array",
    "afterburstbuffer": "Horizon has no burst buffers",
    "expand": "Horizon does not grow running jobs",
}


def parse_dependencies(text: str) -> list[c.Dependency]:
    """Slurm's ``--dependency``: ``afterok:a:b,afterany:c`` (all must be met); also ``after``, ``afternotok``."""
    if "?" in text:
        raise _Problem("'?' (any one of them) is not supported: Horizon starts a job when every dependency is met; "
                       "separate them with ','")
    out: list[c.Dependency] = []
    for part in text.split(","):
        kind, _, ids = part.strip().partition(":")
        kind = kind.strip().lower()
        if kind in _DEP_UNSUPPORTED:
            raise _Problem(_DEP_UNSUPPORTED[kind])
        if kind not in _DEP_KINDS:
            raise _Problem(f"{part.strip()!r} is not KIND:JOB[:JOB...]; kinds: {', '.join(_DEP_KINDS)}")
        if not ids:
            raise _Problem(f"{part.strip()!r} names no job")
        for job in ids.split(":"):
            if "+" in job:
                raise _Problem(f"{kind}:{job}: a delay after the job starts (+minutes) is not supported")
            if not valid_token(job):
                raise _Problem(f"{job!r} is not a job id")
            out.append(c.Dependency(kind=_DEP_KINDS[kind], job_id=job))
    return out


def _gpu_spec(text: str, what: str) -> tuple[str | None, int]:
    """``[type:]count`` -> (type, count)."""
    if "," in text:
        raise _Problem(f"{text!r}: GPUs of several types in one job are not supported")
    kind, sep, count = text.strip().rpartition(":")
    if not sep:
        kind, count = "", count
    n = _count(count, f"a number of {what}", minimum=0)
    return _gpu_type(kind), n


def _gpu_type(kind: str) -> str | None:
    if not kind:
        return None
    try:
        return str(parse_gpu_model(kind, "GPU type"))
    except ResourceError as exc:
        raise _Problem(f"{kind!r}: {exc.problem}; accepted: {exc.accepted}") from None


def _gres(text: str) -> tuple[str | None, int]:
    """``--gres``: ``gpu``, ``gpu:N``, ``gpu:TYPE:N`` or ``gpu:TYPE`` per node; ``none``."""
    if text.strip().lower() == "none":
        return None, 0
    found: tuple[str | None, int] | None = None
    for item in text.split(","):
        item = item.strip()
        if item.startswith("gres/"):
            item = item[5:]
        parts = item.split(":")
        if parts[0] != "gpu":
            raise _Problem(f"{parts[0]!r}: only the gpu resource is supported (gpu, gpu:N or gpu:TYPE:N)")
        if found is not None:
            raise _Problem(f"{text!r}: GPUs of several types in one job are not supported")
        if len(parts) == 1:
            found = (None, 1)
        elif len(parts) == 2:
            found = (None, _count(parts[1], "a number of GPUs", 0)) if parts[1].isdigit() else (_gpu_type(parts[1]), 1)
        elif len(parts) == 3:
            found = (_gpu_type(parts[1]), _count(parts[2], "a number of GPUs", 0))
        else:
            raise _Problem(f"{item!r} is not gpu[:TYPE][:COUNT]")
    assert found is not None
    return found


_PATTERN_RE = re.compile(r"%(\d*)(.)")
# Slurm's filename patterns, as shell words on the node (the wrapper has these variables).
_PATTERNS = {
    "j": '"${SLURM_JOB_ID}"',
    "J": '"${SLURM_JOB_ID}.batch"',
    "x": '"${SLURM_JOB_NAME}"',
    "u": '"${SLURM_JOB_USER}"',
    "A": '"${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}"',
    "a": '"${SLURM_ARRAY_TASK_ID:-4294967294}"',
    "N": '"${HORIZON_NODE}"',
    "n": "0",
    "t": "0",
    "s": "batch",
}
_PADDED = {"a", "n", "t"}  # the numeric ones: %3a zero-pads


def _filename(pattern: str) -> str:
    """A Slurm output filename pattern as one POSIX shell word (literal parts quoted)."""
    if pattern.lower() == "none":
        return "/dev/null"
    if "\\" in pattern:  # Slurm: a backslash anywhere turns the replacements off
        return shlex.quote(pattern.replace("\\", ""))
    words: list[str] = []
    last = 0
    for m in _PATTERN_RE.finditer(pattern):
        if m.start() > last:
            words.append(shlex.quote(pattern[last:m.start()]))
        last = m.end()
        width, letter = m[1], m[2]
        if letter == "%":
            words.append("%")
            continue
        if letter not in _PATTERNS:
            raise _Problem(f"%{letter} is not a filename pattern Horizon knows; known: %%, "
                           + ", ".join(f"%{k}" for k in _PATTERNS))
        if width and letter not in _PADDED:
            raise _Problem(f"%{width}{letter}: zero padding only applies to %a, %n and %t (Horizon job ids are "
                           "not numbers)")
        word = _PATTERNS[letter]
        if width:
            word = f"\"$(printf '%0{int(width)}d' {word})\""
        words.append(word)
    if last < len(pattern):
        words.append(shlex.quote(pattern[last:]))
    return "".join(words)


# --------------------------------------------------------------------------
# From directives to a job
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class SbatchDefaults:
    """What the directives do not say: who submits, from where, the script's path and arguments."""

    user: str
    workdir: str  # where horizon sbatch runs: the job's working directory unless --chdir
    script_path: str = ""  # absolute; empty for --wrap
    script_args: tuple[str, ...] = ()
    account: str = "default"
    environ: Mapping[str, str] = field(default_factory=dict)  # for --export=VAR


def _interpreter(text: str) -> list[str]:
    """The ``#!`` line as the kernel reads it: the interpreter and at most one argument."""
    first = text.split("\n", 1)[0].rstrip("\r")
    if not first.startswith("#!") or not first[2:].strip():
        raise SbatchError(["line 1: a batch script must begin with #! and an interpreter, e.g. #!/bin/bash "
                           "(as for sbatch)"])
    parts = first[2:].strip().split(None, 1)
    return [parts[0], parts[1].strip()] if len(parts) == 2 else parts


def parse_sbatch(text: str, *, defaults: SbatchDefaults, command_line: Sequence[str] = (),
                 wrap: str | None = None) -> tuple[dict[str, Any], str]:
    """The ``JobSubmitted`` fields a batch script and command-line options make, and the script's body
    (what follows the directives). Raises ``SbatchError`` listing every problem.

    ``command_line``: sbatch options given on the command line (they override the script's). Horizon's
    own options (``--job-id``, ``--tenant`` ...) are the caller's and are refused here.
    ``wrap``: the command of ``sbatch --wrap`` (then ``text`` is ignored, as no script is read).
    """
    problems: list[str] = []
    if wrap is None:
        interpreter = _interpreter(text)
        directives, body, bad = read_directives(text)
        problems.extend(bad)
    else:
        interpreter, directives, body = ["/bin/sh", "-c", wrap], [], wrap
    cli, stop, bad = getopt(list(command_line), "command line")
    problems.extend(bad)
    if stop < len(command_line):
        problems.append(f"command line: {command_line[stop]!r} is not an option")
    for d in directives:
        opt = OPTIONS[d.option]
        if opt.horizon:
            problems.append(d.problem("a horizon sbatch option: give it on the command line"))
        elif d.option in _COMMAND_LINE_ONLY:
            problems.append(d.problem("only allowed on the command line"))
    for d in [*directives, *cli]:
        opt = OPTIONS[d.option]
        if opt.unsupported:
            problems.append(d.problem(f"not supported: {opt.unsupported}"))
        elif opt.horizon:
            if d.where == "command line":
                problems.append(d.problem("not an sbatch option (horizon sbatch reads it before the script)"))
    given: dict[str, Directive] = {}
    for d in [*directives, *cli]:  # later wins; the command line last
        opt = OPTIONS[d.option]
        if not (opt.unsupported or opt.horizon or d.option in _COMMAND_LINE_ONLY and d.where != "command line"):
            given[d.option] = d
    fields = _resolve(given, defaults, interpreter, problems)
    if problems:
        raise SbatchError(sorted(problems, key=_line_of))
    return fields, body


def _line_of(problem: str) -> int:
    m = re.match(r"^line (\d+):", problem)
    return int(m[1]) if m else 1 << 30


def _value(given: dict[str, Directive], name: str, parse: Any, problems: list[str]) -> Any:
    d = given.get(name)
    if d is None:
        return None
    try:
        return parse(d.value if d.value is not None else "")
    except _Problem as exc:
        problems.append(d.problem(str(exc)))
    except ResourceError as exc:
        problems.append(d.problem(f"{exc.value!r} {exc.problem}; accepted: {exc.accepted}"))
    return None


def _nodes(text: str) -> int:
    low, sep, high = text.partition("-")
    n = _count(low, "a number of nodes")
    if sep and _count(high, "a number of nodes") != n:
        raise _Problem(f"{text!r}: a range of node counts is not supported: Horizon's gangs have a fixed number "
                       "of nodes")
    return n


def _partition(text: str) -> str:
    if "," in text:
        raise _Problem(f"{text!r}: one partition (Horizon placement profile) only")
    if not text.strip():
        raise _Problem("is empty")
    return text.strip()


def _nice(text: str) -> int:
    if text == "":
        return 100  # Slurm's --nice without a value
    try:
        value = int(text)
    except ValueError:
        raise _Problem(f"{text!r} is not a whole number") from None
    if not -10000 <= value <= 10000:
        raise _Problem(f"{value} is outside -10000..10000")
    return value


def _array(text: str) -> str:
    parse_array(text, "--array")
    return text.strip()


def _export(text: str) -> list[tuple[str, str | None]]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise _Problem("is empty")
    if items[0].upper() in ("NONE", "NIL") and len(items) == 1:
        return []
    if any(x.upper() == "ALL" for x in items):
        raise _Problem("copying the whole environment (ALL, Slurm's default) is not supported: the log is read "
                       "by others and keeps everything; name the variables: --export=VAR,VAR=value")
    out: list[tuple[str, str | None]] = []
    for item in items:
        name, eq, value = item.partition("=")
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise _Problem(f"{name!r} is not a variable name")
        out.append((name, value if eq else None))
    return out


def _choice(*allowed: str) -> Any:
    def parse(text: str) -> str:
        if text.lower() not in allowed:
            raise _Problem(f"{text!r} is not one of {', '.join(allowed)}")
        return text.lower()

    return parse


def _text(text: str) -> str:
    if not text.strip():
        raise _Problem("is empty")
    return text


def _resolve(given: dict[str, Directive], defaults: SbatchDefaults, interpreter: list[str],
             problems: list[str]) -> dict[str, Any]:
    def get(name: str, parse: Any) -> Any:
        return _value(given, name, parse, problems)

    def fail(name: str, text: str) -> None:
        problems.append(given[name].problem(text))

    # -- shape: nodes x tasks per node (Horizon's gangs are uniform)
    nodes = get("nodes", _nodes)
    ntasks = get("ntasks", lambda t: _count(t, "a number of tasks"))
    per_node = get("ntasks-per-node", lambda t: _count(t, "a number of tasks per node"))
    if ntasks is not None:
        if nodes is None:
            nodes = 1 if per_node is None else math.ceil(ntasks / per_node)
        if ntasks % nodes:
            fail("ntasks", f"{ntasks} tasks do not divide evenly over {nodes} node(s): Horizon puts the same number "
                           "of tasks on every node; give --nodes and --ntasks-per-node")
            per_node = per_node or 1
        elif per_node is not None and ntasks // nodes > per_node:
            fail("ntasks", f"{ntasks} tasks over {nodes} node(s) is more than --ntasks-per-node={per_node}")
        else:
            per_node = ntasks // nodes
    nodes = nodes or 1
    per_node = per_node or 1
    tasks = nodes * per_node

    # -- GPUs per task, from whichever form was given (they must agree)
    gpu_type: str | None = None
    gpus_per_task: int | None = None
    gpu_forms: list[tuple[str, str | None, int | None]] = []  # option, type, per task
    for name, parse, divisor in (("gpus-per-task", lambda t: _gpu_spec(t, "GPUs"), 1),
                                 ("gpus-per-node", lambda t: _gpu_spec(t, "GPUs"), per_node),
                                 ("gres", _gres, per_node),
                                 ("gpus", lambda t: _gpu_spec(t, "GPUs"), tasks)):
        spec = get(name, parse)
        if spec is None:
            continue
        kind, count = spec
        if count % divisor:
            scope = "per node" if divisor == per_node and name != "gpus" else "in all"
            fail(name, f"{count} GPUs {scope} do not divide evenly over {divisor} task(s): Horizon gives each task "
                       "whole GPUs")
            continue
        gpu_forms.append((name, kind, count // divisor))
    type_from = ""
    for name, kind, count in gpu_forms:
        if gpus_per_task is not None and count != gpus_per_task:
            fail(name, f"asks for {count} GPU(s) per task where --{gpu_forms[0][0]} asks for {gpus_per_task}")
        if kind and gpu_type and kind != gpu_type:
            fail(name, f"asks for GPU type {kind} where --{type_from} asks for {gpu_type}")
        gpus_per_task = count if gpus_per_task is None else gpus_per_task
        if kind and not gpu_type:
            gpu_type, type_from = kind, name
    gpus = gpus_per_task or 0
    if gpus == 0:
        gpu_type = None

    # -- CPUs per task
    cpus = get("cpus-per-task", lambda t: _count(t, "a number of CPUs"))
    cpus_per_gpu = get("cpus-per-gpu", lambda t: _count(t, "a number of CPUs"))
    if cpus_per_gpu is not None:
        if "cpus-per-task" in given:
            fail("cpus-per-gpu", "and --cpus-per-task exclude each other (as in Slurm)")
        elif gpus == 0:
            fail("cpus-per-gpu", "needs GPUs (--gres, --gpus, --gpus-per-node or --gpus-per-task)")
        else:
            cpus = cpus_per_gpu * gpus
    cpus = cpus or 1

    # -- memory per task (Horizon counts memory per task; --mem is per node)
    memory: int | None = None
    mem_forms = [name for name in ("mem", "mem-per-cpu", "mem-per-gpu") if name in given]
    if len(mem_forms) > 1:
        fail(mem_forms[1], f"and --{mem_forms[0]} exclude each other (as in Slurm)")
    elif mem_forms:
        size = get(mem_forms[0], slurm_memory)
        if size is not None:
            if size == 0:
                fail(mem_forms[0], "0 (all of each node's memory) is not supported: give an amount")
            elif mem_forms[0] == "mem":
                memory = -(-size // per_node)  # per node -> per task, rounded up to a byte
            elif mem_forms[0] == "mem-per-cpu":
                memory = size * cpus
            elif gpus == 0:
                fail("mem-per-gpu", "needs GPUs (--gres, --gpus, --gpus-per-node or --gpus-per-task)")
            else:
                memory = size * gpus

    time_limit = get("time", slurm_time)
    array = get("array", _array)
    dependencies = get("dependency", parse_dependencies)
    nice = get("nice", _nice)
    partition = get("partition", _partition)
    qos = get("qos", _text)
    account = get("account", _text)
    name = get("job-name", _text)
    comment = get("comment", lambda t: t)
    export = get("export", _export)
    open_mode = get("open-mode", _choice("append", "truncate"))
    get("kill-on-invalid-dep", _kill_on_invalid_dep)
    output = get("output", _filename)
    error = get("error", _filename)
    chdir = get("chdir", _text)
    if problems:
        return {}

    user = defaults.user
    account = account or defaults.account
    name = name if name is not None else (Path(defaults.script_path).name if defaults.script_path else "wrap")
    env: dict[str, str] = {}
    for var, value in export or []:
        if value is not None:
            env[var] = value
        elif var in defaults.environ:
            env[var] = defaults.environ[var]
    env.update(_slurm_environment(defaults, user, account, nodes, per_node, tasks, cpus if (
        "cpus-per-task" in given or "cpus-per-gpu" in given) else None, gpus * per_node, partition, qos, array,
        "ntasks-per-node" in given))
    workdir = os.path.join(defaults.workdir, chdir) if chdir else defaults.workdir
    program = interpreter if defaults.script_path == "" else [*interpreter, defaults.script_path]
    command = ["/bin/sh", "-c", _wrapper(workdir, output, error, open_mode or "truncate", array is not None,
                                         nodes, [*program, *defaults.script_args]), "horizon-sbatch"]
    fields: dict[str, Any] = {
        "name": name,
        "account": account,
        "user": user,
        "command": command,
        "env": env,
        "resources": c.ResourceRequest(cpus=str(cpus), memory=memory if memory is not None else "1Gi", gpus=gpus,
                                       gpu_type=gpu_type),
        "nodes": nodes,
        "tasks_per_node": per_node,
        "time_limit_s": time_limit,
        "array": array,
        "dependencies": dependencies or [],
        "nice": nice or 0,
        "qos": qos or "",
        "profile": partition or "default",
        "labels": {"comment": comment} if comment else {},
    }
    return fields


def _kill_on_invalid_dep(text: str) -> bool:
    if text.lower() != "yes":
        raise _Problem("only 'yes' is supported: Horizon ends a job whose dependency can never be met "
                       "(DEPENDENCY_NEVER_SATISFIED)")
    return True


def _slurm_environment(defaults: SbatchDefaults, user: str, account: str, nodes: int, per_node: int, tasks: int,
                       cpus: int | None, gpus_per_node: int, partition: str | None, qos: str | None,
                       array: str | None, per_node_given: bool) -> dict[str, str]:
    """The Slurm variables a batch script may read that are known at submission (the agent sets
    ``SLURM_JOB_ID`` and ``SLURM_JOB_NAME``; the wrapper the ones only known on the node)."""
    env = {
        "SLURM_SUBMIT_DIR": defaults.workdir,
        "SLURM_JOB_USER": user,
        "SLURM_JOB_ACCOUNT": account,
        "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_NNODES": str(nodes),
        "SLURM_NTASKS": str(tasks),
        "SLURM_NPROCS": str(tasks),
    }
    if per_node_given:
        env["SLURM_NTASKS_PER_NODE"] = str(per_node)
    if cpus is not None:
        env["SLURM_CPUS_PER_TASK"] = str(cpus)
    if gpus_per_node:
        env["SLURM_GPUS_ON_NODE"] = str(gpus_per_node)
    if partition:
        env["SLURM_JOB_PARTITION"] = partition
    if qos:
        env["SLURM_JOB_QOS"] = qos
    if array is not None:
        spec = parse_array(array, "--array")
        env.update(SLURM_ARRAY_TASK_COUNT=str(len(spec.indices)), SLURM_ARRAY_TASK_MIN=str(spec.indices[0]),
                   SLURM_ARRAY_TASK_MAX=str(spec.indices[-1]))
    return env


def _wrapper(workdir: str, output: str | None, error: str | None, open_mode: str, array: bool, nodes: int,
             program: list[str]) -> str:
    """The POSIX shell the agent runs: working directory, node-side Slurm variables, output, then the script."""
    lines = [f"cd -- {shlex.quote(workdir)} || exit 1"]
    if array:  # a task's id is <array id>_<index>
        lines.append('export SLURM_ARRAY_JOB_ID="${SLURM_JOB_ID%_*}" SLURM_ARRAY_TASK_ID="${SLURM_JOB_ID##*_}"')
    lines.append('export SLURMD_NODENAME="${HORIZON_NODE}"')
    if nodes == 1:
        lines.append('export SLURM_JOB_NODELIST="${HORIZON_NODE}" SLURM_NODELIST="${HORIZON_NODE}"')
    redirect = ">>" if open_mode == "append" else ">"
    if output is not None and error is not None:
        lines.append(f"exec {redirect}{output} 2{redirect}{error} || exit 1")
    elif output is not None:
        lines.append(f"exec {redirect}{output} 2>&1 || exit 1")
    elif error is not None:
        lines.append(f"exec 2{redirect}{error} || exit 1")
    lines.append("exec " + " ".join(shlex.quote(p) for p in program))
    return "\n".join(lines) + "\n"


_LAUNCHERS = re.compile(r"(?:^|[\s;|&(`])(srun|scontrol|mpirun|mpiexec)(?=\s|$)")


def script_warnings(text: str, nodes: int = 1) -> list[str]:
    """What a script runs that will not work as on Slurm (not errors: the script may bring its own).

    Horizon runs the script once, on the job's first node, and has no ``srun`` or ``scontrol``; a
    multi-node job must start its processes on the other nodes itself.
    """
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
        m = _LAUNCHERS.search(code)
        if m is None:
            continue
        if m[1] in ("srun", "scontrol"):
            out.append(f"line {number}: {m[1]}: Horizon has no {m[1]}; the script runs once, on the job's first "
                       "node (docs/slurm.md)")
        elif nodes > 1:
            out.append(f"line {number}: {m[1]}: Horizon gives the script no host file; it runs on the job's first "
                       "node (docs/slurm.md)")
    return out


# --------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------

_HORIZON_FLAGS = {"json", "dry-run", "check", "no-wait", "parsable", "quiet", "verbose"}


def split_command_line(args: Sequence[str]) -> tuple[dict[str, Any], list[str], list[str], list[str]]:
    """``horizon sbatch`` arguments -> (Horizon's options, sbatch options, [script] or [], the script's arguments)."""
    directives, stop, problems = getopt(list(args), "command line")
    if problems:
        raise SbatchError(problems)
    ours: dict[str, Any] = {}
    sbatch: list[str] = []
    for d in directives:
        opt = OPTIONS[d.option]
        if opt.horizon or d.option in ("parsable", "quiet", "verbose"):
            ours[d.option] = True if d.option in _HORIZON_FLAGS else d.value
        else:
            sbatch.append(f"--{d.option}" if d.value is None else f"--{d.option}={d.value}")
    rest = list(args[stop:])
    return ours, sbatch, rest[:1], rest[1:]


def _submission(args: Sequence[str]) -> tuple[dict[str, Any], c.JobSubmitted, str]:
    from services.cli.client import default_tenant, default_user

    ours, sbatch, script, script_args = split_command_line(args)
    sbatch_opts = [o for o in sbatch if not o.startswith("--wrap=")]
    wrap = next((o[len("--wrap="):] for o in sbatch if o.startswith("--wrap=")), None)
    if wrap is None and not script:
        raise click.UsageError("give the batch script: horizon sbatch [OPTIONS] SCRIPT [ARGS...] (or --wrap CMD)")
    if wrap is not None and script:
        raise click.UsageError("--wrap takes the place of a script: give one or the other")
    text = ""
    path = ""
    if script:
        path = os.path.abspath(script[0])
        try:
            text = Path(path).read_text(errors="replace")
        except OSError as exc:
            raise click.ClickException(f"cannot read {script[0]}: {exc.strerror}") from None
    user = default_user()
    defaults = SbatchDefaults(user=user, workdir=os.getcwd(), script_path=path, script_args=tuple(script_args),
                              environ=dict(os.environ))
    try:
        fields, _ = parse_sbatch(text, defaults=defaults, command_line=sbatch_opts, wrap=wrap)
    except SbatchError as exc:
        name = script[0] if script else "--wrap"
        raise click.ClickException(f"{name}: " + str(exc)) from None
    tenant = ours.get("tenant") or default_tenant()
    job_id = ours.get("job-id") or (
        f"{user if valid_token(user) else 'job'}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}")
    if ours.get("priority-class") is not None:
        if ours["priority-class"] not in c.PRIORITY_CLASSES:
            raise click.BadParameter(f"{ours['priority-class']!r} is not one of {', '.join(c.PRIORITY_CLASSES)}",
                                     param_hint="--priority-class")
        fields["priority_class"] = ours["priority-class"]
    if ours.get("sim-runtime") is not None:
        try:
            fields["sim_runtime_s"] = float(ours["sim-runtime"])
        except ValueError:
            raise click.BadParameter(f"{ours['sim-runtime']!r} is not a number of seconds",
                                     param_hint="--sim-runtime") from None
    event = c.JobSubmitted(ts=time.time(), source="horizon-sbatch", correlation_id=job_id, job_id=job_id,
                           tenant=tenant, **fields)
    return ours, event, text


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def sbatch(args: tuple[str, ...]) -> None:
    """Submit a Slurm batch script: horizon sbatch [OPTIONS] SCRIPT [ARGS...]

    \b
    Reads the script's #SBATCH directives as sbatch does; OPTIONS are sbatch's
    (-N 2, --gres=gpu:a100:4, --time=2:00:00, --array=0-9%2, --dependency=afterok:J,
    ...) and override the script's. A directive Horizon cannot honour is an
    error naming its line (docs/slurm.md lists them all).

    \b
    Horizon's own options (before SCRIPT):
      --nats URL             NATS server (default $HORIZON_NATS_URL or nats://127.0.0.1:4222)
      --tenant T             your tenant (default $HORIZON_TENANT or default)
      --job-id ID            your id for the job (default: generated)
      --priority-class C     critical, high, normal, low or scavenger
      --sim-runtime S        seconds a simulated job runs (sim executor)
      --dry-run              print the JobSubmitted as JSON, submit nothing
      --check                ask Horizon whether it would accept the job, submit nothing
      --no-wait              do not wait for acceptance
      --json                 print {"job_id": ..., "state": ...}
      --parsable             print only the job id (as sbatch --parsable)
      -Q, --quiet            print nothing on success
      -v, --verbose          also print the job's resources to stderr
    """
    from services.cli.jobs import check_submission, report_check, send_submission

    ours, event, text = _submission(args)
    if not ours.get("quiet"):
        for warning in script_warnings(text, event.nodes):
            click.echo(f"horizon sbatch: warning: {warning}", err=True)
    if ours.get("dry-run"):
        click.echo(msgspec.json.encode(event).decode())
        return
    if ours.get("verbose"):
        r = event.resources
        click.echo(f"horizon sbatch: {event.nodes} node(s) x {event.tasks_per_node} task(s), per task {r.cpus} CPUs, "
                   f"{r.memory} bytes of memory, {r.gpus} GPU(s){' ' + r.gpu_type if r.gpu_type else ''}; "
                   f"time limit {event.time_limit_s} s; profile {event.profile}", err=True)
    nats_url = ours.get("nats") or os.environ.get("HORIZON_NATS_URL") or "nats://127.0.0.1:4222"
    if ours.get("check"):
        report_check(check_submission(nats_url, event), event.job_id, bool(ours.get("json")))
        return
    result = send_submission(nats_url, event, no_wait=bool(ours.get("no-wait")))
    if result["state"] == "REJECTED":
        if ours.get("json"):
            click.echo(json.dumps(result))
        raise click.ClickException(f"job {event.job_id} rejected: {result['reason']}")
    if ours.get("json"):
        click.echo(json.dumps(result))
    elif ours.get("parsable"):
        click.echo(event.job_id)
    elif not ours.get("quiet"):
        click.echo(f"Submitted batch job {event.job_id}")


def register(group: click.Group) -> None:
    group.add_command(sbatch)
