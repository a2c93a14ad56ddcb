"""``srun`` inside a job: run a command once per task across the job's nodes (a job step).

Inside a Horizon job ``srun`` (the agent puts Horizon's first on the job's ``PATH``) is this
command: it reads srun's options (``parse_srun``, pure), asks the node's agent for a step over the
attempt's Unix socket (``$HORIZON_STEP_SOCKET``; ``services/nodes/agent/steps.py`` says what the agent
does), and then, like Slurm's srun:

* writes every task's standard output and error to its own (the job's output file), whole lines
  at a time, so two tasks' lines never mix (``-u``: as the bytes come); ``-l`` puts ``RANK: ``
  before each line; ``-o``/``-e`` write them to files instead (``%t`` task, ``%n`` node index,
  ``%N`` node, ``%j`` job, ``%s`` step, ``%J`` job.step, ``%u``, ``%x``, ``%%``);
* says ``srun: error: NODE: task N: Exited with exit code C`` for a task that failed;
* forwards the signals it gets to every task (SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2,
  SIGCONT); SIGTERM, or a second SIGINT, stops the step (SIGTERM, then SIGKILL after the grace
  period), as does its own death;
* exits with the highest exit code of the tasks, 128 + N for a task killed by signal N, and 1 when
  the step could not run (a step larger than the job's allocation, named).

Options (``SRUN_OPTIONS``): ``-n/--ntasks``, ``-N/--nodes``, ``--ntasks-per-node`` (``--tasks-per-node``),
``-c/--cpus-per-task``, ``--gpus-per-task``, ``--gpus-per-node`` and ``--gres=gpu:N`` (per node),
``-w/--nodelist``, ``-x/--exclude``, ``-m/--distribution`` (block, cyclic), ``-O/--overcommit``,
``-l/--label``, ``-u/--unbuffered``, ``--export``, ``-K/--kill-on-bad-exit``, ``-t/--time``,
``-J/--job-name``, ``-D/--chdir``, ``-o/--output``, ``-e/--error``, ``--open-mode``, ``-v``, ``-Q``.
Accepted with no effect here (``NO_EFFECT`` says why): ``--mpi``, ``--cpu-bind``, ``--exclusive``,
``--exact``, ``--overlap``, ``--mem*``, ``--hint``, ``--gpu-bind``, ``-p``, ``-A``, ``-q``, ...
Refused: ``--pty`` and ``-i`` (tasks read no terminal or input), and options srun does not have.
From the environment, as Slurm's srun: ``SLURM_GPUS_PER_TASK`` (set in the batch script's
environment by ``#SBATCH --gpus-per-task``) is the default of ``--gpus-per-task``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import click

__all__ = ["SrunArgs", "SrunError", "parse_srun", "run_srun", "srun", "register", "SRUN_OPTIONS", "NO_EFFECT"]

SOCKET_ENV = "HORIZON_STEP_SOCKET"
FLUSH_PARTIAL_S = 0.2  # a line without its end yet (a progress bar) is written after this long
CONNECT_TRIES = 50  # the agent opens the socket before the job starts; a moment's grace all the same


class SrunError(ValueError):
    """srun's options make no step; the message says which and why."""


# long name -> (short letter, takes a value)
SRUN_OPTIONS: dict[str, tuple[str | None, bool]] = {
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
}
# Options srun accepts that change nothing here, and why (srun -v says so).
NO_EFFECT: dict[str, str] = {
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
    parsed = SrunArgs(command)
    request = parsed.request
    gpt = environ.get("SLURM_GPUS_PER_TASK", "").strip()
    if gpt:
        request["gpus_per_task"] = _gpus(gpt, "SLURM_GPUS_PER_TASK")
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


# --------------------------------------------------------------------------
# Running a step
# --------------------------------------------------------------------------


class _Outputs:
    """Where each task's output goes, whole lines at a time unless unbuffered (see the module doc)."""

    def __init__(self, args: SrunArgs, width: int, files: dict[tuple[int, int], IO[bytes]]) -> None:
        self.args = args
        self.width = width
        self.files = files  # (rank, fd) -> an -o/-e file
        self.partial: dict[tuple[int, int], tuple[bytes, float]] = {}
        self.broken: set[int] = set()

    def _target(self, rank: int, fd: int) -> IO[bytes] | None:
        own = self.files.get((rank, fd))
        if own is not None:
            return own
        if fd in self.broken:
            return None
        return sys.stdout.buffer if fd == 1 else sys.stderr.buffer

    def _write(self, rank: int, fd: int, data: bytes) -> None:
        target = self._target(rank, fd)
        if target is None or not data:
            return
        if self.args.label:
            prefix = f"{rank:>{self.width}}: ".encode()
            lines = data.split(b"\n")
            data = b"\n".join(prefix + line if line or i < len(lines) - 1 else line for i, line in enumerate(lines))
        try:
            target.write(data)
            target.flush()
        except BrokenPipeError:
            self.broken.add(fd)  # srun ... | head: the reader is gone; the step runs on, as with Slurm

    def add(self, rank: int, fd: int, data: bytes) -> None:
        if self.args.unbuffered:
            self._write(rank, fd, data)
            return
        held, since = self.partial.pop((rank, fd), (b"", time.monotonic()))
        data = held + data
        cut = data.rfind(b"\n") + 1
        if cut:
            self._write(rank, fd, data[:cut])
        if cut < len(data):
            self.partial[(rank, fd)] = (data[cut:], since if held else time.monotonic())

    def flush(self, rank: int | None = None, older_than: float | None = None) -> None:
        now = time.monotonic()
        for key in sorted(self.partial):
            data, since = self.partial[key]
            if (rank is None or key[0] == rank) and (older_than is None or now - since >= older_than):
                del self.partial[key]
                self._write(key[0], key[1], data)


def _expand(pattern: str, *, job: str, step: int, rank: int, node_index: int, node: str, user: str,
            name: str) -> str:
    values = {"j": job, "J": f"{job}.{step}", "s": str(step), "t": str(rank), "n": str(node_index), "N": node,
              "u": user, "x": name, "%": "%"}
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "%" and i + 1 < len(pattern):
            j = i + 1
            while j < len(pattern) and pattern[j].isdigit():
                j += 1
            if j < len(pattern) and pattern[j] in values:
                value = values[pattern[j]]
                width = pattern[i + 1:j]
                out.append(value.zfill(int(width)) if width and value.isdigit() else value)
                i = j + 1
                continue
        out.append(ch)
        i += 1
    return "".join(out)


def _open_files(args: SrunArgs, started: dict[str, Any], environ: Mapping[str, str]) -> dict[tuple[int, int], IO[bytes]]:
    """``-o``/``-e``: each task's files (one handle per distinct path; ``-e`` defaults to ``-o``'s)."""
    if args.output is None and args.error is None:
        return {}
    mode = "ab" if args.open_mode == "append" else "wb"
    opened: dict[str, IO[bytes]] = {}
    files: dict[tuple[int, int], IO[bytes]] = {}
    job = environ.get("SLURM_JOB_ID", "")
    user = environ.get("SLURM_JOB_USER") or environ.get("USER", "")
    name = args.name or environ.get("SLURM_JOB_NAME", "")
    for index, (node, ranks) in enumerate(zip(started["nodes"], started["ranks"])):
        for rank in ranks:
            for fd, pattern in ((1, args.output), (2, args.error if args.error is not None else args.output)):
                if pattern is None:
                    continue
                path = "/dev/null" if pattern.lower() == "none" else _expand(
                    pattern, job=job, step=started["step"], rank=rank, node_index=index, node=node, user=user, name=name)
                if path not in opened:
                    opened[path] = open(path, mode)
                files[(rank, fd)] = opened[path]
    return files


def _connect(path: str) -> socket.socket:
    last: OSError | None = None
    for _ in range(CONNECT_TRIES):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            return sock
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            sock.close()
            last = exc
            time.sleep(0.1)
    raise SrunError(f"cannot reach the node's agent at {path}: {last.strerror if last else 'no answer'}")


async def _step(args: SrunArgs, path: str, environ: Mapping[str, str]) -> int:
    sock = await asyncio.to_thread(_connect, path)
    reader, writer = await asyncio.open_unix_connection(sock=sock, limit=16 * 1024 * 1024)
    cwd = args.chdir if args.chdir is not None else os.getcwd()
    if args.chdir is not None and not os.path.isabs(cwd):
        cwd = os.path.join(os.getcwd(), cwd)
    writer.write(json.dumps({"op": "run", "argv": args.command, "options": args.request, "env": dict(environ),
                             "cwd": cwd, "name": args.name}).encode() + b"\n")
    await writer.drain()
    loop = asyncio.get_running_loop()
    asked: dict[str, int] = {}

    def on_signal(sig: int) -> None:
        kind = "stop" if sig == signal.SIGTERM else signal.Signals(sig).name
        asked[kind] = asked.get(kind, 0) + 1
        if sig == signal.SIGTERM or (sig == signal.SIGINT and asked[kind] > 1):
            why = "srun got SIGTERM" if sig == signal.SIGTERM else "srun was interrupted twice"
            message: dict[str, Any] = {"stop": True, "reason": why}
            if not args.quiet:
                print(f"srun: forcing job step termination ({why})", file=sys.stderr, flush=True)
        else:
            message = {"signal": int(sig)}
            if sig == signal.SIGINT and not args.quiet:
                print("srun: interrupt (one more within a second to stop the step)", file=sys.stderr, flush=True)
        writer.write(json.dumps(message).encode() + b"\n")

    forwarded = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
                 signal.SIGCONT)
    for sig in forwarded:
        loop.add_signal_handler(sig, on_signal, int(sig))
    outputs: _Outputs | None = None
    node_of: dict[int, str] = {}
    code = 1
    try:
        while True:
            try:
                line = await asyncio.wait_for(reader.readline(), FLUSH_PARTIAL_S)
            except asyncio.TimeoutError:
                if outputs is not None:
                    outputs.flush(older_than=FLUSH_PARTIAL_S)
                continue
            if not line:
                print("srun: error: lost contact with the node's agent; the step's end is unknown", file=sys.stderr)
                return 1
            message = json.loads(line)
            if "o" in message:
                assert outputs is not None
                outputs.add(int(message["r"]), int(message["f"]), base64.b64decode(message["o"]))
            elif "x" in message:
                rank, task_code, error = int(message["x"]), message.get("c"), message.get("e") or ""
                if outputs is not None:
                    outputs.flush(rank=rank)
                _report_task(node_of.get(rank, "?"), rank, task_code, error, args.quiet)
            elif "started" in message:
                started = message["started"]
                for node, ranks in zip(started["nodes"], started["ranks"]):
                    for rank in ranks:
                        node_of[rank] = node
                outputs = _Outputs(args, len(str(max(started["tasks"] - 1, 0))),
                                   _open_files(args, started, environ))
                for warning in started.get("warnings") or ():
                    print(f"srun: warning: {warning}", file=sys.stderr)
                if args.verbose:
                    from services.domain.hostlist import compress

                    print(f"srun: step {environ.get('SLURM_JOB_ID', '')}.{started['step']}: {started['tasks']} "
                          f"task(s) on {compress(started['nodes'])}", file=sys.stderr)
                    for note in args.notes:
                        print(f"srun: {note}", file=sys.stderr)
            elif "end" in message:
                end = message["end"]
                code = int(end.get("srun_code") or 0)
                if end.get("reason") and not args.quiet:
                    print(f"srun: error: step {environ.get('SLURM_JOB_ID', '')}.{end.get('step')} stopped: "
                          f"{end['reason']}", file=sys.stderr)
                return code
            elif "error" in message:
                print(f"srun: error: {message['error']}", file=sys.stderr)
                return 1
    finally:
        if outputs is not None:
            outputs.flush()
            for handle in set(outputs.files.values()):
                handle.close()
        for sig in forwarded:
            loop.remove_signal_handler(sig)
        writer.close()


def _report_task(node: str, rank: int, code: int | None, error: str, quiet: bool) -> None:
    if error:
        print(f"srun: error: {node}: task {rank}: {error}", file=sys.stderr, flush=True)
    elif code is not None and code > 0 and not quiet:
        print(f"srun: error: {node}: task {rank}: Exited with exit code {code}", file=sys.stderr, flush=True)
    elif code is not None and code < 0 and not quiet:
        try:
            what = {signal.SIGKILL: "Killed", signal.SIGTERM: "Terminated"}.get(
                signal.Signals(-code), signal.Signals(-code).name)
        except ValueError:
            what = f"signal {-code}"
        print(f"srun: error: {node}: task {rank}: {what}", file=sys.stderr, flush=True)


def run_srun(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    """srun's whole run: its exit code (errors are printed as srun prints them)."""
    environ = dict(os.environ if environ is None else environ)
    try:
        args = parse_srun(argv, environ)
    except SrunError as exc:
        print(f"srun: error: {exc}", file=sys.stderr)
        return 1
    path = environ.get(SOCKET_ENV)
    if not path:
        print("srun: error: not inside a Horizon job: srun runs a job step inside a batch script "
              "(horizon sbatch SCRIPT); to run a command as a job of its own: horizon submit -- COMMAND",
              file=sys.stderr)
        return 1
    try:
        return asyncio.run(_step(args, path, environ))
    except SrunError as exc:
        print(f"srun: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"srun: error: {exc.strerror or exc}", file=sys.stderr)
        return 1


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False,
                                 "help_option_names": ["--help"]})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def srun(ctx: click.Context, args: tuple[str, ...]) -> None:
    """Inside a job: run a command once per task across the job's nodes (a job step).

    \b
    srun [-n N] [-N N] [--ntasks-per-node N] [-c N] [--gpus-per-task N] [-l] [--export ...] COMMAND [ARGS...]

    Without options the whole allocation: every node, with its tasks. Each task gets SLURM_PROCID,
    SLURM_LOCALID, SLURM_NODEID, SLURM_NTASKS, SLURM_STEP_ID, ... and its own CUDA_VISIBLE_DEVICES.
    srun exits with the highest exit code of the tasks. docs/slurm.md, "Job steps".
    """
    ctx.exit(run_srun(list(args)))


def register(group: click.Group) -> None:
    group.add_command(srun)
