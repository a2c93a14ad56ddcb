"""srun's options, read the way srun reads them (``parse_srun``, pure): what goes to the node's agent as a
step's request, what srun does itself, and what an option accepted here does not do (``NO_EFFECT``).

Running the step is ``services/front/slurm/srun.py``'s; the options are listed in its docstring.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.domain.hetjob import HetGroupError, parse_het_groups

__all__ = ["SrunArgs", "SrunError", "parse_srun", "SRUN_OPTIONS", "NO_EFFECT"]


class SrunError(ValueError):
    """srun's options make no step; the message says which and why."""


# long name -> (short letter, takes a value)
SRUN_OPTIONS: dict[str, tuple[str | None, bool]] = {
    "het-group": (None, True), "pack-group": (None, True),  # a heterogeneous job's components (--pack-group: old)
    "ntasks": ("n", True), "nodes": ("N", True), "ntasks-per-node": (None, True), "tasks-per-node": (None, True),
    "cpus-per-task": ("c", True), "gpus-per-task": (None, True), "gpus-per-node": (None, True),
    "gres": (None, True), "nodelist": ("w", True), "exclude": ("x", True), "distribution": ("m", True),
    "overcommit": ("O", False), "label": ("l", False), "unbuffered": ("u", False), "export": (None, True),
    "kill-on-bad-exit": ("K", False), "time": ("t", True), "job-name": ("J", True), "chdir": ("D", True),
    "output": ("o", True), "error": ("e", True), "open-mode": (None, True), "verbose": ("v", False),
    "quiet": ("Q", False), "mpi": (None, True), "cpu-bind": (None, True), "exclusive": (None, False),
    "exact": (None, False), "overlap": (None, False), "mem": (None, True), "mem-per-cpu": (None, True),
    "mem-per-gpu": (None, True), "hint": (None, True), "gpu-bind": (None, True), "partition": ("p", True),
    "account": ("A", True), "qos": ("q", True), "wait": ("W", True), "disable-status": ("X", False),
    "propagate": (None, False), "threads-per-core": (None, True), "cores-per-socket": (None, True),
    "sockets-per-node": (None, True), "ntasks-per-socket": (None, True), "ntasks-per-core": (None, True),
    "ntasks-per-gpu": (None, True), "cpu-freq": (None, True), "mem-bind": (None, True), "comment": (None, True),
    "jobid": (None, True), "pty": (None, False), "input": ("i", True), "gpus": ("G", True),
    "unbuffered-output": (None, False), "accel-bind": (None, True), "network": (None, True),
    "constraint": ("C", True), "reservation": (None, True), "nice": (None, True), "immediate": ("I", False),
    "kill-command": (None, True), "external-launcher": (None, False), "mpi-bind": (None, True),
    "licenses": ("L", True),
}
# Options srun accepts that change nothing here, and why (srun -v says so).
NO_EFFECT: dict[str, str] = {
    "licenses": "a step runs on its job's licenses: the job holds what sbatch -L asked for until it ends",
    "mpi": "Horizon runs no PMI/PMIx server: the tasks get SLURM_PROCID, SLURM_NTASKS, ... and an MPI library "
           "that starts from those (or a launcher that uses srun to start its daemons) works; one that needs "
           "PMIx from srun does not",
    "cpu-bind": "tasks share the job's CPUs on their node (its cgroup's cpuset); they are not bound one by one",
    "exclusive": "steps share the job's CPUs; each step runs at once",
    "exact": "steps share the job's CPUs; each step runs at once",
    "overlap": "steps always share the job's resources",
    "mem": "a step has no memory limit of its own: the job's limit on each node holds for all its steps",
    "mem-per-cpu": "a step has no memory limit of its own: the job's limit on each node holds for all its steps",
    "mem-per-gpu": "a step has no memory limit of its own: the job's limit on each node holds for all its steps",
    "hint": "no CPU layout hints", "gpu-bind": "GPUs go to tasks by --gpus-per-task, in order",
    "mem-bind": "no memory binding", "cpu-freq": "no CPU frequency control",
    "partition": "a step runs in its job's allocation", "account": "a step runs in its job's allocation",
    "qos": "a step runs in its job's allocation", "reservation": "a step runs in its job's allocation",
    "constraint": "a step runs in its job's allocation", "nice": "a step runs in its job's allocation",
    "wait": "the step ends when all its tasks have", "disable-status": "", "propagate": "limits are the job's",
    "threads-per-core": "no CPU layout", "cores-per-socket": "no CPU layout", "sockets-per-node": "no CPU layout",
    "ntasks-per-socket": "no CPU layout", "ntasks-per-core": "no CPU layout", "accel-bind": "no binding",
    "network": "no network options", "comment": "", "unbuffered-output": "", "immediate": "a step starts at once",
    "jobid": "srun runs in the job it is called from", "kill-command": "", "external-launcher": "",
    "mpi-bind": "no binding",
}
_REFUSED = {
    "pty": "a step's tasks have no terminal here (use horizon logs -f to watch a job)",
    "input": "a step's tasks read no input here (their standard input is /dev/null)",
    "gpus": "give the step's GPUs per task (--gpus-per-task) or per node (--gpus-per-node)",
    "ntasks-per-gpu": "give --gpus-per-task instead",
}
_SHORT = {short: name for name, (short, _) in SRUN_OPTIONS.items() if short}


@dataclass
class SrunArgs:
    """srun's parsed command line: what goes to the agent (``request``), what srun does itself."""

    command: list[str]
    request: dict[str, Any] = field(default_factory=dict)
    label: bool = False
    unbuffered: bool = False
    output: str | None = None
    error: str | None = None
    open_mode: str = "truncate"
    verbose: int = 0
    quiet: bool = False
    chdir: str | None = None
    name: str | None = None
    notes: list[str] = field(default_factory=list)  # what an accepted option does not do here


def _count(text: str, what: str, minimum: int = 1) -> int:
    value = text.strip()
    if not value.isdigit() or int(value) < minimum:
        raise SrunError(f"{what}: {text!r} is not a whole number of at least {minimum}")
    return int(value)


def _gpus(text: str, what: str) -> int:
    """``[type:]N`` (a type is the job's already; only the count matters to a step)."""
    return _count(text.rsplit(":", 1)[-1], what, minimum=0)


def _gres(text: str) -> int:
    for item in text.split(","):
        parts = item.strip().removeprefix("gres/").split(":")
        if parts[0] != "gpu":
            raise SrunError(f"--gres: {item!r}: only gpu is a resource here (gpu:N)")
        return _count(parts[-1], "--gres", 0) if len(parts) > 1 and parts[-1].isdigit() else 1
    raise SrunError("--gres: is empty")


def _minutes(text: str) -> float:
    """srun's ``--time``: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``."""
    value = text.strip()
    days = 0
    if "-" in value:
        d, value = value.split("-", 1)
        days = _count(d, "--time", 0)
        parts = [_count(p, "--time", 0) for p in value.split(":")]
        parts += [0] * (3 - len(parts))
        return float(days * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2])
    parts = [_count(p, "--time", 0) for p in value.split(":")]
    if len(parts) == 1:
        return parts[0] * 60.0
    if len(parts) == 2:
        return parts[0] * 60.0 + parts[1]
    if len(parts) == 3:
        return parts[0] * 3600.0 + parts[1] * 60 + parts[2]
    raise SrunError(f"--time: {text!r} is not a time (M, M:S, H:M:S, D-H, D-H:M:S)")


def _hosts(text: str) -> list[str]:
    from services.domain.hostlist import HostlistError, expand

    if text.startswith("/") or os.path.isfile(text):  # Slurm reads a file of host names
        try:
            with open(text) as fh:
                text = ",".join(line.strip() for line in fh if line.strip())
        except OSError as exc:
            raise SrunError(f"cannot read {text}: {exc.strerror}") from None
    try:
        return expand(text)
    except HostlistError as exc:
        raise SrunError(str(exc)) from None


def _tokens(args: Sequence[str]) -> tuple[list[tuple[str, str | None, str]], list[str]]:
    """(option, value, as given) up to the command, and the command (getopt without permutation)."""
    out: list[tuple[str, str | None, str]] = []
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            return out, list(args[i + 1:])
        if not token.startswith("-") or token == "-":
            return out, list(args[i:])
        i += 1
        if token.startswith("--"):
            name, eq, value = token[2:].partition("=")
            matches = [n for n in SRUN_OPTIONS if n == name] or [n for n in SRUN_OPTIONS if n.startswith(name)]
            if len(matches) != 1:
                raise SrunError(f"unrecognized option '--{name}'" if not matches else
                                f"option '--{name}' is ambiguous: {', '.join('--' + m for m in sorted(matches))}")
            name = matches[0]
            takes = SRUN_OPTIONS[name][1]
            if name == "kill-on-bad-exit":  # an optional value: -K, --kill-on-bad-exit[=0|1]
                out.append((name, value if eq else None, token))
            elif not takes:
                if eq:
                    raise SrunError(f"option '--{name}' takes no value")
                out.append((name, None, token))
            elif eq:
                out.append((name, value, token))
            elif i < len(args):
                out.append((name, args[i], token))
                i += 1
            else:
                raise SrunError(f"option '--{name}' needs a value")
            continue
        chars = token[1:]
        while chars:
            letter, chars = chars[0], chars[1:]
            name = _SHORT.get(letter)
            if name is None:
                raise SrunError(f"invalid option -- '{letter}'")
            if not SRUN_OPTIONS[name][1]:
                out.append((name, None, f"-{letter}"))
                continue
            if chars:
                out.append((name, chars, f"-{letter}"))
            elif i < len(args):
                out.append((name, args[i], f"-{letter}"))
                i += 1
            else:
                raise SrunError(f"option requires an argument -- '{letter}'")
            break
    return out, []


def parse_srun(args: Sequence[str], environ: Mapping[str, str] | None = None) -> SrunArgs:
    """srun's command line (and the variables srun reads) -> ``SrunArgs``; ``SrunError`` names a problem."""
    environ = os.environ if environ is None else environ
    options, command = _tokens(args)
    if not command:
        raise SrunError("no command to run: srun [OPTIONS] COMMAND [ARGS...]")
    if ":" in command:  # Slurm's step over several components with their own options and commands
        raise SrunError("srun's ':' form (a step of several components, each with its options and command) is not "
                        "supported here: run one command over components with --het-group=0,1")
    parsed = SrunArgs(command)
    request = parsed.request
    gpt = environ.get("SLURM_GPUS_PER_TASK", "").strip()
    if gpt:
        request["gpus_per_task"] = _gpus(gpt, "SLURM_GPUS_PER_TASK")
    # --export's default, as Slurm's srun reads it (SRUN_EXPORT_ENV first): sbatch --export=NONE (or a list)
    # sets SLURM_EXPORT_ENV in the job, so its steps take the same unless the script says otherwise
    export = (environ.get("SRUN_EXPORT_ENV") or environ.get("SLURM_EXPORT_ENV") or "").strip()
    if export:
        request["export"] = export
    for name, value, given in options:
        v = value or ""
        if name in _REFUSED:
            raise SrunError(f"{given}: not supported inside a Horizon job: {_REFUSED[name]}")
        if name == "ntasks":
            request["ntasks"] = _count(v, given)
        elif name == "nodes":
            low, _, _high = v.partition("-")  # a range: at least its low end (the step has the job's nodes)
            request["nodes"] = _count(low, given)
        elif name in ("ntasks-per-node", "tasks-per-node"):
            request["ntasks_per_node"] = _count(v, given)
        elif name == "cpus-per-task":
            request["cpus_per_task"] = _count(v, given)
        elif name == "gpus-per-task":
            request["gpus_per_task"] = _gpus(v, given)
        elif name == "gpus-per-node":
            request["gpus_per_node"] = _gpus(v, given)
        elif name == "gres":
            request["gpus_per_node"] = _gres(v)
        elif name == "nodelist":
            request["nodelist"] = _hosts(v)
        elif name == "exclude":
            request["exclude"] = _hosts(v)
        elif name == "distribution":
            kind = v.split(":", 1)[0].split(",", 1)[0].strip().lower() or "block"
            if kind not in ("block", "cyclic", "*"):
                raise SrunError(f"{given}: {v!r}: Horizon lays tasks out block or cyclic")
            request["distribution"] = "block" if kind == "*" else kind
        elif name == "overcommit":
            request["overcommit"] = True
        elif name == "label":
            parsed.label = True
        elif name in ("unbuffered", "unbuffered-output"):
            parsed.unbuffered = True
        elif name in ("het-group", "pack-group"):  # a heterogeneous job's components to run on (default: 0)
            try:
                request["het_group"] = list(parse_het_groups(v))
            except HetGroupError as exc:
                raise SrunError(str(exc).replace("--het-group", given, 1)) from None
        elif name == "export":
            request["export"] = v.strip()
        elif name == "kill-on-bad-exit":
            request["kill_on_bad_exit"] = value is None or value.strip() not in ("0", "no")
        elif name == "time":
            request["time_limit_s"] = _minutes(v)
        elif name == "job-name":
            parsed.name = v
        elif name == "chdir":
            parsed.chdir = v
        elif name == "output":
            parsed.output = v
        elif name == "error":
            parsed.error = v
        elif name == "open-mode":
            if v.lower() not in ("append", "truncate"):
                raise SrunError(f"{given}: {v!r} is not append or truncate")
            parsed.open_mode = v.lower()
        elif name == "verbose":
            parsed.verbose += 1
        elif name == "quiet":
            parsed.quiet = True
        elif name == "cpu-bind" and v.split(",")[0].strip().lower() in ("none", "no", "verbose", "quiet"):
            continue
        elif NO_EFFECT.get(name):
            parsed.notes.append(f"{given}: accepted, no effect here: {NO_EFFECT[name]}")
    return parsed
