"""The per-attempt supervisor: runs one attempt of a job and outlives the agent that started it.

``python -m services.nodes.backends.process.attempt_supervisor ATTEMPT_DIR`` is started by the agent in a
session of its own (so neither Ctrl-C in the agent's terminal nor the agent's
death reaches it), like Slurm's ``slurmstepd`` or a container runtime's
shim. It owns the attempt: its cgroup, its process group, its output files and
its exit status. The agent talks to it only through files in ``ATTEMPT_DIR``:

``plan.json``   written by the agent before the start: the command, its
                environment, working directory, output files and open mode,
                the cgroup hierarchy and limits (``services/nodes/backends/process/cgroups.py``)
``shim.pid``    ``<pid> <start time>`` of this supervisor
``job.pid``     ``<pid> <start time> <wall clock>`` of the command: the leader of
                its process group; written once it runs
``status.json`` the end, written once by an atomic rename: ``exit_code``,
                ``signal``, ``oom_kills``, ``error`` (could not start: no such
                directory, no such command, an output file that cannot be
                opened) and ``ended`` (wall clock)

A restarted agent finds the attempt by these files and watches it again
(``services/nodes/backends/process/executors.py``: ``ProcessExecutor.adopt``); the status is
there whether or not an agent was watching when the job ended. The agent
stops a job by signalling the job's process group (SIGTERM), then every
process in the cgroup (SIGKILL); the supervisor itself ignores SIGINT, SIGHUP
and SIGTERM and ends when its command has, after stopping what the command
left in the cgroup (a job step's tasks, helpers: SIGTERM, then SIGKILL after
the plan's ``kill_wait_s``, as Slurm's KillWait) and removing the cgroup.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from services.nodes.backends.process import containers
from services.nodes.backends.process.cgroups import Hierarchy, JobCgroup, Limits
from services.nodes.backends.process.identity import Identity, may_enter, open_as

__all__ = ["main", "start_time", "read_pid_file", "PLAN", "STATUS", "SHIM_PID", "JOB_PID"]

PLAN, STATUS, SHIM_PID, JOB_PID = "plan.json", "status.json", "shim.pid", "job.pid"
OUTPUT_FOLDER_WAIT_S = 10.0  # how long a missing folder of the output files is waited for (_open_outputs)
_IGNORED = (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)


def start_time(pid: int) -> str:
    """The kernel's start time of ``pid`` (field 22 of /proc/<pid>/stat), "" if there is no such process.
    A pid and this together name one process: pids are reused, start times are not."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def read_pid_file(path: Path) -> tuple[int, str, float] | None:
    """``(pid, start time, wall clock)`` from a pid file, None if absent or unreadable."""
    try:
        parts = path.read_text().split()
        return int(parts[0]), parts[1] if len(parts) > 1 else "", float(parts[2]) if len(parts) > 2 else 0.0
    except (OSError, ValueError, IndexError):
        return None


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600), "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _open_outputs(plan: dict[str, Any], run_as: Identity | None) -> tuple[IO[bytes], IO[bytes]]:
    """The job's output files, opened (created) by the job's user: its permissions decide where it may
    write, and what it creates is its own.

    A folder of theirs that is missing is waited for, up to ``OUTPUT_FOLDER_WAIT_S``: Slurm starts a
    batch job a moment after sbatch returns (half a second and more), and tools rely on it; submitit
    makes its output folder ``logs/<job number>`` once sbatch has printed the number, where this
    agent may already be starting the job. A folder that does not come fails the job as in Slurm."""
    stdout_path, stderr_path = plan["stdout"], plan["stderr"]
    paths = [stdout_path] if stderr_path == stdout_path else [stdout_path, stderr_path]
    deadline = time.monotonic() + OUTPUT_FOLDER_WAIT_S
    while True:
        try:
            fds = open_as(run_as, paths, plan.get("open_mode") or "truncate")
            break
        except FileNotFoundError:  # O_CREAT: only a folder on the way is missing
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)
    out = os.fdopen(fds[0], "wb")
    return out, (out if len(fds) == 1 else os.fdopen(fds[1], "wb"))


def run(directory: Path) -> dict[str, Any]:
    """Run the attempt planned in ``directory``; return its status (also written to ``status.json``)."""
    plan = json.loads((directory / PLAN).read_text())
    cgroup: JobCgroup | None = None
    hierarchy = Hierarchy.from_json(plan["hierarchy"])
    if hierarchy.usable:
        cgroup = hierarchy.cgroup(plan["node"], plan["job_id"], plan["attempt"])
    status: dict[str, Any] = {"exit_code": None, "signal": None, "oom_kills": 0, "error": ""}
    try:
        if cgroup is not None:
            try:
                cgroup.create(Limits.from_json(plan["limits"]))
            except OSError as exc:
                raise _StartError(f"cannot set up the job's cgroup: {exc.strerror or exc}") from None
        cwd = plan["cwd"]
        run_as = Identity.from_json(plan.get("run_as"))
        who = f" as {run_as.user} (uid {run_as.uid})" if run_as is not None else ""
        try:
            may_enter(run_as, cwd)  # as the job's user: Slurm's "could not chdir", with the reason
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                raise _StartError(f"working directory {cwd} does not exist on node {plan['node']}") from None
            raise _StartError(f"cannot enter working directory {cwd}{who}: {exc.strerror}") from None
        try:
            out, err = _open_outputs(plan, run_as)
        except OSError as exc:
            raise _StartError(f"cannot open output file {exc.filename}{who}: {exc.strerror}") from None

        argv, env, run_in = plan["argv"], plan["env"], cwd
        image = bool(plan.get("image"))
        if image:
            argv, env = _container(plan, directory, cgroup, cwd, run_as), None  # Podman runs with the node's environment
            # Podman runs from the attempt's directory: the container's own is --workdir, and what conmon may
            # leave in its working directory (an empty `oom` after an OOM kill: seen with this command line
            # run from the checkout by tests/nodes/test_containers.py) stays out of the user's
            run_in = str(directory)

        def join() -> None:  # in the child, before exec, as root: default signals again, join the attempt's cgroup
            for sig in _IGNORED:
                signal.signal(sig, signal.SIG_DFL)
            if cgroup is not None:
                cgroup.join(0)

        # A process job drops to its user in the child, after joining the cgroup and before entering its
        # folder; Podman (root) runs the container as the user itself (--user).
        enter = join if image or run_as is None else run_as.enter(cwd, before=join)
        try:
            proc = subprocess.Popen(
                argv, cwd=run_in if image or run_as is None else None, env=env, stdin=subprocess.DEVNULL,
                stdout=out, stderr=err, start_new_session=True, preexec_fn=enter, close_fds=True,
            )
        except OSError as exc:
            what = exc.filename or plan["argv"][0]
            raise _StartError(f"cannot run {what}{who}: {exc.strerror}") from None
        except subprocess.SubprocessError as exc:  # the drop or the chdir failed in the child
            raise _StartError(f"cannot start the job{who}: {exc}") from None
        finally:
            out.close()
            if err is not out:
                err.close()
        _atomic_write(directory / JOB_PID, f"{proc.pid} {start_time(proc.pid)} {time.time():.3f}\n")
        code = proc.wait()
        if code < 0:
            status["signal"] = -code
        else:
            status["exit_code"] = code
    except _StartError as exc:
        status["error"] = str(exc)
    finally:
        if cgroup is not None:
            status["oom_kills"] = cgroup.oom_kills()
            # What outlived the job's command (its steps' tasks, helpers) gets SIGTERM and, as Slurm's
            # KillWait, up to kill_wait_s to go before SIGKILL; then the cgroup is removed.
            cgroup.terminate(float(plan.get("kill_wait_s") or 0))
            cgroup.remove()
        if plan.get("container"):
            containers.cleanup(plan["container"])  # what a SIGKILL left in Podman's list
        status["ended"] = round(time.time(), 3)
        _atomic_write(directory / STATUS, json.dumps(status))
    return status


class _StartError(Exception):
    pass


def _container(plan: dict[str, Any], directory: Path, cgroup: JobCgroup | None, cwd: str,
               run_as: Identity | None = None) -> list[str]:
    """The ``podman run`` that runs the command in the image, inside the attempt's cgroup
    (``services/nodes/backends/process/containers.py``: why each option)."""
    name = plan["container"]
    containers.cleanup(name)  # a leftover of this very attempt (a supervisor killed before its cleanup)
    hooks = directory / "hooks"
    if cgroup is not None:
        containers.write_cgroup_hook(hooks, cgroup.paths())
    env_file = directory / "container.env"
    containers.write_env_file(env_file, plan["env"])
    try:
        return containers.podman_argv(
            name=name, image=plan["image"], command=plan["argv"], env=plan["env"], cwd=cwd,
            mounts=[plan.get("job_dir") or str(directory.resolve())],  # the checkpoint file is written there
            devices=containers.gpu_device_files(plan.get("gpu_minors", [])),
            hooks_dir=hooks if cgroup is not None else None, env_file=env_file,
            user=(run_as.uid, run_as.gid, run_as.groups) if run_as is not None else None,
        )
    except ValueError as exc:
        raise _StartError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m services.nodes.backends.process.attempt_supervisor ATTEMPT_DIR", file=sys.stderr)
        return 2
    directory = Path(args[0])
    for sig in _IGNORED:
        signal.signal(sig, signal.SIG_IGN)  # the job is stopped through its own process group
    _atomic_write(directory / SHIM_PID, f"{os.getpid()} {start_time(os.getpid())} {time.time():.3f}\n")
    try:
        run(directory)
    except Exception as exc:  # noqa: BLE001 - an unreadable plan: the agent must still learn the end
        if not (directory / STATUS).exists():
            _atomic_write(directory / STATUS, json.dumps(
                {"exit_code": None, "signal": None, "oom_kills": 0, "error": f"the job's supervisor failed: {exc}",
                 "ended": round(time.time(), 3)}))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
