"""The chaos run's verdict, from the whole log and the driver's notes (``services/front/bench/chaos.py``).

* ``duplicates``: decisions and reports that landed twice, by id and by meaning;
* ``accounting``: every submitted job has one verdict and a terminal state;
* ``horizon_check``: ``horizon check --nats URL --json`` as an operator runs it;
* ``recovery_summary`` and ``render``: the figures per part, and the report as text.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections import Counter
from statistics import median
from typing import Any

from events import catalogue as c
from events.codec import DecodeError, decode
from services.domain.protocol import Record
from services.domain.jobs import TERMINAL, JobTable

__all__ = ["ENDINGS", "duplicates", "accounting", "horizon_check", "recovery_summary", "render"]

HORIZON = [sys.executable, "-m", "services.front.cli.main"]
ENDINGS = (c.JobSucceeded, c.JobFailed, c.JobCancelled, c.JobPreempted, c.JobUnschedulable,
           c.JobDependencyNeverSatisfied)


def duplicates(records: list[Record]) -> dict[str, Any]:
    """Decisions and reports that landed twice, counted from the whole log.

    * ``same_id``: a record on ``horizon.evt.`` whose event id (its ``Nats-Msg-Id``, which names what was
      decided: ``placement/JobScheduled/<job>/<attempt>``, ...) an earlier record already has, over the
      whole log, not only JetStream's duplicate window. Not counted: ``NodeRegistered``, which an agent
      re-publishes at every start by design (same body, same id), and the clock's ``ClockTicked``.
    * ``attempt_scheduled_twice``: a second ``JobScheduled`` for one (job, attempt), whatever its id.
    * ``verdict_twice``: a second ``JobAccepted``/``JobRejected`` for one job.
    * ``started_twice``, ``ended_twice``, ``requeued_twice``: a second ``JobStarted``, a second ending of
      the same kind (``JobSucceeded``, ``JobFailed``, ...), a second ``JobRequeued``, for one (job,
      attempt), whoever published it (an ending of another kind is ``horizon check``'s "ended twice").
    * ``cycle_twice``: a second ``SchedulingCycleCompleted`` or ``PlacementCycleCompleted`` for one cycle.
    """
    keys: set[tuple[Any, ...]] = set()
    counts: Counter[str] = Counter()
    examples: list[str] = []

    def once(kind: str, key: tuple[Any, ...], record: Record) -> None:
        if key in keys:
            counts[kind] += 1
            if len(examples) < 20:
                examples.append(f"seq {record.seq}: {kind} {key[1:]}")
        keys.add(key)

    for record in records:
        if not record.subject.startswith("horizon.evt."):
            continue
        try:
            event: Any = decode(record.data)
        except DecodeError:
            continue
        if not isinstance(event, (c.NodeRegistered, c.ClockTicked)):
            once("same_id", ("id", event.id), record)
        if isinstance(event, c.JobScheduled):
            once("attempt_scheduled_twice", ("scheduled", event.job_id, event.attempt), record)
        elif isinstance(event, (c.JobAccepted, c.JobRejected)):
            once("verdict_twice", ("verdict", event.job_id), record)
        elif isinstance(event, c.JobStarted):
            once("started_twice", ("started", event.job_id, event.attempt), record)
        elif isinstance(event, ENDINGS):
            once("ended_twice", (type(event).__name__, event.job_id, getattr(event, "attempt", 0)), record)
        elif isinstance(event, c.JobRequeued):
            once("requeued_twice", ("requeued", event.job_id, event.attempt), record)
        elif isinstance(event, (c.SchedulingCycleCompleted, c.PlacementCycleCompleted)):
            once("cycle_twice", (type(event).__name__, event.cycle), record)
    kinds = ("same_id", "attempt_scheduled_twice", "verdict_twice", "started_twice", "ended_twice",
             "requeued_twice", "cycle_twice")
    return {"total": sum(counts.values()), **{k: counts[k] for k in kinds}, "examples": examples}


def accounting(records: list[Record], submitted: list[str]) -> dict[str, Any]:
    """Every submitted job: one verdict, and a terminal state at the end of the log."""
    table = JobTable()
    for record in records:
        with contextlib.suppress(DecodeError):
            table.apply(decode(record.data), record.seq, record.time)
    states: Counter[str] = Counter()
    missing, live = [], []
    for job_id in submitted:
        job = table.get(job_id)
        if job is None:
            missing.append(job_id)
            continue
        states[job.state.value] += 1
        if job.state not in TERMINAL:
            live.append(job_id)
    return {"submitted": len(submitted), "states": dict(sorted(states.items())), "missing": len(missing),
            "still_live": len(live), "examples": (missing + live)[:10],
            "ok": not missing and not live}


def horizon_check(url: str, timeout_s: float) -> dict[str, Any]:
    """``horizon check --nats URL --json``, as an operator runs it."""
    t0 = time.monotonic()
    proc = subprocess.run([*HORIZON, "check", "--nats", url, "--json"], capture_output=True, text=True,
                          timeout=timeout_s)
    out: dict[str, Any] = {"exit_code": proc.returncode, "seconds": round(time.monotonic() - t0, 1)}
    try:
        body = json.loads(proc.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        out["error"] = (proc.stderr or proc.stdout).strip()[-500:]
        return out
    out.update({k: body[k] for k in ("records", "jobs", "live", "ended", "scheduled") if k in body})
    out["problems"] = len(body.get("problems", []))
    out["problem_examples"] = body.get("problems", [])[:10]
    out["audit"] = body.get("audit")
    return out


def recovery_summary(faults: list[dict[str, Any]]) -> dict[str, Any]:
    """Per part: kills, and the median and worst recovery (kill to ready; kill to its next record)."""
    out: dict[str, Any] = {}
    for name in sorted({f["part"] for f in faults if f["fault"] == "kill"}):
        mine = [f for f in faults if f.get("part") == name]
        ready = sorted(f["recover_s"] for f in mine if f.get("recover_s") is not None)
        nxt = sorted(f["next_record_s"] for f in mine if f.get("next_record_s") is not None)
        out[name] = {"kills": len(mine),
                     "ready_median_s": round(median(ready), 2) if ready else None, "ready_max_s": max(ready, default=None),
                     "next_record_median_s": round(median(nxt), 2) if nxt else None,
                     "next_record_max_s": max(nxt, default=None)}
    return out


def render(report: dict[str, Any]) -> str:
    cfg, acc, dup, ck = report["config"], report["jobs"], report["duplicates"], report["check"]
    lines = [
        f"{acc['submitted']:,} jobs ({report['cancels_sent']} cancelled by request), {cfg['agents']} agents x "
        f"{cfg['nodes']} nodes x {cfg['gpus_per_node']} GPUs, seed {cfg['seed']}: start-up {report['startup_s']} s, "
        f"workload {report['work_s']} s, total {report['total_s']} s, {report['records']:,} records",
        f"end states: {acc['states']}; missing {acc['missing']}, still live {acc['still_live']}",
        f"kills: {report['kills']}; nats-server restarts: {report['server_restarts']}; "
        f"parts that died on their own: {len(report['unexpected_exits'])}",
        "recovery per part (kill -> ready; kill -> its next record in the log), median / max seconds:",
    ]
    for name, r in report["recovery"].items():
        lines.append(f"  {name:<12} {r['kills']} kills  ready {r['ready_median_s']} / {r['ready_max_s']}  "
                     f"next record {r['next_record_median_s']} / {r['next_record_max_s']}")
    for f in report["faults"]:
        if f["fault"] == "server":
            lines.append(f"  nats-server {f['signal']} at {f['at_s']} s ({f['live_jobs']} live jobs), down {f['down_s']} s, "
                         f"serving after {f['server_ready_s']} s; each part's next record after (s): {f['next_record_s']}")
    for u in report["unexpected_exits"]:
        lines.append(f"  DIED: {u['part']} exit {u['exit_code']} at {u['at_s']} s: {u['log_tail']}")
    lines.append(f"duplicate decisions landed: {dup['total']} "
                 f"({', '.join(f'{k} {v}' for k, v in dup.items() if k not in ('total', 'examples'))})")
    lines += [f"  {e}" for e in dup["examples"]]
    audit = ck.get("audit") or {}
    lines.append(f"horizon check: exit {ck.get('exit_code')} in {ck.get('seconds')} s, {ck.get('problems')} problems, "
                 f"decisions {audit.get('decisions')}, reproduced {audit.get('reproduced')}, "
                 f"mismatches {audit.get('mismatches')}" + (f"; {ck['error']}" if "error" in ck else ""))
    lines += [f"  {p}" for p in ck.get("problem_examples", [])]
    lines.append("ok" if report["ok"] else "FAILED")
    return "\n".join(lines)
