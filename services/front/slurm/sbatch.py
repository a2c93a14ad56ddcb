"""A Slurm batch script, read the way ``sbatch`` reads it, as the fields of a ``JobSubmitted``.

Reading is pure (``parse_sbatch``): the directives and the option table are in
``services/front/slurm/sbatch_options.py``, the values in Slurm's syntax in
``services/front/slurm/slurm_values.py``, what each family of options asks for in
``services/front/slurm/sbatch_resolve.py``; here they become a job's fields. The script
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
script with its arguments. The script is the copy sbatch read at submission,
as Slurm's (which runs ``slurmd``'s spool copy, ``slurm_script``): the job
carries its text (the command's last argument), and the wrapper writes it to a
private temporary file, opens it on descriptor 9, removes it and runs
``/dev/fd/9``; so a script edited, moved or deleted after ``sbatch`` returns
(dask-jobqueue deletes its temporary script at once) runs as it was, and
nothing is left behind. At most ``MAX_SCRIPT_BYTES`` (Slurm's default
``max_script_size`` is 4 MB; here the copy is one argument of the job's
command), and no NUL character (as Slurm). The command is
``services/front/cli/sbatch.py``; submitting is
``services/front/client/submitter.py``'s, as for ``horizon submit``.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from events import catalogue as c
from events.arrays import parse_array
from services.front.slurm.sbatch_options import (COMMAND_LINE_ONLY, OPTIONS, Directive, SbatchError, getopt,
                                                 read_directives)
from services.front.slurm.sbatch_environment import environment_options, read_export_file, submitted_environment
from services.front.slurm.sbatch_resolve import Given, Resolved, resolve_options
from services.front.slurm.slurm_values import Problem, checkpoint_signal, split_datasets

__all__ = ["SbatchDefaults", "parse_sbatch", "script_warnings", "split_command_line", "OUTPUT_FLAGS"]


@dataclass(frozen=True)
class SbatchDefaults:
    """What the directives do not say: who submits, from where, the script's path and arguments."""

    user: str
    workdir: str  # where horizon sbatch runs: the job's working directory unless --chdir
    script_path: str = ""  # absolute; empty for --wrap
    script_args: tuple[str, ...] = ()
    account: str = "default"
    # the submitting environment: what --export copies, and the SBATCH_* variables read as options
    environ: Mapping[str, str] = field(default_factory=dict)
    read_file: Callable[[str], bytes] | None = None  # reads --export-file's FILE or descriptor (None: cannot)
    now: datetime | None = None  # the submitter's clock and time zone, for --begin (None: read it then)
    submit_host: str = ""  # the machine horizon sbatch runs on (SLURM_SUBMIT_HOST)


# --------------------------------------------------------------------------
# From a script and a command line to a job
# --------------------------------------------------------------------------


def _interpreter(text: str) -> list[str]:
    """The ``#!`` line as the kernel reads it: the interpreter and at most one argument."""
    first = text.split("\n", 1)[0].rstrip("\r")
    if not first.startswith("#!") or not first[2:].strip():
        raise SbatchError(["line 1: a batch script must begin with #! and an interpreter, e.g. #!/bin/bash "
                           "(as for sbatch)"])
    parts = first[2:].strip().split(None, 1)
    return [parts[0], parts[1].strip()] if len(parts) == 2 else parts


OUTPUT_FLAGS = ("parsable", "quiet", "verbose", "wait")  # the command's to honour
# The job runs its copy of the script from this descriptor (the module doc); the copy is at most this
# long: one argument of the job's command (Linux takes 128 KiB in one, and a command at most 128 KiB)
SCRIPT_COPY = "/dev/fd/9"
MAX_SCRIPT_BYTES = 120 * 1024


def parse_sbatch(text: str, *, defaults: SbatchDefaults, command_line: Sequence[str] = (),
                 wrap: str | None = None, warnings: list[str] | None = None,
                 flags: set[str] | None = None) -> tuple[dict[str, Any], str]:
    """The ``JobSubmitted`` fields a batch script and command-line options make, and the script's body
    (what follows the directives). Raises ``SbatchError`` listing every problem.

    ``command_line``: sbatch options given on the command line (they override the script's, and the
    ``SBATCH_*`` variables of ``defaults.environ`` override the script's too: Slurm's order). Horizon's
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
        problems.extend(_copy_problems(text))
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
    from_environment, unset = environment_options(defaults.environ)  # SBATCH_PARTITION, ...
    notes: list[tuple[int, str]] = []  # (the directive's place among all given, the warning)
    every = [*directives, *from_environment, *cli]
    place = {id(d): i for i, d in enumerate(every)}
    _sort_out(every, problems, notes, place, flags)
    given = _given(directives, cli, from_environment, unset)
    g = Given(given, problems, lambda d, text: notes.append((place[id(d)], d.problem(text))))
    resolved = resolve_options(g, defaults.now)
    file = _export_file(g, defaults)
    if problems or resolved is None:
        raise SbatchError(sorted(problems, key=_line_of))
    fields = _job_fields(g, resolved, defaults, interpreter, None if wrap is not None else text)
    fields["submit_env"] = submitted_environment(resolved.files.export, defaults.environ, file)
    if warnings is not None:
        warnings.extend(text for _, text in sorted(notes))
    return fields, body


def _sort_out(every: list[Directive], problems: list[str], notes: list[tuple[int, str]], place: dict[int, int],
              flags: set[str] | None) -> None:
    """Each option given: refused (not supported; Horizon's own in the wrong place), a warning (no
    effect here), or an output flag that is the command's."""
    for d in every:
        opt = OPTIONS[d.option]
        if opt.unsupported:
            problems.append(d.problem(f"not supported: {opt.unsupported}"))
        elif opt.horizon:
            if d.where == "command line":
                problems.append(d.problem("not an sbatch option (horizon sbatch reads it before the script)"))
        elif opt.warn:
            notes.append((place[id(d)], d.problem(f"no effect here: {opt.warn}")))
        elif d.option in OUTPUT_FLAGS and flags is not None:
            flags.add(d.option)


def _given(directives: list[Directive], cli: list[Directive], from_environment: Sequence[Directive] = (),
           unset: set[str] | frozenset[str] = frozenset()) -> dict[str, Directive]:
    """The options that count: the last of each; the ``SBATCH_*`` variables' over the script's (a flag's
    variable may unset the script's), the command line's over both."""
    given: dict[str, Directive] = {}
    for d in [*directives, None, *from_environment, *cli]:  # later wins; the command line last
        if d is None:
            for name in unset:
                given.pop(name, None)
            continue
        opt = OPTIONS[d.option]
        if not (opt.unsupported or opt.horizon or d.option in COMMAND_LINE_ONLY and d.where != "command line"):
            given[d.option] = d
    # --requeue and --no-requeue set one thing: the later of them counts
    ordered = [d for d in [*directives, *from_environment, *cli] if d.option in given]
    last = next((d.option for d in reversed(ordered) if d.option in ("requeue", "no-requeue")), None)
    if last is not None:
        given.pop("no-requeue" if last == "requeue" else "requeue", None)
    return given


def _line_of(problem: str) -> int:
    m = re.match(r"^line (\d+):", problem)
    return int(m[1]) if m else 1 << 30


def _job_fields(g: Given, r: Resolved, defaults: SbatchDefaults, interpreter: list[str],
                script: str | None) -> dict[str, Any]:
    """The ``JobSubmitted`` fields of the resolved options: always the job's own, then Slurm's
    directives, each set only when given (a JobSubmitted without them means what it meant). ``script``:
    the batch script's text, which the job runs (None: ``--wrap``)."""
    shape, queue, files, ending = r.shape, r.queue, r.files, r.ending
    account = queue.account or defaults.account
    name = queue.name if queue.name is not None else (Path(defaults.script_path).name if defaults.script_path
                                                      else "wrap")
    env = _environment(g, r, defaults, account)
    workdir = os.path.join(defaults.workdir, files.chdir) if files.chdir else defaults.workdir
    program = interpreter if script is None else [*interpreter, SCRIPT_COPY]
    wrapper = _wrapper(queue.array is not None, [*program, *defaults.script_args], script is not None)
    command = ["/bin/sh", "-c", wrapper, "horizon-sbatch", *([script] if script is not None else [])]
    dependencies, singleton = queue.dependency if queue.dependency is not None else ([], False)
    dependencies, after_datasets = split_datasets(dependencies)
    fields: dict[str, Any] = {
        "name": name,
        "account": account,
        "user": defaults.user,
        "command": command,
        "env": env,
        # No --mem*: null, so the partition's DefMemPerCPU/GPU applies (else 1 GiB per task); --mem=0: all of
        # each node's (whole_node_memory)
        "resources": c.ResourceRequest(cpus=str(r.cpus), memory=0 if r.memory.whole else r.memory.per_task,
                                       gpus=r.gpus.per_task, gpu_type=r.gpus.gpu_type),
        "nodes": shape.nodes,
        "tasks_per_node": shape.per_node,
        "time_limit_s": ending.time_limit,
        "array": queue.array,
        "dependencies": dependencies,
        "nice": queue.nice or 0,
        "qos": queue.qos or "",
        "partitions": queue.partitions or [],
        "labels": {"comment": queue.comment} if queue.comment else {},
        # Where it runs and writes: the agent opens the files, with Slurm's default name.
        "cwd": workdir,
        "stdout": files.output if files.output is not None else (
            "slurm-%A_%a.out" if queue.array is not None else "slurm-%j.out"),
        "stderr": files.error or "",
        "open_mode": files.open_mode or "truncate",
        "image": files.image or "",
    }
    signal = ending.signal
    extra: dict[str, Any] = {
        "gpus_per_node": r.gpus.shared,
        "exclusive": r.placement.exclusive not in (None, "oversubscribe"),
        "whole_node_memory": r.memory.whole,
        "constraint": r.placement.constraint or "",
        "nodelist": [g["nodelist"].value] if shape.nodelist else [],
        "exclude_nodes": [g["exclude"].value] if shape.excluded else [],
        "requeue": "no-requeue" not in g,
        "time_min_s": ending.time_min,
        "limit_signal": signal[0] if signal is not None else None,
        # B: the batch shell traps it (to checkpoint and requeue, the usual pattern): that is where a
        # checkpoint signal goes, so it is also the job's checkpoint signal (preemption, drain --migrate)
        "checkpoint_signal": checkpoint_signal(signal[0].signal) if signal is not None and signal[0].batch_only
        else None,
        "singleton": singleton,
        "hold": "hold" in g,
        "scheduling_timeout_s": float(ending.immediate) if ending.immediate is not None else None,
        "begin_ts": ending.begin,
        "deadline_ts": ending.deadline,
        "after_datasets": after_datasets,
        "min_nodes": shape.min_nodes,
        # -n fewer than the slots (-N 3 -n 7), or spread over the nodes submission chooses (-n without -N)
        "ntasks": shape.ntasks,
        "spread_tasks": shape.spread,
        "memory_per_node": r.memory.per_node,
        "licenses": r.queue.licenses or {},
    }
    defaults_of = c.JobSubmitted(job_id="x", tenant="x")
    fields.update({k: v for k, v in extra.items() if v != getattr(defaults_of, k)})
    return fields


def _export_file(g: Given, defaults: SbatchDefaults) -> dict[str, str] | None:
    """``--export-file``'s variables (None: not given, or a problem, filed), which ``--export`` takes in
    place of the submitting shell's (``services/front/slurm/sbatch_environment.py``)."""

    def read(text: str) -> dict[str, str]:
        if defaults.read_file is None:
            raise Problem("cannot be read here")
        try:
            return read_export_file(defaults.read_file(text), repr(text))
        except OSError as exc:
            raise Problem(f"cannot read {text!r}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise Problem(str(exc)) from None

    return g.get("export-file", read)  # type: ignore[no-any-return]


def _environment(g: Given, r: Resolved, defaults: SbatchDefaults, account: str) -> dict[str, str]:
    """The variables sbatch sets for the job over what it starts from and the job's own: the Slurm
    variables known at submission (the job's own, set on its node, go under these)."""
    shape = r.shape
    env: dict[str, str] = {}
    if "export" in g and r.files.export != [("ALL", None)] and "SLURM_EXPORT_ENV" not in defaults.environ:
        # srun inside the job takes the same --export (Slurm's sbatch sets it; ALL is srun's default)
        env["SLURM_EXPORT_ENV"] = g["export"].value or ""
    env.update(_slurm_environment(defaults, defaults.user, account, shape.nodes, shape.per_node, shape.tasks,
                                  r.cpus if ("cpus-per-task" in g or "cpus-per-gpu" in g) else None,
                                  r.queue.qos, r.queue.array, "ntasks-per-node" in g))
    if shape.min_nodes is not None:  # an elastic job's counts are the agent's to give: they change as it resizes
        for var in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_NTASKS", "SLURM_NPROCS"):
            env.pop(var, None)
    if shape.spread:  # its nodes are submission's to choose: the agent says how many
        for var in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"):
            env.pop(var, None)
    env.update(r.memory.env or {})
    if defaults.submit_host:
        env["SLURM_SUBMIT_HOST"] = defaults.submit_host
    if ("gpus-per-task" in g or shape.per_gpu == 1) and r.gpus.per_task:  # srun's default --gpus-per-task
        env["SLURM_GPUS_PER_TASK"] = str(r.gpus.per_task)  # inside the job, as Slurm's
    if shape.per_gpu is not None:
        env["SLURM_NTASKS_PER_GPU"] = str(shape.per_gpu)
    return env


def _slurm_environment(defaults: SbatchDefaults, user: str, account: str, nodes: int, per_node: int, tasks: int,
                       cpus: int | None, qos: str | None,
                       array: str | None, per_node_given: bool) -> dict[str, str]:
    """The Slurm variables a batch script may read that are known at submission (the agent sets
    ``SLURM_JOB_ID``, ``SLURM_JOB_NAME`` and ``SLURM_JOB_PARTITION``, the partition the job got, and
    ``SLURM_GPUS_ON_NODE``, the GPUs it holds there: an ``--exclusive`` job all of them; the wrapper the
    ones only known on the node)."""
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
    if qos:
        env["SLURM_JOB_QOS"] = qos
    if array is not None:
        spec = parse_array(array, "--array")
        env.update(SLURM_ARRAY_TASK_COUNT=str(len(spec.indices)), SLURM_ARRAY_TASK_MIN=str(spec.indices[0]),
                   SLURM_ARRAY_TASK_MAX=str(spec.indices[-1]))
    return env


def _wrapper(array: bool, program: list[str], copy: bool) -> str:
    """The POSIX shell the agent runs: the Slurm variables only known on the node, the script's copy
    (``copy``: the text is ``$1``), then the script (the agent puts it in its working directory and its
    output files)."""
    lines = []
    if array:  # a task's id is <array id>_<index>, unless its backend named the task already (Slurm's: there
        # SLURM_JOB_ID is Slurm's own number)
        lines.append('export SLURM_ARRAY_JOB_ID="${SLURM_ARRAY_JOB_ID:-${SLURM_JOB_ID%_*}}" '
                     'SLURM_ARRAY_TASK_ID="${SLURM_ARRAY_TASK_ID:-${SLURM_JOB_ID##*_}}"')
    if copy:  # the copy taken at submission, on descriptor 9 of a file removed at once (the module doc)
        lines.append('script=$(umask 077 && mktemp "${TMPDIR:-/tmp}/slurm_script.XXXXXX") || exit 1')
        lines.append('printf %s "$1" > "$script" && exec 9< "$script"; rm -f "$script"')
    # SLURMD_NODENAME, SLURM_JOB_NODELIST (all the job's nodes) and the rest are the agent's (job_environment).
    lines.append("exec " + " ".join(shlex.quote(p) for p in program))
    return "\n".join(lines) + "\n"


def _copy_problems(text: str) -> list[str]:
    """Why the script cannot be carried as the job's copy of it (the module doc), if it cannot."""
    if "\0" in text:
        return ["the batch script contains a NUL character (as Slurm, sbatch refuses it)"]
    size = len(text.encode())
    if size > MAX_SCRIPT_BYTES:
        return [f"the batch script is {size:,} bytes; Horizon takes scripts of at most {MAX_SCRIPT_BYTES:,} "
                "bytes (its copy goes with the job): move its data into files the script reads"]
    return []


_LAUNCHERS = re.compile(r"(?:^|[\s;|&(`])(mpirun|mpiexec)(?=\s|$)")


def script_warnings(text: str, nodes: int = 1) -> list[str]:
    """What a script runs that may not work as on Slurm (not errors: the script may bring its own).

    ``srun`` and ``scontrol`` are Horizon's inside a job (services/front/slurm/srun.py, scontrol_show.py). An MPI
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
# The command line of horizon sbatch
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
