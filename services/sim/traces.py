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
``account``, ``user``, ``priority_class``.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from events.resources import ResourceError

__all__ = ["SimJob", "Trace", "read_trace", "read_swf", "read_job_list", "window"]


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


@dataclass
class Trace:
    jobs: list[SimJob]
    max_nodes: int | None = None
    max_procs: int | None = None
    source: str = ""
    header: dict[str, str] = field(default_factory=dict)


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
    if path.suffix.lower() == ".json":
        rows = json.loads(path.read_text())
        if not isinstance(rows, list):
            raise ValueError(f"{path}: a JSON job list is a list of objects")
    else:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    jobs = []
    for i, row in enumerate(rows):
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
        jobs.append(SimJob(
            str(opt("job_id", f"job-{i}")), submit, runtime, estimate,
            procs=int(opt("procs", 1)), gpus=int(opt("gpus", 0)),  # type: ignore[arg-type]
            gpu_type=opt("gpu_type", None),  # type: ignore[arg-type]
            nodes=int(nodes) if nodes is not None else None,  # type: ignore[arg-type]
            account=str(opt("account", "default")), user=str(opt("user", "")),
            priority_class=str(opt("priority_class", "normal")),
        ))
    return Trace(jobs, source=str(path))  # file order: windows count in it; arrivals are sorted later


def window(trace: Trace, start: int, length: int) -> list[SimJob]:
    """``jobs[start:start+length]`` in file order (0-based), as RLScheduler's windows."""
    if start < 0 or length <= 0:
        raise ValueError("--window START:LEN needs START >= 0 and LEN > 0")
    if start >= len(trace.jobs):
        raise ValueError(f"--window starts at {start}, but the trace has {len(trace.jobs)} jobs")
    return trace.jobs[start : start + length]
