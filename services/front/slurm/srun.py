"""``srun`` inside a job: run a command once per task across the job's nodes (a job step).

Inside a Horizon job ``srun`` (the agent puts Horizon's first on the job's ``PATH``) is this
command: it reads srun's options (``parse_srun``, pure: ``services/front/slurm/srun_options.py``),
asks the node's agent for a step over the attempt's Unix socket (``$HORIZON_STEP_SOCKET``;
``services/nodes/agent/steps.py`` says what the agent does), and then, like Slurm's srun:

* writes every task's standard output and error to its own (the job's output file), whole lines
  at a time, so two tasks' lines never mix (``-u``: as the bytes come); ``-l`` puts ``RANK: ``
  before each line; ``-o``/``-e`` write them to files instead (``%t`` task, ``%n`` node index,
  ``%N`` node, ``%j`` job, ``%s`` step, ``%J`` job.step, ``%A`` the array's job, ``%a`` the array
  task, ``%u``, ``%x``, ``%%``; submitit's ``srun --output logs/%A_%a/%A_%a_%t_log.out``);
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
``-J/--job-name``, ``-D/--chdir``, ``-o/--output``, ``-e/--error``, ``--open-mode``, ``-v``, ``-Q``,
``--het-group`` (``--pack-group``: a heterogeneous job's components to run on, 0 by default; Slurm's
``srun A : B`` form is refused).
Accepted with no effect here (``NO_EFFECT`` says why): ``--mpi``, ``--cpu-bind``, ``--exclusive``,
``--exact``, ``--overlap``, ``--mem*``, ``--hint``, ``--gpu-bind``, ``-p``, ``-A``, ``-q``, ...
Refused: ``--pty`` and ``-i`` (tasks read no terminal or input), and options srun does not have.
From the environment, as Slurm's srun: ``SLURM_GPUS_PER_TASK`` (set in the batch script's
environment by ``#SBATCH --gpus-per-task``) is the default of ``--gpus-per-task``; ``SRUN_EXPORT_ENV``,
else ``SLURM_EXPORT_ENV`` (set by ``#SBATCH --export=NONE`` or a list), the default of ``--export``.
The tasks get srun's own environment (the batch script's, with what it exported since) as ``--export``
says (``services/nodes/agent/step_runs.py``).
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
from typing import IO, Any

from services.front.slurm.srun_options import SrunArgs, SrunError, parse_srun

__all__ = ["run_srun", "SOCKET_ENV"]

SOCKET_ENV = "HORIZON_STEP_SOCKET"
FLUSH_PARTIAL_S = 0.2  # a line without its end yet (a progress bar) is written after this long
CONNECT_TRIES = 50  # the agent opens the socket before the job starts; a moment's grace all the same


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
            name: str, array: str = "", index: str = "") -> str:
    """``pattern`` for one task. ``array``/``index``: the array's job and the task's index (``%A``, the
    job's own outside an array, and ``%a``, empty there: as the batch script's, services/domain/output.py)."""
    values = {"j": job, "J": f"{job}.{step}", "s": str(step), "t": str(rank), "n": str(node_index), "N": node,
              "u": user, "x": name, "A": array or job, "a": index, "%": "%"}
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
    array, task = environ.get("SLURM_ARRAY_JOB_ID", ""), environ.get("SLURM_ARRAY_TASK_ID", "")
    for index, (node, ranks) in enumerate(zip(started["nodes"], started["ranks"])):
        for rank in ranks:
            for fd, pattern in ((1, args.output), (2, args.error if args.error is not None else args.output)):
                if pattern is None:
                    continue
                path = "/dev/null" if pattern.lower() == "none" else _expand(
                    pattern, job=job, step=started["step"], rank=rank, node_index=index, node=node, user=user,
                    name=name, array=array, index=task)
                if path not in opened:
                    try:
                        opened[path] = open(path, mode)
                    except OSError as exc:
                        raise SrunError(f"cannot open output file {path}: {exc.strerror or exc}") from None
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
