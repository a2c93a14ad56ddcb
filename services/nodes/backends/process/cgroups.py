"""Control groups: every attempt of a job in its own cgroup, with its limits. Linux only.

``probe`` finds what the machine offers and says so in one line (the node's
``isolation``, shown by ``horizon nodes``):

* **cgroup v2** (what current distributions mount at ``/sys/fs/cgroup``): one
  tree; the controllers a job needs (memory, cpu, cpuset, pids) are enabled in
  the ``subtree_control`` of every directory on the way down;
* **cgroup v1** (older systems, and hybrids like these machines with no
  systemd): one tree per controller at ``/sys/fs/cgroup/<controller>``;
  ``devices`` exists only here (v2 filters devices with eBPF, which Horizon does
  not load);
* **none**: neither is writable (not root, a read-only mount): jobs run
  unconfined, and the agent says so loudly at start.

An attempt's cgroup is ``horizon/<node>/<job>.<attempt>`` under each
controller's root (``JobCgroup``); ``HORIZON_CGROUP_PARENT`` names another
top folder than ``horizon`` (the test suite gives each of its parallel workers
its own, so that two tests' jobs of the same name on the same node name never
share a cgroup). ``Limits`` are what it gets: a memory limit
with no swap beyond it, a CPU quota (the job's CPU limit per period, so
``--cpus 1.5`` is 150 ms per 100 ms), a cpuset (whole cores, chosen by the
agent near the job's GPUs, and the NUMA nodes of those cores), a pids limit,
and, where the devices controller exists, no access to the node's other GPUs.
The limits are the job's limits, not its requests (``services/domain/qos.py``): the same for a
guaranteed job, above them for a burstable one (``--mem-limit``, ``--cpu-limit``), none at all
(``memory_bytes`` or ``cpus_milli`` 0: the kernel's "max") for a best-effort job that gave none.
A job that is not guaranteed also gets ``cpu_shares`` from its CPU request, as the kubelet sets them:
1024 per CPU requested, 2 (the kernel's least) for a best-effort job, so under contention CPUs go
by request; a guaranteed job keeps the kernel's default weight, as before.
``memory_used`` reads what the cgroup holds now (the agent's memory-pressure watch).
The kernel's OOM killer counts its kills per cgroup: ``oom_kills`` is how the
per-job supervisor (``services/nodes/backends/process/attempt_supervisor.py``) tells an attempt killed for
memory from one that died of something else.

v1 and v2 differ only in file names and in how a controller is switched on;
the two ``_Tree`` classes hold those differences, nothing else does.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from services.domain.hostlist import number_ranges

__all__ = ["Limits", "Hierarchy", "JobCgroup", "probe", "CONTROLLERS", "CPU_PERIOD_US", "cpu_list", "cpu_shares",
           "cpu_weight", "parent_folder"]

CONTROLLERS = ("memory", "cpu", "cpuset", "pids", "devices")
PARENT = "horizon"
CPU_PERIOD_US = 100_000
ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True, slots=True)
class Limits:
    """What one attempt may use."""

    memory_bytes: int
    cpus_milli: int
    cpus: tuple[int, ...] = ()  # the machine's cores it is pinned to (empty: not pinned)
    mems: tuple[int, ...] = ()  # the NUMA nodes of those cores
    pids_max: int = 4096
    deny_devices: tuple[tuple[str, int, int], ...] = ()  # ("c", major, minor): devices it may not open
    cpu_shares: int = 0  # v1 cpu.shares (v2: the matching cpu.weight); 0: the kernel's default

    def to_json(self) -> dict[str, object]:
        return {"memory_bytes": self.memory_bytes, "cpus_milli": self.cpus_milli, "cpus": list(self.cpus),
                "mems": list(self.mems), "pids_max": self.pids_max,
                "deny_devices": [list(d) for d in self.deny_devices], "cpu_shares": self.cpu_shares}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> "Limits":
        return cls(
            memory_bytes=int(data["memory_bytes"]),  # type: ignore[arg-type]
            cpus_milli=int(data["cpus_milli"]),  # type: ignore[arg-type]
            cpus=tuple(data.get("cpus", ())),  # type: ignore[arg-type]
            mems=tuple(data.get("mems", ())),  # type: ignore[arg-type]
            pids_max=int(data.get("pids_max", 4096)),  # type: ignore[arg-type]
            deny_devices=tuple((str(k), int(a), int(b)) for k, a, b in data.get("deny_devices", ())),  # type: ignore
            cpu_shares=int(data.get("cpu_shares", 0)),  # type: ignore[arg-type]
        )

    @property
    def memory_v1(self) -> str:
        return str(self.memory_bytes) if self.memory_bytes else "-1"

    @property
    def quota_us(self) -> int:
        """CPU time per period (-1: no quota)."""
        return max(1000, self.cpus_milli * CPU_PERIOD_US // 1000) if self.cpus_milli else -1


def cpu_shares(request_milli: int) -> int:
    """The kubelet's shares for a CPU request: 1024 per CPU, at least 2 (the kernel's least)."""
    return max(2, request_milli * 1024 // 1000)


def cpu_weight(shares: int) -> int:
    """cgroup v2's cpu.weight (1-10000) for v1 shares (2-262144), as the kubelet converts them."""
    return 1 + ((min(max(shares, 2), 262144) - 2) * 9999) // 262142


def cpu_list(cpus: tuple[int, ...] | list[int]) -> str:
    """``(0, 1, 2, 5)`` -> ``"0-2,5"`` (the kernel's list format)."""
    return number_ranges(cpus)


def _write(path: Path, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def _read(path: Path) -> str:
    with open(path) as fh:
        return fh.read()


@dataclass(frozen=True)
class Hierarchy:
    """What the machine offers: ``version`` "v1", "v2" or "none", the root of each usable controller,
    and a one-line description for the node's registration."""

    version: str
    roots: dict[str, Path] = field(default_factory=dict)
    problem: str = ""
    parent: str = PARENT  # the top folder of Horizon's cgroups under each root

    @property
    def usable(self) -> bool:
        return self.version != "none"

    def describe(self) -> str:
        if not self.usable:
            return f"none: jobs are not confined ({self.problem})"
        return f"cgroup {self.version} ({' '.join(sorted(self.roots))})"

    def cgroup(self, node: str, job: str, attempt: int) -> "JobCgroup":
        return JobCgroup(self, f"{self.parent}/{node}/{job}.{attempt}")

    def to_json(self) -> dict[str, object]:
        return {"version": self.version, "roots": {k: str(v) for k, v in self.roots.items()}, "problem": self.problem,
                "parent": self.parent}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> "Hierarchy":
        roots = {k: Path(v) for k, v in dict(data.get("roots", {})).items()}  # type: ignore[arg-type]
        return cls(str(data["version"]), roots, str(data.get("problem", "")), str(data.get("parent", PARENT)))


def parent_folder() -> str:
    """``HORIZON_CGROUP_PARENT`` if set (one folder name), else ``horizon``."""
    name = os.environ.get("HORIZON_CGROUP_PARENT", "") or PARENT
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]*", name):
        raise ValueError(f"HORIZON_CGROUP_PARENT must be one folder name (letters, digits, . _ -), not {name!r}")
    return name


def probe(root: Path = ROOT) -> Hierarchy:
    """Find a writable cgroup hierarchy: v2 with the needed controllers, else v1, else none."""
    unified = root if (root / "cgroup.controllers").exists() else root / "unified"
    v2_problem = ""
    if (unified / "cgroup.controllers").exists():
        available = set(_read(unified / "cgroup.controllers").split())
        needed = {"memory", "cpu", "pids"}
        if needed <= available and os.access(unified, os.W_OK):
            roots = {name: unified for name in ("memory", "cpu", "cpuset", "pids") if name in available}
            return Hierarchy("v2", roots, parent=parent_folder())
        v2_problem = f"cgroup v2 at {unified} lacks {' '.join(sorted(needed - available)) or 'write access'}"
    roots = {}
    for name in CONTROLLERS:
        path = root / name
        if (path / "cgroup.procs").exists() and os.access(path, os.W_OK):
            roots[name] = path
    if "memory" in roots:
        return Hierarchy("v1", roots, parent=parent_folder())
    why = v2_problem or f"no writable cgroup v1 memory controller at {root / 'memory'}"
    if os.geteuid() != 0:
        why += "; the agent is not root"
    return Hierarchy("none", {}, why)


class JobCgroup:
    """One attempt's cgroup in every usable controller (see the module doc)."""

    def __init__(self, hierarchy: Hierarchy, relative: str) -> None:
        self.hierarchy = hierarchy
        self.relative = relative
        self.v2 = hierarchy.version == "v2"

    def paths(self) -> dict[str, Path]:
        """Controller -> directory (v2: one directory for all)."""
        return {name: root / self.relative for name, root in self.hierarchy.roots.items()}

    def _dirs(self) -> list[Path]:
        return sorted(set(self.paths().values()))

    # ------------------------------------------------------------------ creating

    def create(self, limits: Limits) -> None:
        """Make the directories and write the limits; raises OSError with the file that failed."""
        if not self.hierarchy.usable:
            return
        if self.v2:
            self._create_v2(limits)
        else:
            self._create_v1(limits)

    def _parents(self, root: Path) -> list[Path]:
        parts = Path(self.relative).parts
        return [root.joinpath(*parts[:i]) for i in range(1, len(parts) + 1)]

    def _create_v1(self, limits: Limits) -> None:
        for name, root in self.hierarchy.roots.items():
            for directory in self._parents(root):
                fresh = not directory.exists()
                directory.mkdir(exist_ok=True)
                if name == "cpuset" and (fresh or not _read(directory / "cpuset.cpus").strip()):
                    # A v1 cpuset starts empty: copy the parent's before anything may join.
                    for key in ("cpuset.cpus", "cpuset.mems"):
                        _write(directory / key, _read(directory.parent / key).strip() or "0")
        paths = self.paths()
        memory = paths["memory"]
        _set(memory / "memory.limit_in_bytes", limits.memory_v1)
        # No swap beyond the limit (memsw exists when the kernel accounts swap): memsw >= limit.
        with contextlib.suppress(FileNotFoundError):
            _set(memory / "memory.memsw.limit_in_bytes", limits.memory_v1)
        if "cpu" in paths:
            _set(paths["cpu"] / "cpu.cfs_period_us", str(CPU_PERIOD_US))
            _set(paths["cpu"] / "cpu.cfs_quota_us", str(limits.quota_us))
            if limits.cpu_shares:
                _set(paths["cpu"] / "cpu.shares", str(limits.cpu_shares))
        if "cpuset" in paths and limits.cpus:
            _set(paths["cpuset"] / "cpuset.cpus", cpu_list(limits.cpus))
            if limits.mems:
                _set(paths["cpuset"] / "cpuset.mems", cpu_list(limits.mems))
        if "pids" in paths:
            _set(paths["pids"] / "pids.max", str(limits.pids_max))
        if "devices" in paths:
            for kind, major, minor in limits.deny_devices:
                _set(paths["devices"] / "devices.deny", f"{kind} {major}:{minor} rwm")

    def _create_v2(self, limits: Limits) -> None:
        root = next(iter(self.hierarchy.roots.values()))
        wanted = " ".join(f"+{name}" for name in sorted(self.hierarchy.roots))
        for directory in [root, *self._parents(root)[:-1]]:
            directory.mkdir(exist_ok=True)
            _set(directory / "cgroup.subtree_control", wanted)
        directory = root / self.relative
        directory.mkdir(exist_ok=True)
        _set(directory / "memory.max", str(limits.memory_bytes) if limits.memory_bytes else "max")
        with contextlib.suppress(FileNotFoundError):
            _set(directory / "memory.swap.max", "0")
        quota = limits.quota_us
        _set(directory / "cpu.max", f"{quota if quota > 0 else 'max'} {CPU_PERIOD_US}")
        if limits.cpu_shares:
            _set(directory / "cpu.weight", str(cpu_weight(limits.cpu_shares)))
        if "cpuset" in self.hierarchy.roots and limits.cpus:
            _set(directory / "cpuset.cpus", cpu_list(limits.cpus))
            if limits.mems:
                _set(directory / "cpuset.mems", cpu_list(limits.mems))
        _set(directory / "pids.max", str(limits.pids_max))

    # ------------------------------------------------------------------ using

    def join(self, pid: int = 0) -> None:
        """Move ``pid`` (0: the caller) into the cgroup in every controller."""
        for directory in self._dirs():
            _write(directory / "cgroup.procs", str(pid or os.getpid()))

    def pids(self) -> list[int]:
        """The processes in the cgroup (the memory controller's view: every job process is there)."""
        found: set[int] = set()
        for directory in self._dirs():
            with contextlib.suppress(OSError):
                found.update(int(p) for p in _read(directory / "cgroup.procs").split())
        return sorted(found)

    def memory_used(self) -> int | None:
        """The cgroup's working set now, as the kubelet counts it for eviction: its usage less the
        inactive file cache the kernel can drop at once; None if unknown."""
        memory = self.paths().get("memory")
        if memory is None:
            return None
        try:
            usage = int(_read(memory / ("memory.current" if self.v2 else "memory.usage_in_bytes")).strip())
            stat = _read(memory / "memory.stat")
        except (OSError, ValueError):
            return None
        key = "inactive_file" if self.v2 else "total_inactive_file"
        for line in stat.splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return max(0, usage - int(value))
        return usage

    def oom_kills(self) -> int:
        """How many processes of the cgroup the OOM killer has killed."""
        memory = self.paths().get("memory")
        if memory is None:
            return 0
        name = "memory.events" if self.v2 else "memory.oom_control"
        try:
            text = _read(memory / name)
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        # Older v1 kernels have no counter: a cgroup that hit its limit and is under OOM counts as one.
        return 1 if "under_oom 1" in text else 0

    def signal_all(self, sig: int = signal.SIGKILL) -> int:
        """Send ``sig`` to every process in the cgroup; returns how many there were."""
        pids = self.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        return len(pids)

    def terminate(self, grace_s: float) -> None:
        """SIGTERM to every process in the cgroup, then wait up to ``grace_s`` for them to be gone
        (``remove`` SIGKILLs what is left)."""
        if grace_s <= 0 or not self.signal_all(signal.SIGTERM):
            return
        deadline = time.monotonic() + grace_s
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.05)

    def remove(self, timeout_s: float = 5.0) -> bool:
        """Kill what is left and remove the directories (the leaf only: the parents are shared)."""
        deadline = time.monotonic() + timeout_s
        while self.signal_all(signal.SIGKILL) and time.monotonic() < deadline:
            time.sleep(0.02)
        ok = True
        for directory in self._dirs():
            while True:
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        ok = False
                        break
                    time.sleep(0.02)
        return ok


def _set(path: Path, value: str) -> None:
    try:
        _write(path, value)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write {value!r} to {path}: {exc.strerror}") from None
