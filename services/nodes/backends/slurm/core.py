"""The Slurm backend's pure core: Slurm's records in, Horizon's nodes and outcomes out, and the
``sbatch`` command line of a placement. Pure: no subprocess, no clock.

* ``parse_records``: the lines of ``scontrol show node -o`` / ``scontrol show job -o -d`` as dicts
  (``Key=value`` pairs; a value may hold spaces, as ``OS=Linux 6.1 #1 SMP`` or a drain ``Reason``).
* ``node_spec``: a Slurm node as a Horizon ``NodeSpec`` (``backend`` "slurm"): ``CPUEfctv`` (else
  ``CPUTot``) CPUs, ``RealMemory`` MiB, one ``GpuDevice`` per GPU of its ``Gres`` (``gpu:4`` or
  ``gpu:a100:4(S:0-1)``; the type is "gpu" when Slurm names none), its ``AvailableFeatures`` as labels
  (``slurm.feature/<f>``: "true", and ``slurm.partition``) and what Slurm's own jobs hold there
  (``foreign_use``) as the node's ``foreign`` use: used capacity, its totals unchanged.
* ``node_drained``: whether Slurm's ``State`` keeps new jobs off the node (``DRAIN``, ``DOWN``,
  ``FAIL``, ``MAINT``, ``NOT_RESPONDING``, ...) and why (Slurm's ``Reason``); ``node_unknown``: whether
  Slurm does not know the node's state yet (``UNKNOWN``, the first seconds after slurmctld
  restarts), which is no news: neither a drain nor a return.
* ``foreign_use``: per node, what running jobs not submitted by Horizon hold (CPUs, memory, GPUs by
  Slurm's own indices, ``IDX``); ``devices_of``: the GPUs a job really got on each node, as Horizon's
  device ids (Slurm's ``IDX:i`` is Horizon's ``gpu<i>``).
* ``sbatch_argv``: the ``sbatch`` of one attempt, pinned to the nodes placement chose
  (``--nodelist``, ``-N``), with the resources it allocated on each (``--ntasks-per-node``,
  ``--cpus-per-task``, ``--mem``, ``--gres gpu:k``), the time limit, the account Horizon charges
  (``--account``, ``slurm_account``) and its QOS where Slurm has one of that name (``--qos``), and
  Horizon's id in the job's
  name and comment (``horizon:<installation>:<attempt>:<job>``, ``comment_of``), which is how a
  restarted backend finds the attempt again; the installation's id keeps two Horizons on one Slurm
  cluster apart (each counts the other's jobs as Slurm's own).
* ``batch_script``: the script it submits: Horizon's variables for the job, its ``env``, its command.
* ``outcome``: a finished Slurm job as the agent's ``Outcome`` (exit code, signal, out of memory, lost).
* ``SACCT_FIELDS``, ``sacct_record``: a job Slurm's controller has purged (``MinJobAge``) as its
  accounting or completion record (``sacct [-c] -P -n -o JobID,State,ExitCode``) has it.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from events import catalogue as c
from services.nodes.backends.protocol import Outcome
from services.nodes.spec import NodeSpec

__all__ = ["BACKEND", "parse_records", "node_spec", "node_drained", "node_unknown", "foreign_use", "devices_of", "Use", "sbatch_argv",
           "batch_script", "comment_of", "attempt_of", "outcome", "ACTIVE", "ENDED", "parse_time", "expand_nodes",
           "time_limit_minutes", "COMMENT_PREFIX", "MIB", "slurm_account", "SACCT_FIELDS", "sacct_record"]

BACKEND = "slurm"
COMMENT_PREFIX = "horizon:"  # then <installation>:<attempt>:<job id>
MIB = 1 << 20

# Slurm's job states (squeue(1), JOB STATE CODES): still holding or waiting, and ended.
ACTIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "RESIZING", "REQUEUED",
                    "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD", "SIGNALING", "STAGE_OUT", "STOPPED"})
ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "DEADLINE",
                   "OUT_OF_MEMORY", "PREEMPTED", "REVOKED", "SPECIAL_EXIT"})
# Node state flags (sinfo(1), NODE STATE CODES) under which Slurm starts nothing new on a node.
_UNUSABLE = ("DRAIN", "DOWN", "FAIL", "MAINT", "NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN", "REBOOT_ISSUED",
             "INVALID_REG", "FUTURE", "INVAL")

_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:.]*)=")


def parse_records(text: str) -> list[dict[str, str]]:
    """One dict per non-empty line of ``scontrol show ... -o``. A key that repeats (the per-node
    lines of ``-d``: ``Nodes=... CPU_IDs=... Mem=... GRES=...``) keeps a list under ``<key>*``."""
    records = []
    for line in text.splitlines():
        line = line.strip()
        if not line or "=" not in line:
            continue
        matches = list(_KEY.finditer(line))
        record: dict[str, str] = {}
        for i, m in enumerate(matches):
            end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
            key, value = m.group(1), line[m.end():end].strip()
            if key in record:
                record[f"{key}*"] = record.get(f"{key}*", record[key]) + "\n" + value
            record[key] = value
        records.append(record)
    return records


def expand_nodes(text: str) -> list[str]:
    """Slurm's host list (``s[1-3,5],gpu7``) as names, in order."""
    names: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", text or ""):
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if m is None:
            if part and part != "(null)":
                names.append(part)
            continue
        head, ranges, tail = m.groups()
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            if not hi:
                names.append(f"{head}{lo}{tail}")
                continue
            for i in range(int(lo), int(hi) + 1):
                names.append(f"{head}{str(i).zfill(len(lo))}{tail}")
    return names


def _gpus(gres: str) -> list[tuple[str, int]]:
    """``gpu:2,gpu:a100:4(S:0-1),shard:8`` -> [("gpu", 2), ("a100", 4)]: each GPU kind and its count."""
    kinds = []
    for item in re.split(r",(?![^()]*\))", gres or ""):
        item = re.sub(r"\(.*\)$", "", item.strip())
        parts = item.split(":")
        if not parts or parts[0] != "gpu" or len(parts) < 2:
            continue
        count = parts[-1]
        if not count.isdigit():
            continue
        kinds.append((parts[1] if len(parts) > 2 else "gpu", int(count)))
    return kinds


def _gpu_indices(gres: str) -> list[int] | None:
    """Slurm's indices of the GPUs in a job's per-node ``GRES`` (``gpu:3(IDX:0-2)``,
    ``gpu:a100:1(IDX:5),gpu:v100:1(IDX:6)``); None when it names none (no ``IDX``)."""
    found: list[int] | None = None
    for m in re.finditer(r"gpu[^,(]*\(IDX:([^)]*)\)", gres or ""):
        found = found or []
        for part in m.group(1).split(","):
            lo, _, hi = part.partition("-")
            if lo.isdigit():
                found.extend(range(int(lo), int(hi) + 1) if hi.isdigit() else [int(lo)])
    return found


def _groups(job: Mapping[str, str]) -> Iterable[tuple[str, str, str, str]]:
    """A job's per-node groups of ``scontrol show job -d``: (nodes, CPU_IDs, Mem, GRES)."""
    return zip((job.get("Nodes*") or job.get("Nodes", "")).split("\n"),
               (job.get("CPU_IDs*") or job.get("CPU_IDs", "")).split("\n"),
               (job.get("Mem*") or job.get("Mem", "")).split("\n"),
               (job.get("GRES*") or job.get("GRES", "")).split("\n"))


def devices_of(job: Mapping[str, str]) -> dict[str, list[str]]:
    """Node -> the GPUs the job really holds there (Slurm chose them: ``IDX:i`` is ``gpu<i>``), for
    the nodes whose ``GRES`` names them."""
    out: dict[str, list[str]] = {}
    for nodes, _, _, gres in _groups(job):
        indices = _gpu_indices(gres)
        if indices:
            for node in expand_nodes(nodes):
                out[node] = [f"gpu{i}" for i in sorted(indices)]
    return out


@dataclass(frozen=True)
class Use:
    """What jobs Horizon did not submit hold on one node, and which: ``devices`` are the GPUs Slurm
    names (``IDX``); ``gpus`` counts them, and also those of a job whose ``GRES`` names no indices."""

    cpus: int = 0
    memory_mib: int = 0
    gpus: int = 0
    jobs: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()


def node_spec(record: Mapping[str, str], partition: str = "", foreign: Use | None = None,
              held_devices: Iterable[str] = ()) -> NodeSpec:
    """The node Horizon registers for a line of ``scontrol show node -o``: its totals, always. With
    ``foreign``, what those jobs hold is the node's ``foreign`` use (``c.ForeignUse``), which placement
    counts as used: their CPUs and memory, and the GPUs Slurm gave them (``Use.devices``); GPUs of
    theirs Slurm names no index of are the highest-numbered ones no Horizon job holds (``held_devices``)."""
    name = record["NodeName"]
    cpus = _int(record.get("CPUEfctv")) or _int(record.get("CPUTot"))
    memory_mib = _int(record.get("RealMemory"))
    devices: list[c.GpuDevice] = []
    for kind, count in _gpus(record.get("Gres", "")):
        for _ in range(count):
            devices.append(c.GpuDevice(id=f"gpu{len(devices)}", type=kind))
    labels = {"slurm.partition": partition} if partition else {}
    for feature in (record.get("AvailableFeatures") or "").split(","):
        if feature and feature != "(null)":
            labels[f"slurm.feature/{feature}"] = "true"
    use = None
    if foreign is not None and foreign.jobs:
        ids = {d.id for d in devices}
        busy = [d for d in foreign.devices if d in ids]
        held = set(held_devices) | set(busy)
        busy += [d.id for d in reversed(devices) if d.id not in held][:max(0, foreign.gpus - len(busy))]
        use = c.ForeignUse(cpus_milli=min(cpus, foreign.cpus) * 1000, memory_bytes=min(memory_mib, foreign.memory_mib) * MIB,
                           devices=sorted(busy, key=lambda d: int(d[3:])), jobs=list(foreign.jobs))
    return NodeSpec(name, cpus * 1000, memory_mib * MIB, tuple(devices), labels, backend=BACKEND,
                    isolation="slurm (the node's slurmd confines jobs as its slurm.conf says)", foreign=use)


def _flags(state: str) -> set[str]:
    flags = set(state.rstrip("*~#!%$@^-").replace("*", "").split("+"))
    if state.endswith("*"):
        flags.add("NOT_RESPONDING")
    return flags


def node_unknown(record: Mapping[str, str]) -> bool:
    """Whether Slurm does not know the node's state (``UNKNOWN``, maybe not responding yet: slurmctld
    restarted and its slurmd has not registered again), and no drain or down of its own says more."""
    flags = _flags(record.get("State", ""))
    return "UNKNOWN" in flags and not any(f in _UNUSABLE or f.startswith("DRAIN") for f in flags - {"NOT_RESPONDING"})


def node_drained(record: Mapping[str, str]) -> str | None:
    """Why Slurm starts nothing new on this node (its state and reason), or None if it does (or does
    not know yet: ``node_unknown``)."""
    state = record.get("State", "")
    if node_unknown(record):
        return None
    bad = sorted(f for f in _flags(state) if f in _UNUSABLE or f.startswith("DRAIN"))
    if not bad:
        return None
    reason = record.get("Reason", "")
    return f"Slurm: {state}" + (f" ({reason})" if reason and reason != "(null)" else "")


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


def _memory_mib(text: str) -> int:
    """``100``, ``100M``, ``4G``, ``1T`` as MiB."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", text.strip())
    if m is None:
        return 0
    scale = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}[m.group(2)]
    return int(float(m.group(1)) * scale)


def _cpu_count(ids: str) -> int:
    total = 0
    for part in ids.split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit():
            total += int(hi) - int(lo) + 1 if hi.isdigit() else 1
    return total


def foreign_use(jobs: Iterable[Mapping[str, str]], install: str) -> dict[str, Use]:
    """Per node, what the running jobs this Horizon installation did not submit hold (from ``scontrol show job -o -d``:
    each node group's ``Nodes= CPU_IDs= Mem= GRES=``; GPUs from the job's ``TresPerNode`` gres/gpu
    where the group names none)."""
    out: dict[str, Use] = {}
    for job in jobs:
        state = job.get("JobState", "")
        if state not in ("RUNNING", "COMPLETING", "SUSPENDED") or attempt_of(job, install) is not None:
            continue
        per_node_gpus = 0
        m = re.search(r"gres[:/]gpu(?::[^:,]+)?:(\d+)", job.get("TresPerNode", ""))
        if m is not None:
            per_node_gpus = int(m.group(1))
        for nodes, cpu_ids, mem, gres in _groups(job):
            indices = _gpu_indices(gres) or []
            gpus = len(indices) or sum(n for _, n in _gpus(gres)) or per_node_gpus
            for node in expand_nodes(nodes):
                was = out.get(node, Use())
                out[node] = Use(was.cpus + _cpu_count(cpu_ids), was.memory_mib + _memory_mib(mem or "0"),
                                was.gpus + gpus, (*was.jobs, job.get("JobId", "?")),
                                (*was.devices, *(f"gpu{i}" for i in indices)))
    return out


def comment_of(install: str, job_id: str, attempt: int) -> str:
    """The ``--comment`` that names the attempt in Slurm: ``horizon:<installation>:<attempt>:<job id>``."""
    return f"{COMMENT_PREFIX}{install}:{attempt}:{job_id}"


def attempt_of(job: Mapping[str, str], install: str) -> tuple[str, int] | None:
    """(job id, attempt) of a Slurm job this installation submitted (its comment), else None."""
    comment = job.get("Comment", "")
    mine = f"{COMMENT_PREFIX}{install}:"
    if not install or not comment.startswith(mine):
        return None
    attempt, _, job_id = comment[len(mine):].partition(":")
    return (job_id, int(attempt)) if attempt.isdigit() and job_id else None


def time_limit_minutes(limit_s: float) -> int:
    """Slurm's ``--time`` in whole minutes: the attempt's limit rounded up, plus one, so that the
    backend's own limit (counted from the start, as the agent's) ends the job first and reports it
    as a time limit; Slurm's is the backstop should the backend be down."""
    return int(-(-limit_s // 60)) + 1


def slurm_account(spec: c.JobSpec) -> str:
    """The Slurm account of a job: the Horizon account it is charged to (the Slurm quota provider's
    accounts are Slurm's, by name), but for the account a job gets when it names none
    (``default``), for which Slurm's own default for the user stands; "" then."""
    return "" if spec.account in ("", c.DEFAULT_ACCOUNT) else spec.account


def sbatch_argv(install: str, job_id: str, attempt: int, spec: c.JobSpec, allocations: Sequence[c.NodeAllocation],
                devices: Mapping[str, Mapping[str, c.GpuDevice]], script: str, stdout: str, stderr: str,
                cwd: str, limit_s: float, partition: str = "", qos: Iterable[str] = ()) -> list[str]:
    """``sbatch`` for one attempt, pinned to the nodes of ``allocations`` (the first one's share:
    a gang holds the same on each of its nodes). Memory is per node (``--mem``, MiB rounded up), CPUs
    per task (whole CPUs rounded up: Slurm counts no fractions), GPUs per node (``--gres gpu[:type]:k``).
    ``--account``: ``slurm_account``; ``--qos``: the job's QOS if ``qos`` (Slurm's QOS names) holds it:
    a QOS Slurm does not know would make sbatch refuse the job, and Horizon's QOS need not be Slurm's."""
    first = allocations[0]
    tasks = max(1, first.tasks or spec.tasks_per_node)
    cpus_per_task = max(1, -(-first.cpus_milli // (1000 * tasks)))
    memory_mib = max(1, -(-(first.memory_bytes or spec.memory_bytes * tasks) // MIB))
    argv = ["sbatch", "--parsable", f"--job-name=horizon-{job_id}", f"--comment={comment_of(install, job_id, attempt)}",
            f"--nodes={len(allocations)}", f"--nodelist={','.join(a.node for a in allocations)}",
            f"--ntasks-per-node={tasks}", f"--cpus-per-task={cpus_per_task}", f"--mem={memory_mib}",
            f"--time={time_limit_minutes(limit_s)}", f"--chdir={cwd}",
            f"--output={_escape(stdout)}", f"--error={_escape(stderr)}", "--no-requeue",
            f"--open-mode={'append' if spec.open_mode == 'append' else 'truncate'}"]
    if partition:
        argv.append(f"--partition={partition}")
    if 0 < spec.ntasks < len(allocations) * tasks:  # -N 3 -n 7: Slurm's SLURM_NTASKS and layout, its slots a maximum
        argv.append(f"--ntasks={spec.ntasks}")
    if slurm_account(spec):
        argv.append(f"--account={slurm_account(spec)}")
    if spec.qos and spec.qos in set(qos):
        argv.append(f"--qos={spec.qos}")
    if first.device_ids:
        known = devices.get(first.node, {})
        kinds = {known[d].type for d in first.device_ids if d in known}
        kind = kinds.pop() if len(kinds) == 1 else "gpu"
        argv.append(f"--gres=gpu:{kind + ':' if kind != 'gpu' else ''}{len(first.device_ids)}")
    argv.append(script)
    return argv


def _escape(path: str) -> str:
    """A path for ``--output``: Slurm would expand its ``%`` and ``\\`` (Horizon's patterns are expanded already)."""
    return path.replace("\\", "\\\\").replace("%", "%%")


def batch_script(env: Mapping[str, str], command: Sequence[str]) -> str:
    """The job's batch script: its variables (``export``), then its command (``exec``), as ``sh``."""
    lines = ["#!/bin/sh", "# written by Horizon's Slurm backend (docs/backends.md)"]
    for key in sorted(env):
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            lines.append(f"export {key}={shlex.quote(env[key])}")
    # Slurm runs a multi-node job's script on the first node of its own (sorted) list, which need not
    # be the first of Horizon's allocation: the node the script runs on is the one Slurm names.
    lines.append('export HORIZON_NODE="${SLURMD_NODENAME:-$HORIZON_NODE}"')
    # Slurm, not Horizon, chose the GPUs (the backend reports which: devices_of): name those it names
    lines.append('[ -n "${SLURM_JOB_GPUS:-}" ] && export HORIZON_GPU_IDS="gpu$(echo "$SLURM_JOB_GPUS" | sed \'s/,/,gpu/g\')"')
    lines.append("exec " + shlex.join(command))
    return "\n".join(lines) + "\n"


def parse_time(text: str | None) -> float | None:
    """Slurm's ``2026-11-26T20:35:40`` (the controller's local time) as a Unix time; None if unknown."""
    if not text or text in ("Unknown", "None", "N/A"):
        return None
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


SACCT_FIELDS = "JobID,State,ExitCode"  # sacct's -o: what outcome() reads


def sacct_record(text: str, slurm_id: str) -> dict[str, str] | None:
    """The ended job ``slurm_id`` in ``sacct -P -n -o JobID,State,ExitCode`` (``1|COMPLETED|0:0``;
    a state may read ``CANCELLED by 0``) as ``outcome`` reads a record; None if it is not there or
    has not ended."""
    for line in text.splitlines():
        job, _, rest = line.strip().partition("|")
        state, _, code = rest.partition("|")
        state = state.split(" ")[0]
        if job == slurm_id and state in ENDED:
            return {"JobId": job, "JobState": state, "ExitCode": code or "0:0"}
    return None


def outcome(job: Mapping[str, str] | None, stderr_tail: str = "") -> Outcome:
    """How a finished Slurm job ended, as the agent reports it; ``None`` (Slurm no longer knows the
    job: it was purged after ``MinJobAge`` while no backend watched, and no accounting or completion
    record has it either) is lost."""
    if job is None:
        return Outcome(exit_code=None, lost=True)
    state = job.get("JobState", "")
    code, _, sig = job.get("ExitCode", "0:0").partition(":")
    exit_code, signal_no = _int(code), _int(sig)
    if state == "OUT_OF_MEMORY":
        return Outcome(exit_code=exit_code or None, stderr_tail=stderr_tail, out_of_memory=True)
    if state in ("NODE_FAIL", "BOOT_FAIL"):
        return Outcome(exit_code=None, stderr_tail=stderr_tail, lost=True)
    if signal_no:
        return Outcome(exit_code=-signal_no, stderr_tail=stderr_tail, signalled=True)
    if state == "COMPLETED":
        return Outcome(exit_code=0, stderr_tail=stderr_tail)
    if state in ("CANCELLED", "TIMEOUT", "PREEMPTED", "DEADLINE") and not exit_code:
        return Outcome(exit_code=-15, stderr_tail=stderr_tail, signalled=True)  # Slurm's SIGTERM, then SIGKILL
    return Outcome(exit_code=exit_code or 1, stderr_tail=stderr_tail)

