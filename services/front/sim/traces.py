"""Workload traces: the Standard Workload Format and simple job lists, turned into jobs and a cluster.

SWF (Parallel Workloads Archive): 18 whitespace-separated fields per job,
``;`` header lines such as ``; MaxNodes: 256`` and ``; MaxProcs: 256``. The
fields used: 1 job id, 2 submit time, 4 run time, 5 allocated processors,
8 requested processors, 9 requested time, 12 user. Following RLScheduler's
conventions (``../shared/traces/README.md``): jobs with run time 0 are
dropped, a negative run time becomes 10 s, processors = max(allocated,
requested), and the estimate is the requested time, or the run time when
the request is -1.

Job lists: CSV with a header, or a JSON list of objects, with the fields
``submit_s``, ``runtime_s`` and optionally ``job_id``, ``estimate_s`` (default
the run time), ``procs`` (cores), ``gpus``, ``gpu_type``, ``nodes``,
``account``, ``user``, ``priority_class``, ``nice``, ``qos``, ``array``
(Slurm's ``--array``: ``"0-99%10"``), ``dependencies`` (``"after-ok:a,after-any:b"``,
or in JSON a list of such strings, of ``[kind, job_id]`` pairs or of
``{"kind": ..., "job_id": ...}`` objects), ``exit_code`` (non-zero: every
attempt fails with it), ``fail_attempts`` (the first k attempts fail, later
ones succeed), ``restart_policy``, ``max_retries`` and ``scheduling_timeout_s``.
Values are passed to submission as a client would write them, so a bad one is
rejected there, with its reason, like any submission.

A JSON job list may also be an object ``{"config": [...], "jobs": [...]}``:
``config`` holds operator events as JSON objects with their ``"type"``
(``{"type": "AccountConfigured", "account": "a", "shares": 2}``), which the
simulator publishes on their admin subject before the first arrival.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from events.base import Event
from events.codec import DecodeError, decode
from events.resources import ResourceError
from events.subjects import ADMIN_VERBS

__all__ = ["SimJob", "TaskRun", "Trace", "read_trace", "read_swf", "read_job_list", "read_config", "parse_dependencies",
           "admin_verb", "window"]


@dataclass(frozen=True, slots=True)
class SimJob:
    job_id: str
    submit_s: float
    runtime_s: float
    estimate_s: float
    procs: int = 1  # processors (cores) in total
    gpus: int = 0  # GPUs in total
    gpu_type: str | None = None
    nodes: int | None = None  # fixed node count, if the trace gives one
    account: str = "default"
    user: str = ""
    priority_class: str = "normal"
    nice: int = 0
    qos: str = ""
    dependencies: tuple[tuple[str, str], ...] = ()  # (kind, job id)
    array: str | None = None  # Slurm's --array spec: tasks <job_id>_<index>
    exit_code: int = 0  # non-zero: every attempt fails with this code
    fail_attempts: int = 0  # the first k attempts fail (exit code 1 unless exit_code says otherwise)
    restart_policy: str = "never"
    max_retries: int = 0
    scheduling_timeout_s: float | None = None
    min_nodes: int | None = None  # an elastic gang's least nodes (``nodes`` its most): it grows and shrinks
    # A recorded submission to replay as it was (``horizon whatif``, services/front/sim/whatif/): the driver
    # submits this event (its tenant, resources, partitions, ...) with ``submit_s`` and ``runtime_s``
    # instead of building one from the fields above, on ``subject`` (its recorded input subject).
    submitted: Any = None
    subject: str = ""
    # (start, end, tolerance) of a recorded first attempt: started within ``tolerance`` s of ``start``, it
    # ends at ``end``, as it did (whatif's replays keep the world's own times where the schedule does)
    recorded_run: tuple[float, float, float] | None = None
    # (start, stop, tolerance) of a recorded first attempt its user cancelled while it ran: started within
    # ``tolerance`` s of ``start``, a cancel stops it at ``stop`` (when the agent reported it stopped), not
    # at once; the moments a real stop takes are the moments its nodes stay taken
    recorded_stop: tuple[float, float, float] | None = None
    # An array's tasks as recorded (``horizon whatif``): task id -> its own run; a task not named runs as
    # the job does (``runtime_s``, ``exit_code``, ``recorded_run``)
    tasks: dict[str, TaskRun] = field(default_factory=dict)

    def outcome(self, attempt: int) -> int:
        """The exit code attempt ``attempt`` (1, 2, ...) ends with."""
        if attempt <= self.fail_attempts:
            return self.exit_code or 1
        return self.exit_code

    def run_of(self, job_id: str, attempt: int) -> TaskRun:
        """How attempt ``attempt`` of the job, or of its array task ``job_id``, runs."""
        task = self.tasks.get(job_id)
        if task is not None:
            return task
        return TaskRun(self.runtime_s, self.outcome(attempt), self.recorded_run, self.recorded_stop)


@dataclass(frozen=True, slots=True)
class TaskRun:
    """One run as the driver plays it: for how long, the exit code it ends with, and the recorded first
    attempt (start, end or stop, tolerance) it keeps to when it starts within the tolerance of that start
    (``SimJob.recorded_run``, ``SimJob.recorded_stop``)."""

    runtime_s: float
    exit_code: int = 0
    recorded_run: tuple[float, float, float] | None = None
    recorded_stop: tuple[float, float, float] | None = None


@dataclass
class Trace:
    jobs: list[SimJob]
    max_nodes: int | None = None
    max_procs: int | None = None
    source: str = ""
    header: dict[str, str] = field(default_factory=dict)
    config: list[Event] = field(default_factory=list)  # operator events published before the first arrival


def read_trace(path: str | Path) -> Trace:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"trace {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".swf":
        return read_swf(path)
    if suffix in (".csv", ".json"):
        return read_job_list(path)
    raise ValueError(f"trace {path}: unknown format {suffix!r}; use .swf, .csv or .json")


def read_swf(path: Path) -> Trace:
    header: dict[str, str] = {}
    jobs: list[SimJob] = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, 1):
            text = line.strip()
            if not text:
                continue
            if text.startswith(";"):
                key, sep, value = text[1:].partition(":")
                if sep:
                    header[key.strip()] = value.strip()
                continue
            fields = text.split()
            if len(fields) < 18:
                raise ValueError(f"{path}:{number}: an SWF line has 18 fields, this one {len(fields)}")
            try:
                job_id, submit, run, alloc = int(fields[0]), float(fields[1]), float(fields[3]), int(fields[4])
                req_procs, req_time, user = int(fields[7]), float(fields[8]), fields[11]
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: {exc}") from None
            if run == 0:
                continue
            if run < 0:
                run = 10.0
            procs = max(alloc, req_procs, 1)
            estimate = req_time if req_time > 0 else run
            jobs.append(SimJob(f"swf-{job_id}", submit, run, estimate, procs=procs,
                               account=f"u{user}" if user not in ("-1", "") else "default",
                               user=f"u{user}" if user not in ("-1", "") else ""))
    def number(key: str) -> int | None:
        value = header.get(key, "").split()
        return int(value[0]) if value and value[0].lstrip("-").isdigit() and int(value[0]) > 0 else None

    return Trace(jobs, max_nodes=number("MaxNodes"), max_procs=number("MaxProcs"), source=str(path), header=header)


def read_job_list(path: Path) -> Trace:
    config: list[Event] = []
    if path.suffix.lower() == ".json":
        rows = json.loads(path.read_text())
        if isinstance(rows, dict):
            unknown = sorted(set(rows) - {"config", "jobs"})
            if unknown:
                raise ValueError(f"{path}: unknown key(s) {', '.join(unknown)}; a job list object has config and jobs")
            config = read_config(rows.get("config", []), str(path))
            rows = rows.get("jobs", [])
        if not isinstance(rows, list):
            raise ValueError(f"{path}: a JSON job list is a list of objects, or {{\"config\": [...], \"jobs\": [...]}}")
    else:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    jobs = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"{path}: job {i} is not an object")
        try:
            submit = float(row["submit_s"])
            runtime = float(row["runtime_s"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: job {i}: submit_s and runtime_s are required numbers ({exc})") from None
        def opt(key: str, default: object) -> object:
            value = row.get(key)
            return default if value in (None, "") else value
        estimate = float(opt("estimate_s", runtime))  # type: ignore[arg-type]
        if runtime < 0 or estimate <= 0 or not math.isfinite(submit):
            raise ResourceError(f"job {i}", row, "has a negative run time or a non-positive estimate", "seconds >= 0")
        nodes = opt("nodes", None)
        timeout = opt("scheduling_timeout_s", None)
        array = opt("array", None)
        try:
            jobs.append(SimJob(
                str(opt("job_id", f"job-{i}")), submit, runtime, estimate,
                procs=int(opt("procs", 1)), gpus=int(opt("gpus", 0)),  # type: ignore[arg-type]
                gpu_type=opt("gpu_type", None),  # type: ignore[arg-type]
                nodes=int(nodes) if nodes is not None else None,  # type: ignore[arg-type]
                account=str(opt("account", "default")), user=str(opt("user", "")),
                priority_class=str(opt("priority_class", "normal")),
                nice=int(opt("nice", 0)), qos=str(opt("qos", "")),  # type: ignore[arg-type]
                dependencies=parse_dependencies(opt("dependencies", ())),
                array=str(array) if array is not None else None,
                exit_code=int(opt("exit_code", 0)), fail_attempts=int(opt("fail_attempts", 0)),  # type: ignore[arg-type]
                restart_policy=str(opt("restart_policy", "never")),
                max_retries=int(opt("max_retries", 0)),  # type: ignore[arg-type]
                scheduling_timeout_s=float(timeout) if timeout is not None else None,  # type: ignore[arg-type]
            ))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}: job {i}: {exc}") from None
    return Trace(jobs, source=str(path), config=config)  # file order: windows count in it; arrivals are sorted later


def parse_dependencies(value: object) -> tuple[tuple[str, str], ...]:
    """``"after-ok:a,after-any:b"``, or a list of such strings, ``[kind, id]`` pairs or
    ``{"kind", "job_id"}`` objects -> ((kind, job id), ...). The kinds are submission's to check."""
    if isinstance(value, str):
        value = [part for part in value.split(",") if part.strip()]
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"dependencies: {value!r} is not a list or \"kind:job_id,...\"")
    out = []
    for item in value:
        if isinstance(item, str):
            kind, sep, job_id = item.strip().partition(":")
            if not sep:
                raise ValueError(f"dependencies: {item!r} is not kind:job_id (e.g. after-ok:prep)")
        elif isinstance(item, dict):
            kind, job_id = item.get("kind", "after-ok"), item.get("job_id", "")
        elif isinstance(item, (list, tuple)) and len(item) == 2:
            kind, job_id = item
        else:
            raise ValueError(f"dependencies: {item!r} is not kind:job_id, [kind, job_id] or an object")
        out.append((str(kind), str(job_id)))
    return tuple(out)


_CONFIG_TYPES = {cls.__struct_config__.tag: verb for verb, cls in ADMIN_VERBS.items()}  # type: ignore[attr-defined]


def read_config(entries: object, where: str = "config") -> list[Event]:
    """Operator events from JSON objects with a ``"type"`` (checked and decoded as the services would)."""
    if not isinstance(entries, list):
        raise ValueError(f"{where}: config is a list of operator events")
    out = []
    for i, entry in enumerate(entries):
        kind = entry.get("type") if isinstance(entry, dict) else None
        if kind not in _CONFIG_TYPES:
            raise ValueError(f"{where}: config[{i}] has type {kind!r}; operator events: {', '.join(sorted(_CONFIG_TYPES))}")
        try:
            out.append(decode(json.dumps(entry)))
        except DecodeError as exc:
            raise ValueError(f"{where}: config[{i}]: {exc}") from None
    return out


def admin_verb(event: Event) -> str:
    """The admin verb an operator event is published under (``horizon.in._admin.<verb>``)."""
    return _CONFIG_TYPES[event.event_type]


def window(trace: Trace, start: int, length: int) -> list[SimJob]:
    """``jobs[start:start+length]`` in file order (0-based), as RLScheduler's windows."""
    if start < 0 or length <= 0:
        raise ValueError("--window START:LEN needs START >= 0 and LEN > 0")
    if start >= len(trace.jobs):
        raise ValueError(f"--window starts at {start}, but the trace has {len(trace.jobs)} jobs")
    return trace.jobs[start : start + length]
