"""Containers: a job submitted with ``--image`` runs its command in a Podman container. Linux, rootful.

The per-attempt supervisor (``services/nodes/backends/process/attempt_supervisor.py``) runs ``podman run …``
where it would run the bare command: the same cgroup, limits, output files,
signals and exit status as a plain process. What makes that true, measured on
cgroup v1 hybrids without systemd (Podman 4.3, runc 1.1):

* **The cgroup.** runc always puts a container in a cgroup of its own
  (``/libpod_parent/libpod-<id>``, or ``<parent>/libpod-<id>`` with
  ``--cgroup-parent``); ``--cgroups=disabled`` is refused by runc ("not
  compatible with NoCgroups") and crun refuses the hybrid layout outright. In
  a child of the job's cgroup the memory limit does bite, but v1 counts an OOM
  kill in the victim's own cgroup, which runc deletes with the container, so
  the job's ``oom_kills`` stays 0. So an OCI hook (``createRuntime``: runc runs
  it after making the container's cgroup, before the command starts) moves the
  container's first process into the job's memory, cpu, cpuset and pids cgroups
  (``write_cgroup_hook``); everything it starts stays there. The job's limits,
  OOM counter, ``pids`` and ``signal_all`` then cover the container like any
  process. The devices cgroup stays Podman's: its allow-list (only the
  ``--device`` files given) is stricter than the job's deny-list.
  ``--cgroups=no-conmon`` keeps conmon (Podman's per-container monitor) in the
  job's cgroup too, so ``signal_all`` reaches it.
* **Limits of the process.** Podman asks runc for ``nofile`` and ``nproc`` of
  1048576, which root here may not raise its hard limits to ("error setting
  rlimit type 7: operation not permitted"); ``--ulimit host`` and ``-1`` fail the
  same way. The container gets the caller's own limits instead (a plain job
  inherits the same), ``nproc`` at most 32768: Podman lowers its own hard limit
  to that at start (strace: ``setrlimit(RLIMIT_NPROC, 32768)``) and runc cannot
  give the container more than Podman has.
* **Signals.** ``--sig-proxy`` (on by default) forwards the SIGTERM the agent
  sends to Podman's process group into the container; ``--init`` puts a small
  init (catatonit) as PID 1 that passes it on, because the command itself as
  PID 1 of its namespace would ignore it (measured: ``sleep`` under ``sh`` as
  PID 1 outlived SIGTERM; with ``--init`` Podman exited 143 in 0.3 s).
* **Output.** ``--log-driver=passthrough`` hands Podman's own stdout and stderr
  to the container's process: the job writes straight into the files the shim
  opened, nothing is copied or kept in Podman's storage.
* **Where.** The job's working directory is bind-mounted at the same path and
  is the container's working directory; ``--network=host``, ``--uts=host`` and
  ``--ipc=host`` as a plain process has (jobs talk across nodes, NCCL and data
  loaders need the host's ``/dev/shm``, not Podman's 64 MB one).
* **What runs.** The command itself, not the image's entrypoint
  (``--entrypoint=``, as pyxis does); images are never pulled
  (``--pull=never``): ``image_problem`` says what to do when one is missing.
* **Environment.** The job's variables go in a file only root can read
  (``write_env_file``, ``--env-file``), not on Podman's command line, which
  every user of the node can see with ``ps``; a value with a line break, which
  that file cannot hold, goes on the command line. Podman's own environment
  stays the node's: a job cannot point root's Podman at a configuration of its
  own (``CONTAINERS_CONF``, ``LD_PRELOAD``…). ``--http-proxy=false``: the
  node's proxy variables are not the job's.

Nothing here needs a ``containers.conf``: everything a Horizon container needs
is on its command line, so a node's own Podman configuration is left alone.
A container killed with SIGKILL (the agent's last resort) stays in Podman's
list, and ``podman run --replace`` fails on such a leftover: ``cleanup``
removes it, after the attempt and before it (the same name). The measurements
behind each choice are in docs/containers.md.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["podman_argv", "container_name", "write_env_file", "write_cgroup_hook", "host_ulimits",
           "gpu_device_files", "default_hooks_dirs", "image_problem", "available", "cleanup",
           "RUNTIME", "HOOK_FILE", "NPROC_CAP"]

RUNTIME = "runc"  # crun, Podman's other runtime, refuses the v1 hybrid layout of machines without systemd
HOOK_FILE = "horizon-cgroups.json"
NPROC_CAP = 32768  # Podman lowers its own RLIMIT_NPROC to this at start; the container cannot have more
HOOK_CONTROLLERS = ("memory", "cpu", "cpuset", "pids")  # moved into the job's cgroup; "devices" stays Podman's
DEFAULT_HOOKS_DIRS = ("/usr/share/containers/oci/hooks.d", "/etc/containers/oci/hooks.d")
INIT_PATH = "/usr/libexec/podman/catatonit"  # where Podman looks for the init of --init (containers.conf: init_path)
GPU_CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
CGROUP_ROOT = Path("/sys/fs/cgroup")
QUERY_TIMEOUT_S = 30.0

_NAME_OK = re.compile(r"[^a-zA-Z0-9_.-]")


def container_name(job_id: str, attempt: int) -> str:
    """``horizon-<job>-<attempt>``: one name per attempt, so ``cleanup`` finds a leftover by name.
    Characters Podman refuses in a name become ``_``."""
    return _NAME_OK.sub("_", f"horizon-{job_id}-{attempt}")


def host_ulimits() -> dict[str, tuple[int, int]]:
    """``nofile`` and ``nproc`` (soft, hard) of the calling process, as the container's: what a plain
    job started by the same process would inherit, ``nproc`` capped at ``NPROC_CAP`` (module doc)."""
    out: dict[str, tuple[int, int]] = {}
    for name, which, cap in (("nofile", resource.RLIMIT_NOFILE, None), ("nproc", resource.RLIMIT_NPROC, NPROC_CAP)):
        soft, hard = resource.getrlimit(which)
        if cap is not None:
            hard = cap if hard == resource.RLIM_INFINITY else min(hard, cap)
        elif hard == resource.RLIM_INFINITY:
            hard = 1 << 20
        soft = hard if soft == resource.RLIM_INFINITY else min(soft, hard)
        out[name] = (soft, hard)
    return out


def gpu_device_files(minors: Sequence[int], dev: Path = Path("/dev")) -> list[str]:
    """The device files a job's GPUs need in a container: ``/dev/nvidia<minor>`` for each of its GPUs,
    plus the driver's control devices that exist on this node."""
    files = [str(dev / f"nvidia{minor}") for minor in minors]
    if files:
        files += [str(dev / Path(p).name) for p in GPU_CONTROL_DEVICES if (dev / Path(p).name).exists()]
    return files


def default_hooks_dirs() -> list[str]:
    """Podman's own hook directories that exist here: ``--hooks-dir`` replaces them, and the NVIDIA
    container toolkit installs its hook there."""
    return [d for d in DEFAULT_HOOKS_DIRS if os.path.isdir(d)]


def _one_line(name: str, value: str) -> bool:
    """Whether ``name=value`` can be a line of Podman's ``--env-file`` (taken literally, no quoting)."""
    return bool(name) and not any(c.isspace() for c in name) and not name.startswith("#") \
        and "=" not in name and "\n" not in value and "\r" not in value


def write_env_file(path: Path, env: Mapping[str, str]) -> None:
    """Write the variables ``podman_argv(env_file=path)`` expects in the file, readable by the owner only;
    the ones with a line break stay out (``podman_argv`` puts them on the command line)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.writelines(f"{name}={value}\n" for name, value in env.items() if _one_line(name, value))


def write_cgroup_hook(hooks_dir: Path, cgroup_dirs: Mapping[str, Path] | Sequence[Path]) -> Path:
    """Write the OCI hook that moves the container's first process into the job's cgroup (module doc).

    ``cgroup_dirs``: ``JobCgroup.paths()`` (controller -> directory; "devices" and controllers the hook
    does not move are left out) or the directories themselves. The hook is this file run by this
    Python in isolated mode; it fails (and so does ``podman run``, exit 126) if a directory is gone:
    a job never runs unconfined because its cgroup vanished."""
    if isinstance(cgroup_dirs, Mapping):
        dirs = sorted({str(p) for name, p in cgroup_dirs.items() if name in HOOK_CONTROLLERS})
    else:
        dirs = sorted({str(p) for p in cgroup_dirs})
    hooks_dir.mkdir(parents=True, exist_ok=True)
    hook = {
        "version": "1.0.0",
        "hook": {"path": sys.executable, "args": [sys.executable, "-I", os.path.abspath(__file__), "join", *dirs]},
        "when": {"always": True},
        "stages": ["createRuntime"],
    }
    path = hooks_dir / HOOK_FILE
    path.write_text(json.dumps(hook, indent=1))
    return path


def podman_argv(
    *,
    name: str,
    image: str,
    command: Sequence[str],
    env: Mapping[str, str],
    cwd: str,
    mounts: Sequence[str] = (),
    devices: Sequence[str] = (),
    podman: str = "podman",
    hooks_dir: Path | str | None = None,
    env_file: Path | str | None = None,
    extra_hooks_dirs: Sequence[str] | None = None,
    ulimits: Mapping[str, tuple[int, int]] | None = None,
    runtime: str | None = RUNTIME,
    user: tuple[int, int, Sequence[int]] | None = None,
) -> list[str]:
    """The argv the shim runs instead of ``command`` (module doc: why each option).

    ``mounts``: host directories bind-mounted at the same path (besides ``cwd``), e.g. the attempt's
    directory that holds ``HORIZON_CHECKPOINT_FILE``. ``devices``: device files (``gpu_device_files``).
    ``hooks_dir``: where ``write_cgroup_hook`` wrote the hook (None: the node has no cgroups to join).
    ``env_file``: where ``write_env_file`` wrote ``env`` (None: every variable on the command line).
    ``extra_hooks_dirs``: Podman's own hook directories to keep (default: ``default_hooks_dirs()``).
    ``ulimits``: name -> (soft, hard) (default: ``host_ulimits()``). ``runtime``: the OCI runtime
    (None: Podman's default). ``user``: (uid, gid, supplementary gids) the container's processes run
    as, the same numbers as on the node (no user namespace: files it writes in the mounted folders are
    that user's). Raises ValueError for a path Podman cannot mount (one with a ``:``)."""
    argv = [podman]
    if runtime:
        argv += ["--runtime", runtime]
    argv.append("--cgroup-manager=cgroupfs")  # no systemd here; where there is one, Horizon's cgroups are not its
    if hooks_dir is not None:
        hooks = [str(hooks_dir), *(default_hooks_dirs() if extra_hooks_dirs is None else extra_hooks_dirs)]
        for directory in hooks:
            argv += ["--hooks-dir", directory]
    argv += [
        "run", "--rm", f"--name={name}",
        "--pull=never",
        "--cgroups=no-conmon", "--pids-limit=-1",  # the job's cgroup holds the pids limit
        "--init", "--sig-proxy=true",
        "--log-driver=passthrough",
        "--network=host", "--uts=host", "--ipc=host",
        "--http-proxy=false",
        "--entrypoint=",
    ]
    for limit, (soft, hard) in sorted((ulimits if ulimits is not None else host_ulimits()).items()):
        argv.append(f"--ulimit={limit}={soft}:{hard}")
    for path in dict.fromkeys([cwd, *mounts]):
        if ":" in path:
            raise ValueError(f"{path!r} cannot be mounted into a container: Podman splits volumes at ':'")
        argv.append(f"--volume={path}:{path}")
    argv.append(f"--workdir={cwd}")
    if user is not None:
        uid, gid, groups = user
        argv.append(f"--user={uid}:{gid}")
        argv += [f"--group-add={group}" for group in groups if group != gid]
    if env_file is not None:
        argv.append(f"--env-file={env_file}")
    for key, value in env.items():
        if env_file is None or not _one_line(key, value):
            argv.append(f"--env={key}={value}")
    for device in devices:
        argv.append(f"--device={device}")
    argv.append(image)
    argv += list(command)
    return argv


def _run(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str] | str:
    """Run a Podman query; the reason as a string when it could not run at all."""
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        return f"{argv[0]} is not installed on this node"
    except subprocess.TimeoutExpired:
        return f"`{' '.join(argv)}` did not answer within {timeout_s:g} s"
    except OSError as exc:
        return f"{argv[0]} cannot run: {exc.strerror}"


def available(podman: str = "podman", runtime: str | None = RUNTIME) -> str | None:
    """Why containers cannot run on this node, or None: Podman and the runtime installed, root, and
    Podman answering."""
    if shutil.which(podman) is None:
        return f"{podman} is not installed on this node (Debian: apt-get install podman runc)"
    if runtime and shutil.which(runtime) is None:
        return f"the OCI runtime {runtime} is not installed on this node (Debian: apt-get install {runtime})"
    if not os.access(INIT_PATH, os.X_OK):
        return f"Podman's --init binary {INIT_PATH} is not installed (Debian: apt-get install catatonit)"
    if os.geteuid() != 0:
        return "containers need root: the agent runs rootful Podman and moves containers into job cgroups"
    done = _run([podman, *(["--runtime", runtime] if runtime else []), "info", "--format", "{{.Host.OCIRuntime.Name}}"],
                QUERY_TIMEOUT_S)
    if isinstance(done, str):
        return done
    if done.returncode != 0:
        return f"podman info failed: {_last_line(done.stderr)}"
    return None


def image_problem(image: str, podman: str = "podman") -> str | None:
    """Why ``image`` cannot run here, or None: it must be in the node's local store, Horizon never pulls."""
    done = _run([podman, "image", "exists", image], QUERY_TIMEOUT_S)
    if isinstance(done, str):
        return f"cannot run image {image}: {done} (Debian: apt-get install podman runc)"
    if done.returncode == 1:
        return (f"image {image} is not on this node (Horizon never pulls): load it on every node that may run "
                f"the job, e.g. `podman pull {image}`, `podman load -i FILE` or `podman import`")
    if done.returncode != 0:
        return f"cannot check image {image}: {_last_line(done.stderr)}"
    return None


def cleanup(name: str, podman: str = "podman", timeout_s: float = QUERY_TIMEOUT_S) -> bool:
    """Remove the container ``name`` and its empty cgroups, best effort; True when none is left.

    After the agent's SIGKILL Podman still lists the container as running (conmon died with it) and
    runc leaves its cgroup directories (empty, since the hook moved the processes out)."""
    inspected = _run([podman, "container", "inspect", "--format", "{{.State.CgroupPath}}", name], timeout_s)
    cgroup = inspected.stdout.strip() if not isinstance(inspected, str) and inspected.returncode == 0 else ""
    # Podman's first `rm` of such a container finds it stopped half-way and fails ("could not be
    # stopped: container state improper"), having recorded it stopped; the second removes it.
    deadline = time.monotonic() + timeout_s
    for _ in range(3):
        removed = _run([podman, "rm", "--force", "--ignore", "--time=0", name], max(1.0, deadline - time.monotonic()))
        if isinstance(removed, str) or removed.returncode == 0 or time.monotonic() > deadline:
            break
    if cgroup.startswith("/") and ".." not in cgroup:
        for controller in _cgroup_mounts():
            try:
                (controller / cgroup.lstrip("/")).rmdir()
            except OSError:
                pass  # gone already, or not empty: never forced
    return not isinstance(removed, str) and removed.returncode == 0


def _cgroup_mounts() -> list[Path]:
    """Every mounted cgroup hierarchy (v1: one per controller; v2: the root)."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT]
    try:
        return [p for p in CGROUP_ROOT.iterdir() if (p / "cgroup.procs").exists()]
    except OSError:
        return []


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def _join(pid: int, dirs: Sequence[str]) -> None:
    """The hook: put ``pid`` in each cgroup directory."""
    for directory in dirs:
        with open(os.path.join(directory, "cgroup.procs"), "w") as fh:
            fh.write(str(pid))


if __name__ == "__main__" and sys.argv[1:2] == ["join"]:
    # The OCI hook (write_cgroup_hook): runc passes the container's state on stdin; "pid" is its first process.
    _join(int(json.load(sys.stdin)["pid"]), sys.argv[2:])
