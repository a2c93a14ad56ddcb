"""The Slurm backend's executor: each attempt a Slurm batch job, followed to its end.

It is an ``Executor`` (``services/nodes/backends/protocol.py``) like the agent's own process executor, so the node agent's
adapter (``services/nodes/agent/app.py``) carries out the log's placements, cancels and preemptions over
Slurm exactly as over processes, and reports each start and end once with the same deterministic ids.

* ``start``: ``sbatch`` (``core.sbatch_argv``: with the job's account, and its QOS where Slurm has
  that QOS, ``slurm_qos``) of a script (``core.batch_script``) written in the
  attempt's directory (``<data dir>/jobs/<job>/<attempt>/``, where the output goes too unless
  ``--output`` says otherwise, and its ``plan.json``, which ``horizon logs`` reads); it returns when
  Slurm runs the job (``JobStarted`` then follows), or has ended it. A job with this attempt's comment
  already in Slurm is followed, never submitted again (a backend that restarted between ``sbatch`` and
  its report).
* ``devices``: the GPUs Slurm gave the job on each node (``JobStarted.devices``: the ledger follows).
* ``wait``: until Slurm's record of the job is ended (``scontrol show job -o -d``, polled by one
  ``SlurmWatch`` for every job at once; accounting may be off), as an ``Outcome`` (``core.outcome``).
  A job the controller no longer knows (it ended while no backend watched, and was purged after
  ``MinJobAge``) is looked up in Slurm's accounting (``sacct``), then its job completion record
  (``sacct -c``, ``JobCompType``), before it is reported lost.
* ``stop``: ``scancel`` (Slurm's own SIGTERM to every process of the job, SIGKILL after its
  ``KillWait``), so that Slurm's record says CANCELLED, as Horizon's does.
* ``checkpoint``: ``scancel --signal=<sig> --batch`` (the batch script alone, as the agent signals the
  main process), then the reference the job writes to ``$HORIZON_CHECKPOINT_FILE``.
* ``adopt``: the attempt's Slurm job, found by its comment (or, once purged, by the Slurm job id
  ``plan.json`` keeps), for a backend that restarted.

The job's files are on the filesystem the backend and the nodes share (``--output`` paths are
the backend's); the checkpoint reference is read there too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from events import catalogue as c
from services.nodes.backends.protocol import Files, Outcome
from services.nodes.backends.process.job_files import (default_spool, private_dir, read_checkpoint_ref, spool_name,
                                                       stderr_tail)
from services.domain.output import expand, names_of, resolve
from services.nodes.backends.process.identity import identity_for
from services.nodes.backends.slurm import core
from services.nodes.job_environment import job_environment
from services.runtime.cancel import cancel_and_wait

__all__ = ["Slurm", "SlurmWatch", "SlurmExecution", "SlurmExecutor", "SlurmError"]

log = logging.getLogger("horizon.slurm")

KILL_WAIT_S = 30.0  # after the final scancel, how long to wait for Slurm to end the job before giving up
QOS_TTL_S = 60.0  # how long Slurm's list of QOS names is taken as it was read


class SlurmError(RuntimeError):
    """A Slurm command failed: its name, exit code and what it printed."""


class Slurm:
    """Slurm's commands (``bin_dir``: where the real ones are, not Horizon's shims of the same names),
    run with ``SLURM_CONF`` and a clean environment (nothing of the backend's, credentials included,
    reaches a job through sbatch's ``--export=ALL``)."""

    def __init__(self, conf: str | Path | None = None, bin_dir: str = "/usr/bin") -> None:
        self.bin_dir = bin_dir
        self.env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ")}
        self.env.setdefault("PATH", os.defpath)
        if conf is not None:
            self.env["SLURM_CONF"] = str(conf)
        elif os.environ.get("SLURM_CONF"):
            self.env["SLURM_CONF"] = os.environ["SLURM_CONF"]

    def _argv(self, argv: Sequence[str]) -> list[str]:
        return [os.path.join(self.bin_dir, argv[0]), *argv[1:]]

    async def run(self, *argv: str, timeout_s: float = 30.0) -> str:
        try:
            proc = await asyncio.create_subprocess_exec(*self._argv(argv), stdin=subprocess.DEVNULL,
                                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env)
        except OSError as exc:  # no such command, too many processes
            raise SlurmError(f"cannot run {argv[0]}: {exc}") from exc
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise SlurmError(f"{argv[0]} did not answer within {timeout_s:g} s") from None
        if proc.returncode != 0:
            raise SlurmError(f"{argv[0]} failed (exit {proc.returncode}): {err.decode(errors='replace').strip()}")
        return out.decode(errors="replace")

    def run_sync(self, *argv: str, timeout_s: float = 30.0) -> str:
        try:
            done = subprocess.run(self._argv(argv), stdin=subprocess.DEVNULL, capture_output=True, env=self.env,
                                  timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SlurmError(f"cannot run {argv[0]}: {exc}") from exc
        if done.returncode != 0:
            raise SlurmError(f"{argv[0]} failed (exit {done.returncode}): {done.stderr.decode(errors='replace').strip()}")
        return done.stdout.decode(errors="replace")


class SlurmWatch:
    """Slurm's job records, refreshed by one ``scontrol show job -o -d`` for all at once."""

    def __init__(self, slurm: Slurm, install: str, interval_s: float = 0.5) -> None:
        self.slurm = slurm
        self.install = install  # this installation's id, in its jobs' comments (core.comment_of)
        self.interval_s = interval_s
        self.jobs: dict[str, dict[str, str]] = {}  # Slurm job id -> its latest record
        self.refreshed = 0.0  # monotonic time of the last refresh
        self._changed = asyncio.Condition()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.error = ""

    def absorb(self, text: str) -> None:
        self.jobs = {r["JobId"]: r for r in core.parse_records(text) if "JobId" in r}
        self.refreshed = time.monotonic()

    async def refresh(self) -> None:
        async with self._lock:
            try:
                self.absorb(await self.slurm.run("scontrol", "show", "job", "-o", "-d"))
                self.error = ""
            except SlurmError as exc:
                if exc.args and "Invalid job id" in str(exc):
                    self.absorb("")
                else:
                    if str(exc) != self.error:
                        log.warning("cannot read Slurm's jobs: %s", exc)
                    self.error = str(exc)
                    return
        async with self._changed:
            self._changed.notify_all()

    def refresh_sync(self) -> None:
        self.absorb(self.slurm.run_sync("scontrol", "show", "job", "-o", "-d"))

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="slurm-watch")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)

    async def _loop(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(self.interval_s)

    def find(self, job_id: str, attempt: int) -> str | None:
        """The Slurm job of this attempt (its comment), the newest if several."""
        found = [sid for sid, r in self.jobs.items() if core.attempt_of(r, self.install) == (job_id, attempt)]
        return max(found, key=int) if found else None

    async def until(self, ready: Callable[[dict[str, str] | None], bool], slurm_id: str,
                    timeout_s: float | None = None) -> dict[str, str] | None:
        """Wait until ``ready`` holds of the job's record (None once Slurm no longer knows it)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        async with self._changed:
            while not ready(self.jobs.get(slurm_id)):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), left)
        return self.jobs.get(slurm_id)


def _ended(record: dict[str, str] | None) -> bool:
    return record is None or record.get("JobState", "") in core.ENDED


def _running(record: dict[str, str] | None) -> bool:
    return _ended(record) or record.get("JobState") not in ("PENDING", "CONFIGURING", "REQUEUED")  # type: ignore[union-attr]


class SlurmExecution:
    """One attempt as a Slurm job (see the module doc)."""

    pid: int | None = None

    def __init__(self, executor: SlurmExecutor, slurm_id: str, directory: Path, files: Files,
                 uid: int | None = None) -> None:
        self.uid = uid  # the job's user: the agent reads only its files for it
        self.executor = executor
        self.slurm_id = slurm_id
        self.directory = directory
        self.files = files
        record = executor.watch.jobs.get(slurm_id) or {}
        self.started_wall: float | None = core.parse_time(record.get("StartTime"))

    @property
    def devices(self) -> dict[str, list[str]]:
        """Node -> the GPUs Slurm really gave the job there (its ``IDX``), which the agent reports with
        ``JobStarted``: Slurm chooses them, whatever device ids placement wrote."""
        return core.devices_of(self.executor.watch.jobs.get(self.slurm_id) or {})

    def _outcome(self, record: dict[str, str] | None) -> Outcome:
        return core.outcome(record, stderr_tail(self.files.stderr, self.uid) if self.files.stderr else "")

    async def wait(self) -> Outcome:
        return await self._final(await self.executor.watch.until(_ended, self.slurm_id))

    async def _final(self, record: dict[str, str] | None) -> Outcome:
        """The outcome of an ended record; of none (purged by the controller), the accounting's or the
        completion record's, else lost."""
        if record is None:
            record = await self.executor.completed(self.slurm_id)
        return self._outcome(record)

    async def _scancel(self, *args: str) -> None:
        try:
            await self.executor.slurm.run("scancel", *args, self.slurm_id)
        except SlurmError as exc:
            log.warning("%s (Slurm job %s)", exc, self.slurm_id)
        await self.executor.watch.refresh()

    async def stop(self, grace_period_s: float) -> Outcome:
        """``scancel``: Slurm sends the job SIGTERM and, after its ``KillWait``, SIGKILL, and its record
        says CANCELLED, as Horizon's does. (A ``scancel --signal=TERM`` first, to give Horizon's grace
        instead, would leave Slurm's record FAILED or COMPLETED, as the job took the signal: Slurm's
        record and Horizon's would disagree. The checkpoint signal of a preemption does get Horizon's
        grace: ``checkpoint``, before this.)"""
        watch = self.executor.watch
        if not _ended(watch.jobs.get(self.slurm_id)):
            await self._scancel()
            await watch.until(_ended, self.slurm_id, KILL_WAIT_S)
            if not _ended(watch.jobs.get(self.slurm_id)):
                await self._scancel("--signal=KILL", "--full")
                await watch.until(_ended, self.slurm_id, KILL_WAIT_S)
        return await self._final(watch.jobs.get(self.slurm_id))

    async def checkpoint(self, signal_name: str, timeout_s: float) -> str | None:
        await self._scancel(f"--signal={signal_name.removeprefix('SIG')}", "--batch")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ref = self.checkpoint_ref()
            if ref is not None or _ended(self.executor.watch.jobs.get(self.slurm_id)):
                return ref
            await asyncio.sleep(0.1)
        return self.checkpoint_ref()

    def checkpoint_ref(self) -> str | None:
        return read_checkpoint_ref(self.directory / "checkpoint", self.uid)


class SlurmExecutor:
    """Attempts as Slurm batch jobs on ``partition`` (see the module doc). ``nodes``: the nodes'
    GPUs (for ``--gres``'s type). ``wanted(job, attempt)``: whether the attempt is still to run (the
    backend asks its agent's view of the log): one cancelled while Slurm keeps it pending is
    cancelled in Slurm, not waited for."""

    detached = True  # Slurm's jobs outlive the backend: a restarted one adopts them

    def __init__(self, slurm: Slurm, state_dir: Path, partition: str = "",
                 nodes: Mapping[str, Any] | None = None, watch: SlurmWatch | None = None) -> None:
        self.slurm = slurm
        self.state_dir = Path(state_dir)
        self.partition = partition
        self.nodes = dict(nodes or {})
        self.watch = watch or SlurmWatch(slurm, "")
        self.wanted: Callable[[str, int], bool] = lambda job_id, attempt: True
        self.limits: Callable[[str], float | None] = lambda job_id: None  # the attempt's limit (Job.limit_s)
        self._qos: tuple[float, frozenset[str]] | None = None  # (when read, Slurm's QOS names)

    def isolation(self) -> str:
        return "slurm (the node's slurmd confines jobs as its slurm.conf says)"

    async def slurm_qos(self) -> frozenset[str]:
        """Slurm's QOS names (``sacctmgr show qos``), read again after ``QOS_TTL_S``; none when Slurm
        keeps no accounting (``sacctmgr`` needs slurmdbd)."""
        now = time.monotonic()
        if self._qos is None or now - self._qos[0] > QOS_TTL_S:
            try:
                text = await self.slurm.run("sacctmgr", "-P", "-n", "show", "qos", "format=Name")
                names = frozenset(line.strip() for line in text.splitlines() if line.strip())
            except SlurmError:
                names = frozenset()
            self._qos = (now, names)
        return self._qos[1]

    async def completed(self, slurm_id: str) -> dict[str, str] | None:
        """How Slurm's records say a job the controller has purged ended: its accounting (``sacct``,
        with slurmdbd), else its job completion record (``sacct -c``, with ``JobCompType``); None if
        neither has it (both off, or it is older than they keep)."""
        for how in ("-X", "-c"):  # the allocation's line alone (no steps); the completion record
            try:
                text = await self.slurm.run("sacct", how, "-n", "-P", "-j", slurm_id, "-o", core.SACCT_FIELDS)
            except SlurmError:
                continue  # that record is off ("Slurm accounting storage is disabled")
            record = core.sacct_record(text, slurm_id)
            if record is not None:
                log.info("Slurm job %s, purged by the controller, ended %s in %s", slurm_id, record["JobState"],
                         "its job completion record" if how == "-c" else "Slurm's accounting")
                return record
        log.warning("Slurm job %s: the controller has purged it and no accounting or completion record has it",
                    slurm_id)
        return None

    def processes_here(self) -> None:
        return None  # its jobs run on Slurm's nodes

    def attempt_dir(self, job_id: str, attempt: int) -> Path:
        return self.state_dir / job_id / str(attempt)

    def _devices(self, node: str) -> dict[str, c.GpuDevice]:
        spec = self.nodes.get(node)
        return {gpu.id: gpu for gpu in spec.gpus} if spec is not None else {}

    def _files(self, directory: Path) -> Files:
        try:
            plan = json.loads((directory / "plan.json").read_text())
        except (OSError, ValueError):
            return Files()
        return Files(plan.get("cwd", ""), plan.get("stdout", ""), plan.get("stderr", ""))

    async def start(
        self, job_id: str, attempt: int, spec: c.JobSpec, alloc: c.NodeAllocation, checkpoint_ref: str | None = None,
        allocations: Sequence[c.NodeAllocation] = (),
    ) -> SlurmExecution:
        held = list(allocations) or [alloc]
        directory = self.attempt_dir(job_id, attempt)
        run_as = identity_for(spec.uid, spec.gid, spec.groups, spec.user)
        other = run_as is not None and run_as.uid != os.geteuid()  # Slurm runs it as its user (sbatch --uid)
        # its files: in a folder of its own in the spool, outside the data dir (job_files.default_spool)
        files_dir = default_spool(self.state_dir) / spool_name(job_id, attempt) if other else directory
        uid = run_as.uid if run_as is not None else None
        await self.watch.refresh()
        slurm_id = self.watch.find(job_id, attempt)
        if slurm_id is not None:
            log.info("%s attempt %d: Slurm job %s (submitted before a restart) followed", job_id, attempt, slurm_id)
            return await self._until_running(job_id, attempt, SlurmExecution(self, slurm_id, files_dir,
                                                                             self._files(directory), uid))
        if not spec.command:
            raise ValueError("the job has no command to run")
        if spec.image:
            raise ValueError("the Slurm backend runs no container images (docs/backends.md)")
        directory.mkdir(parents=True, exist_ok=True)
        if other:
            assert run_as is not None
            private_dir(files_dir.parent, mode=0o711)
            private_dir(files_dir, run_as)
        cwd = spec.cwd or str(files_dir)
        names = names_of(job_id, spec, alloc.node)
        stdout = resolve(expand(spec.stdout, names), cwd) if spec.stdout else str(files_dir / "stdout")
        stderr = (resolve(expand(spec.stderr, names), cwd) if spec.stderr
                  else stdout if spec.stdout else str(files_dir / "stderr"))
        own = job_environment(job_id, attempt, spec, alloc, checkpoint_ref, self._devices(alloc.node), held)
        # The submitting environment (sbatch's --export) but what Slurm sets itself: the allocation's view
        # (its own SLURM_*, CUDA_VISIBLE_DEVICES), the user Slurm runs it as, and where Slurm's config is
        env = {k: v for k, v in (spec.submit_env or {}).items()
               if k not in own and k not in ("HOME", "USER", "LOGNAME", "SHELL", "SLURM_CONF")}
        env.update({k: v for k, v in own.items()
                    # Slurm sets SLURM_* and CUDA_VISIBLE_DEVICES itself, but a Horizon array is no Slurm array:
                    # its task's SLURM_ARRAY_* are Horizon's (the task index, not Slurm's job id)
                    if k.startswith(("HORIZON_", "SLURM_ARRAY_")) or k in spec.env})
        env["HORIZON_CHECKPOINT_FILE"] = str((files_dir / "checkpoint").resolve())
        script = directory / "batch.sh"
        script.write_text(core.batch_script(env, spec.command))
        (directory / "plan.json").write_text(json.dumps({"job_id": job_id, "attempt": attempt, "node": alloc.node,
                                                         "tenant": spec.tenant, "cwd": cwd, "stdout": stdout,
                                                         "stderr": stderr, "files_dir": str(files_dir), "uid": uid}))
        limit = self.limits(job_id) or spec.time_limit_s
        argv = core.sbatch_argv(self.watch.install, job_id, attempt, spec, held, {a.node: self._devices(a.node) for a in held},
                                str(script), stdout, stderr, cwd, limit, self.partition,
                                await self.slurm_qos() if spec.qos else ())
        if other:
            assert run_as is not None
            argv[1:1] = [f"--uid={run_as.uid}", f"--gid={run_as.gid}"]  # root may submit for another user
        out = await self.slurm.run(*argv)
        slurm_id = out.strip().split(";")[0]
        plan = json.loads((directory / "plan.json").read_text())
        (directory / "plan.json").write_text(json.dumps({**plan, "slurm_id": slurm_id}))  # adopt's, once purged
        log.info("%s attempt %d: Slurm job %s on %s", job_id, attempt, slurm_id, ",".join(a.node for a in held))
        await self.watch.refresh()
        return await self._until_running(job_id, attempt, SlurmExecution(self, slurm_id, files_dir,
                                                                         Files(cwd, stdout, stderr), uid))

    async def _until_running(self, job_id: str, attempt: int, execution: SlurmExecution) -> SlurmExecution:
        """Return once Slurm runs (or has ended) the job; one no longer wanted is cancelled meanwhile."""
        while True:
            record = await self.watch.until(_running, execution.slurm_id, 1.0)
            if _running(record):
                break
            if not self.wanted(job_id, attempt):
                await execution._scancel()
                await self.watch.until(_ended, execution.slurm_id, KILL_WAIT_S)
                break
        record = self.watch.jobs.get(execution.slurm_id) or {}
        execution.started_wall = core.parse_time(record.get("StartTime")) or time.time()
        return execution

    def adopt(self, job_id: str, attempt: int, alloc: c.NodeAllocation) -> SlurmExecution | None:
        try:
            self.watch.refresh_sync()
        except (SlurmError, subprocess.TimeoutExpired) as exc:
            log.warning("cannot read Slurm's jobs to adopt %s: %s", job_id, exc)
            return None
        directory = self.attempt_dir(job_id, attempt)
        try:
            plan = json.loads((directory / "plan.json").read_text())
        except (OSError, ValueError):
            plan = {}
        # the controller purges an ended job after MinJobAge: then the id sbatch gave, whose end
        # Slurm's accounting or completion record may still hold (SlurmExecution.wait)
        slurm_id = self.watch.find(job_id, attempt) or plan.get("slurm_id")
        if slurm_id is None:
            return None
        return SlurmExecution(self, slurm_id, Path(plan.get("files_dir") or directory), self._files(directory),
                              plan.get("uid"))

    def released(self, job_id: str, attempt: int, alloc: c.NodeAllocation) -> None:
        return None
