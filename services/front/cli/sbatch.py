"""``horizon sbatch SCRIPT``: a Slurm batch script, read the way ``sbatch`` reads it, submitted as a ``JobSubmitted``.

Reading is pure (``parse_sbatch``): the directives and the option table are in
``services/front/slurm/sbatch_options.py``, the values in Slurm's syntax in
``services/front/slurm/slurm_values.py``; here they become a job's fields. The script
must start with ``#!`` and an interpreter, which runs it; options on the
``horizon sbatch`` command line override the script's, and a later option
overrides an earlier one.

An option that would make the job compute or do something else if ignored is
an error naming the option and its line, never ignored; all such problems of a
script are reported together. One that only changes how fast or where the job
runs, or who is told (mail, layout hints), is accepted with a warning naming
its line (``parse_sbatch``'s ``warnings``). The mapping and its limits are in
docs/slurm.md, and in ``OPTIONS``.

How the job runs: the agent runs a short ``/bin/sh`` wrapper that changes to
the working directory (the directory ``horizon sbatch`` ran in, or
``--chdir``), sets the array's Slurm variables (the agent sets those of the
allocation: ``SLURMD_NODENAME``, ``SLURM_JOB_NODELIST``, ...), redirects output as
``--output``/``--error`` say, and execs the script's interpreter on the
script's path with its arguments. The script is read from its path when the
job starts (Slurm keeps a copy taken at submission): do not edit a script
while its job waits. Submitting is ``services/front/client/submitter.py``'s, as for ``horizon submit``.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import shlex
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import click
import msgspec

from events import catalogue as c
from events.arrays import parse_array
from events.resources import ResourceError
from events.vocabulary import NICE_LIMIT
from services.front.client.client import default_user, query, session
from services.front.cli.options import resolve_nats, run, tenant_for
from services.front.slurm.sbatch_options import COMMAND_LINE_ONLY, OPTIONS, Directive, SbatchError, getopt, read_directives
from services.front.slurm.slurm_values import (
    Problem,
    checkpoint_signal,
    gpu_spec,
    gres,
    host_list,
    parse_dependency_list,
    split_datasets,
    slurm_memory,
    slurm_begin,
    slurm_signal,
    slurm_time,
    whole_number,
)
from services.domain.features import ConstraintError, parse_constraint
from services.domain.output import pattern_problem
from services.front.client.submitter import check_submission, new_job_id, print_warnings, report_check, send_submission

__all__ = ["SbatchDefaults", "parse_sbatch", "script_warnings", "split_command_line", "register"]


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
    now: datetime | None = None  # the submitter's clock and time zone, for --begin (None: read it then)
    submit_host: str = ""  # the machine horizon sbatch runs on (SLURM_SUBMIT_HOST)


def _interpreter(text: str) -> list[str]:
    """The ``#!`` line as the kernel reads it: the interpreter and at most one argument."""
    first = text.split("\n", 1)[0].rstrip("\r")
    if not first.startswith("#!") or not first[2:].strip():
        raise SbatchError(["line 1: a batch script must begin with #! and an interpreter, e.g. #!/bin/bash "
                           "(as for sbatch)"])
    parts = first[2:].strip().split(None, 1)
    return [parts[0], parts[1].strip()] if len(parts) == 2 else parts


def parse_sbatch(text: str, *, defaults: SbatchDefaults, command_line: Sequence[str] = (),
                 wrap: str | None = None, warnings: list[str] | None = None,
                 flags: set[str] | None = None) -> tuple[dict[str, Any], str]:
    """The ``JobSubmitted`` fields a batch script and command-line options make, and the script's body
    (what follows the directives). Raises ``SbatchError`` listing every problem.

    ``command_line``: sbatch options given on the command line (they override the script's). Horizon's
    own options (``--job-id``, ``--tenant`` ...) are the caller's and are refused here.
    ``wrap``: the command of ``sbatch --wrap`` (then ``text`` is ignored, as no script is read).
    ``warnings``: gets one line per directive accepted that does less here than in Slurm (where, the
    option, what it would do), in the order given. ``flags``: gets the output options given as
    directives (``parsable``, ``quiet``, ``verbose``), which are the command's to honour.
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
        elif d.option in COMMAND_LINE_ONLY:
            problems.append(d.problem("only allowed on the command line"))
    notes: list[tuple[int, str]] = []  # (the directive's place among all given, the warning)
    every = [*directives, *cli]
    place = {id(d): i for i, d in enumerate(every)}
    for d in every:
        opt = OPTIONS[d.option]
        if opt.unsupported:
            problems.append(d.problem(f"not supported: {opt.unsupported}"))
        elif opt.horizon:
            if d.where == "command line":
                problems.append(d.problem("not an sbatch option (horizon sbatch reads it before the script)"))
        elif opt.warn:
            notes.append((place[id(d)], d.problem(f"no effect here: {opt.warn}")))
        elif d.option in _OUTPUT_FLAGS and flags is not None:
            flags.add(d.option)
    given: dict[str, Directive] = {}
    for d in [*directives, *cli]:  # later wins; the command line last
        opt = OPTIONS[d.option]
        if not (opt.unsupported or opt.horizon or d.option in COMMAND_LINE_ONLY and d.where != "command line"):
            given[d.option] = d
    # --requeue and --no-requeue set one thing: the later of them counts
    last = next((d.option for d in reversed([*directives, *cli]) if d.option in ("requeue", "no-requeue")), None)
    if last is not None:
        given.pop("no-requeue" if last == "requeue" else "requeue", None)
    fields = _resolve(given, defaults, interpreter, problems,
                      lambda d, text: notes.append((place[id(d)], d.problem(text))))
    if problems:
        raise SbatchError(sorted(problems, key=_line_of))
    if warnings is not None:
        warnings.extend(text for _, text in sorted(notes))
    return fields, body


_OUTPUT_FLAGS = ("parsable", "quiet", "verbose", "wait")  # the command's to honour


def _line_of(problem: str) -> int:
    m = re.match(r"^line (\d+):", problem)
    return int(m[1]) if m else 1 << 30


def _value(given: dict[str, Directive], name: str, parse: Any, problems: list[str]) -> Any:
    d = given.get(name)
    if d is None:
        return None
    try:
        return parse(d.value if d.value is not None else "")
    except Problem as exc:
        problems.append(d.problem(str(exc)))
    except ResourceError as exc:
        problems.append(d.problem(f"{exc.value!r} {exc.problem}; accepted: {exc.accepted}"))
    return None


def _nodes(text: str) -> tuple[int, int]:
    """``N`` or ``MIN-MAX`` -> (MIN, MAX)."""
    low, sep, high = text.partition("-")
    n = whole_number(low, "a number of nodes")
    most = whole_number(high, "a number of nodes") if sep else n
    if most < n:
        raise Problem(f"{text!r}: the most nodes is fewer than the least")
    return n, most


def _partitions(text: str) -> list[str]:
    """``-p a,b``: the partitions the job may run in, the first that can run it taken (as Slurm)."""
    names = [name.strip() for name in text.split(",")]
    if not any(names):
        raise Problem("is empty")
    if not all(names):
        raise Problem(f"{text!r}: an empty partition name in the list")
    for name in names:
        if not re.match(r"^[A-Za-z0-9_-]{1,128}$", name):
            raise Problem(f"{name!r} is not a partition name (letters, digits, '_' or '-')")
    return list(dict.fromkeys(names))


def _nice(text: str) -> int:
    if text == "":
        return 100  # Slurm's --nice without a value
    try:
        value = int(text)
    except ValueError:
        raise Problem(f"{text!r} is not a whole number") from None
    if not -NICE_LIMIT <= value <= NICE_LIMIT:
        raise Problem(f"{value} is outside -{NICE_LIMIT}..{NICE_LIMIT}")
    return value


def _array(text: str) -> str:
    parse_array(text, "--array")
    return text.strip()


def _export(text: str) -> list[tuple[str, str | None]]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise Problem("is empty")
    if items[0].upper() in ("NONE", "NIL") and len(items) == 1:
        return []
    out: list[tuple[str, str | None]] = []
    if items[0].upper() == "ALL":  # Slurm's default; the variables named with it: see _resolve
        out.append(("ALL", None))
        items = items[1:]
    for item in items:
        name, eq, value = item.partition("=")
        if name.upper() in ("ALL", "NONE", "NIL"):
            raise Problem(f"{name} comes first, alone or before the variables (--export=ALL,VAR=value)")
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise Problem(f"{name!r} is not a variable name")
        out.append((name, value if eq else None))
    return out


def _choice(*allowed: str) -> Any:
    def parse(text: str) -> str:
        if text.lower() not in allowed:
            raise Problem(f"{text!r} is not one of {', '.join(allowed)}")
        return text.lower()

    return parse


def _text(text: str) -> str:
    if not text.strip():
        raise Problem("is empty")
    return text


def _resolve(given: dict[str, Directive], defaults: SbatchDefaults, interpreter: list[str],
             problems: list[str], warn: Any) -> dict[str, Any]:
    def get(name: str, parse: Any) -> Any:
        return _value(given, name, parse, problems)

    def fail(name: str, text: str) -> None:
        problems.append(given[name].problem(text))

    def note(name: str, text: str) -> None:
        warn(given[name], text)

    # -- shape: nodes x tasks per node (Horizon's gangs are uniform)
    node_range = get("nodes", _nodes)
    nodes = None
    min_nodes: int | None = None  # -N MIN-MAX: an elastic gang of MAX nodes, MIN at least
    if node_range is not None:
        nodes = node_range[0]
        if node_range[1] != nodes:
            if "use-min-nodes" in given:  # Slurm: prefer the least of the range; here, run on exactly that
                note("use-min-nodes", f"runs on {nodes} node(s), the least of {node_range[0]}-{node_range[1]}, "
                                      "and does not grow")
            else:  # elastic: starts at the largest count that fits, grows and shrinks in the range
                min_nodes, nodes = node_range
                if "ntasks" in given and "ntasks-per-node" not in given:
                    fail("ntasks", f"with a range of nodes ({node_range[0]}-{node_range[1]}) give "
                                   "--ntasks-per-node: an elastic job's tasks follow its nodes")
    nodelist = get("nodelist", host_list)
    if nodelist is not None:  # the job runs on exactly these: they make its node count
        if nodes is None:
            nodes = len(nodelist)
        elif nodes != len(nodelist):
            fail("nodelist", f"names {len(nodelist)} node(s) and --nodes asks for {nodes}: Horizon runs a job on "
                             "exactly the nodes listed")
    excluded = get("exclude", host_list)
    ntasks = get("ntasks", lambda t: whole_number(t, "a number of tasks"))
    per_node = get("ntasks-per-node", lambda t: whole_number(t, "a number of tasks per node"))
    if ntasks is not None and min_nodes is not None and per_node is not None:
        ntasks = None  # an elastic job runs --ntasks-per-node on each of its nodes, however many they are
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

    # -- GPUs: each form says how many a node holds (they must agree); then per task, or shared
    gpu_type: str | None = None
    node_gpus: int | None = None
    gpu_forms: list[tuple[str, str | None, int]] = []  # option, type, per node
    for name, parse in (("gpus-per-task", lambda t: gpu_spec(t, "GPUs")),
                        ("gpus-per-node", lambda t: gpu_spec(t, "GPUs")),
                        ("gres", gres),
                        ("gpus", lambda t: gpu_spec(t, "GPUs"))):
        spec = get(name, parse)
        if spec is None:
            continue
        kind, count = spec
        if name == "gpus-per-task":
            count *= per_node
        elif name == "gpus":
            if count % nodes:
                fail(name, f"{count} GPUs in all do not divide evenly over {nodes} node(s): Horizon gives every "
                           "node of a job the same GPUs")
                continue
            count //= nodes
        gpu_forms.append((name, kind, count))
    type_from = ""
    for name, kind, count in gpu_forms:
        if node_gpus is not None and count != node_gpus:
            fail(name, f"asks for {count} GPU(s) per node where --{gpu_forms[0][0]} asks for {node_gpus}")
        if kind and gpu_type and kind != gpu_type:
            fail(name, f"asks for GPU type {kind} where --{type_from} asks for {gpu_type}")
        node_gpus = count if node_gpus is None else node_gpus
        if kind and not gpu_type:
            gpu_type, type_from = kind, name
    node_gpus = node_gpus or 0
    if node_gpus == 0:
        gpu_type = None
    # --gpus-per-task gives each task its own GPUs; the per-node and per-job forms give a node's GPUs to
    # all its tasks together (each sees them all), as Slurm does without --gpu-bind.
    per_task_gpus = "gpus-per-task" in given or per_node == 1
    gpus = node_gpus // per_node if per_task_gpus else 0
    shared_gpus = 0 if per_task_gpus else node_gpus

    # -- CPUs per task
    cpus = get("cpus-per-task", lambda t: whole_number(t, "a number of CPUs"))
    cpus_per_gpu = get("cpus-per-gpu", lambda t: whole_number(t, "a number of CPUs"))
    if cpus_per_gpu is not None:
        if "cpus-per-task" in given:
            fail("cpus-per-gpu", "and --cpus-per-task exclude each other (as in Slurm)")
        elif node_gpus == 0:
            fail("cpus-per-gpu", "needs GPUs (--gres, --gpus, --gpus-per-node or --gpus-per-task)")
        elif cpus_per_gpu * node_gpus % per_node:
            fail("cpus-per-gpu", f"{cpus_per_gpu * node_gpus} CPUs per node do not divide evenly over "
                                 f"{per_node} task(s): give --cpus-per-task")
        else:
            cpus = cpus_per_gpu * node_gpus // per_node
    cpus = cpus or 1

    # -- memory per task (Horizon counts memory per task; --mem is per node)
    memory: int | None = None
    whole_memory = False
    memory_env: dict[str, str] = {}  # SLURM_MEM_PER_NODE / _CPU / _GPU, in MiB, as Slurm sets them
    mem_forms = [name for name in ("mem", "mem-per-cpu", "mem-per-gpu") if name in given]
    if len(mem_forms) > 1:
        fail(mem_forms[1], f"and --{mem_forms[0]} exclude each other (as in Slurm)")
    elif mem_forms:
        size = get(mem_forms[0], slurm_memory)
        if size is not None:
            if size == 0 and mem_forms[0] == "mem":
                whole_memory = True  # all of each node's memory (Slurm's --mem=0)
            elif size == 0:
                fail(mem_forms[0], "0 is not a memory size here (--mem=0 asks for all of each node's memory)")
            elif mem_forms[0] == "mem":
                memory = -(-size // per_node)  # per node -> per task, rounded up to a byte
                memory_env["SLURM_MEM_PER_NODE"] = str(size >> 20)
            elif mem_forms[0] == "mem-per-cpu":
                memory = size * cpus
                memory_env["SLURM_MEM_PER_CPU"] = str(size >> 20)
            elif node_gpus == 0:
                fail("mem-per-gpu", "needs GPUs (--gres, --gpus, --gpus-per-node or --gpus-per-task)")
            else:
                memory = -(-size * node_gpus // per_node)
                memory_env["SLURM_MEM_PER_GPU"] = str(size >> 20)

    time_limit = get("time", slurm_time)
    time_min = get("time-min", slurm_time)
    if time_min is not None and time_limit is not None and time_min > time_limit:
        fail("time-min", f"{time_min:g} s is more than the time limit (--time, {time_limit:g} s)")
    array = get("array", _array)
    dependency = get("dependency", parse_dependency_list)
    nice = get("nice", _nice)
    partitions = get("partition", _partitions)
    qos = get("qos", _text)
    account = get("account", _text)
    name = get("job-name", _text)
    comment = get("comment", lambda t: t)
    export = get("export", _export)
    open_mode = get("open-mode", _choice("append", "truncate"))
    if get("kill-on-invalid-dep", _choice("yes", "no")) == "no":
        note("kill-on-invalid-dep", "no effect here: Horizon ends a job whose dependency can never be met "
                                    "(DEPENDENCY_NEVER_SATISFIED) rather than leaving it pending")
    output = get("output", _output_pattern)
    error = get("error", _output_pattern)
    chdir = get("chdir", _text)
    image = get("container-image", _text)
    constraint = get("constraint", _constraint)
    exclusive = get("exclusive", _exclusive)
    if exclusive in ("user", "mcs", "topo"):
        note("exclusive", f"={exclusive}: Horizon gives the job whole nodes, shared with no other job")
    requeue = get("requeue", _choice("", "expedite"))
    if requeue == "expedite":
        note("requeue", "=expedite: Horizon requeues the job with its own priority, not the highest")
    signal = get("signal", slurm_signal)
    if signal is not None and signal[1]:
        note("signal", "R: Horizon has no reservations with a start delay to overlap; the signal is sent as asked")
    immediate = get("immediate", lambda t: whole_number(t, "a number of seconds") if t else 1)
    if immediate is not None:
        note("immediate", f"Horizon submits the job, which ends UNSCHEDULABLE if it has not started within "
                          f"{immediate} s (Slurm would not submit it)")
    get("wait-all-nodes", _choice("0", "1"))
    begin = get("begin", lambda t: slurm_begin(t, defaults.now or datetime.now().astimezone()))
    deadline = get("deadline", lambda t: slurm_begin(t, defaults.now or datetime.now().astimezone()))
    if deadline is not None and begin is not None and deadline <= begin:
        fail("deadline", "Incompatible begin and deadline time specification: the deadline is not after --begin")
    if problems:
        return {}

    user = defaults.user
    account = account or defaults.account
    name = name if name is not None else (Path(defaults.script_path).name if defaults.script_path else "wrap")
    env: dict[str, str] = {}
    for var, value in export or []:
        if var == "ALL":
            note("export", "ALL: Horizon does not copy your shell's environment into the job (the log is read by "
                           "others and keeps everything): the job has the node agent's environment and the "
                           "variables named here")
        elif value is not None:
            # With ALL, Slurm lets the caller's own value win over the one given here.
            has_all = export[0][0] == "ALL"
            env[var] = defaults.environ[var] if has_all and var in defaults.environ else value
        elif var in defaults.environ:
            env[var] = defaults.environ[var]
    env.update(_slurm_environment(defaults, user, account, nodes, per_node, tasks, cpus if (
        "cpus-per-task" in given or "cpus-per-gpu" in given) else None, node_gpus, qos, array,
        "ntasks-per-node" in given))
    if min_nodes is not None:  # an elastic job's counts are the agent's to give: they change as it resizes
        for var in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_NTASKS", "SLURM_NPROCS"):
            env.pop(var, None)
    env.update(memory_env)
    if defaults.submit_host:
        env["SLURM_SUBMIT_HOST"] = defaults.submit_host
    if "gpus-per-task" in given and gpus:  # srun's default --gpus-per-task inside the job, as Slurm's
        env["SLURM_GPUS_PER_TASK"] = str(gpus)
    workdir = os.path.join(defaults.workdir, chdir) if chdir else defaults.workdir
    program = interpreter if defaults.script_path == "" else [*interpreter, defaults.script_path]
    command = ["/bin/sh", "-c", _wrapper(array is not None, nodes, [*program, *defaults.script_args]), "horizon-sbatch"]
    dependencies, singleton = dependency if dependency is not None else ([], False)
    dependencies, after_datasets = split_datasets(dependencies)
    fields: dict[str, Any] = {
        "name": name,
        "account": account,
        "user": user,
        "command": command,
        "env": env,
        # No --mem*: null, so the partition's DefMemPerCPU/GPU applies (else 1 GiB per task); --mem=0: all of
        # each node's (whole_node_memory)
        "resources": c.ResourceRequest(cpus=str(cpus), memory=0 if whole_memory else memory, gpus=gpus,
                                       gpu_type=gpu_type),
        "nodes": nodes,
        "tasks_per_node": per_node,
        "time_limit_s": time_limit,
        "array": array,
        "dependencies": dependencies,
        "nice": nice or 0,
        "qos": qos or "",
        "partitions": partitions or [],
        "labels": {"comment": comment} if comment else {},
        # Where it runs and writes: the agent opens the files, with Slurm's default name.
        "cwd": workdir,
        "stdout": output if output is not None else ("slurm-%A_%a.out" if array is not None else "slurm-%j.out"),
        "stderr": error or "",
        "open_mode": open_mode or "truncate",
        "image": image or "",
    }
    # Slurm's directives, each set only when given (a JobSubmitted without them means what it meant)
    extra: dict[str, Any] = {
        "gpus_per_node": shared_gpus,
        "exclusive": exclusive not in (None, "oversubscribe"),
        "whole_node_memory": whole_memory,
        "constraint": constraint or "",
        "nodelist": [given["nodelist"].value] if nodelist else [],
        "exclude_nodes": [given["exclude"].value] if excluded else [],
        "requeue": "no-requeue" not in given,
        "time_min_s": time_min,
        "limit_signal": signal[0] if signal is not None else None,
        # B: the batch shell traps it (to checkpoint and requeue, the usual pattern): that is where a
        # checkpoint signal goes, so it is also the job's checkpoint signal (preemption, drain --migrate)
        "checkpoint_signal": checkpoint_signal(signal[0].signal) if signal is not None and signal[0].batch_only
        else None,
        "singleton": singleton,
        "hold": "hold" in given,
        "scheduling_timeout_s": float(immediate) if immediate is not None else None,
        "begin_ts": begin,
        "deadline_ts": deadline,
        "after_datasets": after_datasets,
        "min_nodes": min_nodes,
    }
    defaults_of = c.JobSubmitted(job_id="x", tenant="x")
    fields.update({k: v for k, v in extra.items() if v != getattr(defaults_of, k)})
    return fields


def _constraint(text: str) -> str:
    try:
        return parse_constraint(text).text
    except ConstraintError as exc:
        raise Problem(f"{text!r}: {exc}") from None


def _exclusive(text: str) -> str:
    """``--exclusive[=exclusive|allocation|user|mcs|topo|oversubscribe]``, normalised (no value: exclusive)."""
    value = text.strip().lower() or "exclusive"
    if value == "allocation":
        value = "exclusive"
    if value not in ("exclusive", "user", "mcs", "topo", "oversubscribe"):
        raise Problem(f"{text!r} is not one of exclusive, allocation, user, mcs, topo, oversubscribe")
    return value


def _slurm_environment(defaults: SbatchDefaults, user: str, account: str, nodes: int, per_node: int, tasks: int,
                       cpus: int | None, gpus_per_node: int, qos: str | None,
                       array: str | None, per_node_given: bool) -> dict[str, str]:
    """The Slurm variables a batch script may read that are known at submission (the agent sets
    ``SLURM_JOB_ID``, ``SLURM_JOB_NAME`` and ``SLURM_JOB_PARTITION``, the partition the job got; the
    wrapper the ones only known on the node)."""
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
    if qos:
        env["SLURM_JOB_QOS"] = qos
    if array is not None:
        spec = parse_array(array, "--array")
        env.update(SLURM_ARRAY_TASK_COUNT=str(len(spec.indices)), SLURM_ARRAY_TASK_MIN=str(spec.indices[0]),
                   SLURM_ARRAY_TASK_MAX=str(spec.indices[-1]))
    return env


def _wrapper(array: bool, nodes: int, program: list[str]) -> str:
    """The POSIX shell the agent runs: the Slurm variables only known on the node, then the script (the
    agent puts it in its working directory and its output files)."""
    lines = []
    if array:  # a task's id is <array id>_<index>
        lines.append('export SLURM_ARRAY_JOB_ID="${SLURM_JOB_ID%_*}" SLURM_ARRAY_TASK_ID="${SLURM_JOB_ID##*_}"')
    # SLURMD_NODENAME, SLURM_JOB_NODELIST (all the job's nodes) and the rest are the agent's (job_environment).
    lines.append("exec " + " ".join(shlex.quote(p) for p in program))
    return "\n".join(lines) + "\n"


def _output_pattern(text: str) -> str:
    """An ``--output``/``--error`` pattern the agent can expand (services/domain/output.py)."""
    problem = pattern_problem(text)
    if problem is not None:
        raise Problem(problem)
    return text


_LAUNCHERS = re.compile(r"(?:^|[\s;|&(`])(mpirun|mpiexec)(?=\s|$)")


def script_warnings(text: str, nodes: int = 1) -> list[str]:
    """What a script runs that may not work as on Slurm (not errors: the script may bring its own).

    ``srun`` and ``scontrol`` are Horizon's inside a job (services/front/cli/srun.py, scontrol.py). An MPI
    launcher in a multi-node job is another matter: Horizon runs no PMI/PMIx server and writes no
    host file, so ``mpirun`` works only as far as it starts its daemons with srun by itself.
    """
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
        m = _LAUNCHERS.search(code)
        if m is not None and nodes > 1:
            out.append(f"line {number}: {m[1]}: Horizon runs no PMI/PMIx server and writes no host file; start the "
                       "ranks with srun, which runs one per task with SLURM_PROCID and SLURM_NTASKS (docs/slurm.md, "
                       "Job steps)")
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
            if d.option == "dataset":  # repeatable, each a name or names joined by commas
                ours.setdefault("dataset", []).append(d.value)
            else:
                ours[d.option] = True if d.option in _HORIZON_FLAGS else d.value
        else:
            sbatch.append(f"--{d.option}" if d.value is None else f"--{d.option}={d.value}")
    rest = list(args[stop:])
    return ours, sbatch, rest[:1], rest[1:]


def _submission(args: Sequence[str]) -> tuple[dict[str, Any], c.JobSubmitted, str, list[str]]:
    """Horizon's options (with the output flags given as directives), the job, the script's text, and
    the warnings about directives that do less here than in Slurm."""
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
                              submit_host=socket.gethostname(),
                              environ=dict(os.environ))
    notes: list[str] = []
    flags: set[str] = set()
    try:
        fields, _ = parse_sbatch(text, defaults=defaults, command_line=sbatch_opts, wrap=wrap, warnings=notes,
                                 flags=flags)
    except SbatchError as exc:
        name = script[0] if script else "--wrap"
        raise click.ClickException(f"{name}: " + str(exc)) from None
    for flag in flags:  # #SBATCH --parsable, -Q, -v: the command's output, as on its command line
        ours.setdefault(flag, True)
    tenant = ours.get("tenant") or tenant_for(ours.get("nats"))  # a tenant's URL names its tenant (up --auth)
    job_id = ours.get("job-id") or new_job_id(user)
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
    if ours.get("dataset"):
        fields["datasets"] = sorted({n.strip() for d in ours["dataset"] for n in d.split(",") if n.strip()})
    event = c.JobSubmitted(ts=time.time(), source="horizon-sbatch", correlation_id=job_id, job_id=job_id,
                           tenant=tenant, **fields)
    return ours, event, text, notes


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def sbatch(args: tuple[str, ...]) -> None:
    """Submit a Slurm batch script: horizon sbatch [OPTIONS] SCRIPT [ARGS...]

    \b
    Reads the script's #SBATCH directives as sbatch does; OPTIONS are sbatch's
    (-N 2, --gres=gpu:a100:4, --time=2:00:00, --array=0-9%2, --dependency=afterok:J,
    ...) and override the script's. A directive Horizon cannot honour is an
    error naming its line; one that only changes speed, layout or who is told
    (--mail-type, --hint, ...) is a warning naming its line (docs/slurm.md
    lists them all). -W/--wait waits for the job's end and exits with its code.

    \b
    Horizon's own options (before SCRIPT):
      --nats URL             NATS server (default $HORIZON_NATS_URL, else the `horizon up`
                             running on --data-dir, else nats://127.0.0.1:4222)
      --data-dir DIR         where that `horizon up` keeps its data (default .horizon)
      --tenant T             your tenant (default $HORIZON_TENANT or default)
      --job-id ID            your id for the job (default: generated)
      --priority-class C     critical, high, normal, low or scavenger
      --sim-runtime S        seconds a simulated job runs (sim executor)
      --dataset NAME[,NAME]  a dataset the job reads (repeatable): placement prefers nodes holding it
      --dry-run              print the JobSubmitted as JSON, submit nothing
      --check                ask Horizon whether it would accept the job, submit nothing
      --no-wait              do not wait for acceptance
      --json                 print {"job_id": ..., "state": ...}
      --parsable             print only the job id (as sbatch --parsable)
      -Q, --quiet            print nothing on success
      -v, --verbose          also print the job's resources to stderr
    """
    ours, event, text, notes = _submission(args)
    if not ours.get("quiet"):
        for warning in [*notes, *script_warnings(text, event.nodes)]:
            click.echo(f"horizon sbatch: warning: {warning}", err=True)
    if ours.get("dry-run"):
        click.echo(msgspec.json.encode(event).decode())
        return
    if ours.get("verbose"):
        r = event.resources
        click.echo(f"horizon sbatch: {event.nodes} node(s) x {event.tasks_per_node} task(s), per task {r.cpus} CPUs, "
                   f"{'the partition default of' if r.memory is None else r.memory} bytes of memory, {r.gpus} "
                   f"GPU(s){' ' + r.gpu_type if r.gpu_type else ''}; "
                   f"time limit {event.time_limit_s} s; partition {','.join(event.partitions) or '(default)'}",
                   err=True)
    nats_url = resolve_nats(ours.get("nats") or os.environ.get("HORIZON_NATS_URL"), ours.get("data-dir"))
    if ours.get("check"):
        report_check(check_submission(nats_url, event), event.job_id, bool(ours.get("json")),
                     prog="horizon sbatch")
        return
    result = send_submission(nats_url, event, no_wait=bool(ours.get("no-wait")))
    if not ours.get("quiet"):
        print_warnings(result, "horizon sbatch")  # e.g. the partition it runs in instead of one not defined
    if result["state"] == "REJECTED":
        if ours.get("json"):
            click.echo(json.dumps(result))
        raise click.ClickException(f"job {event.job_id} rejected: {result['reason']}")
    if result["state"] == "SUBMITTED" and not ours.get("no-wait"):
        if ours.get("json"):
            click.echo(json.dumps(result))
        raise click.ClickException(f"job {event.job_id}: {result['reason']}")
    if ours.get("json"):
        click.echo(json.dumps(result))
    elif ours.get("parsable"):
        click.echo(event.job_id)
    elif not ours.get("quiet"):
        click.echo(f"Submitted batch job {event.job_id}")
    if ours.get("wait") and not ours.get("no-wait"):
        ids = [event.job_id] if event.array is None else [
            f"{event.job_id}_{i}" for i in parse_array(event.array, "--array").indices]
        raise SystemExit(_exit_code(_wait_for_end(nats_url, ids)))


# What a job that has ended for good is in the read model (a requeue may still follow a failure or a
# preemption: --wait sees the same ending twice, a poll apart, before it believes it).
_ENDED = frozenset({"SUCCEEDED", "FAILED", "OUT_OF_MEMORY", "PREEMPTED", "CANCELLED", "REJECTED", "UNSCHEDULABLE",
                    "DEPENDENCY_NEVER_SATISFIED"})


def _wait_for_end(nats_url: str, job_ids: list[str], poll_s: float = 1.0) -> list[dict[str, Any]]:
    """Slurm's ``-W/--wait``: the rows of ``job_ids`` (an array's tasks) once all have ended."""
    async def go() -> list[dict[str, Any]]:
        async with session(nats_url) as nc:
            last: object = None
            while True:
                body = await query(nc, "jobs", {"job_ids": job_ids, "limit": len(job_ids)})
                rows = {row["job_id"]: row for row in body.get("jobs", [])}
                if all(rows.get(j, {}).get("state") in _ENDED for j in job_ids):
                    seen = [(j, rows[j]["state"], rows[j].get("attempt")) for j in job_ids]
                    if seen == last:
                        return [rows[j] for j in job_ids]
                    last = seen
                await asyncio.sleep(poll_s)

    return run(go())  # type: ignore[no-any-return]


def _exit_code(rows: list[dict[str, Any]]) -> int:
    """As sbatch --wait exits: 0 when every job succeeded, else the highest exit code (1 for a job that
    ended without one: cancelled, never started, killed by a signal)."""
    worst = 0
    for row in rows:
        if row["state"] != "SUCCEEDED":
            code = row.get("exit_code")
            worst = max(worst, code if isinstance(code, int) and 0 < code < 256 else 1)
    return worst


def register(group: click.Group) -> None:
    group.add_command(sbatch)
