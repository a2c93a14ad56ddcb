"""One job's story from the log (``horizon audit --job``, the dashboard's job page): its records in
log order (``story_events``), each told in a line with the reasons the log gives (``story_line``) and
marked with the audit's verdict (``job_story``)."""

from __future__ import annotations

import time
from typing import Any

from events import catalogue as c
from events.base import Event
from events.codec import DecodeError, decode
from events.resources import format_cpus, format_memory
from events.subjects import parse_subject
from services.domain.protocol import Record
from services.domain.qos import qos_class
from services.front.audit.config import AuditConfig, audit_cores
from services.runtime.replay import CLAIM, OBSERVATION, REPRODUCED, AuditReport, audit, concerns

__all__ = ["story_line", "story_events", "job_story", "job_verdicts", "fmt_time"]


def _when(event: Event, record: Record, virtual: bool) -> float:
    return event.ts if virtual else record.time


def fmt_time(t: float, virtual: bool) -> str:
    if virtual:
        return f"t={t:,.1f}s"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f".{int(t * 1000) % 1000:03d}"


def _resources(spec: Any) -> str:
    parts = []
    gpus = getattr(spec, "gpus", 0)
    if gpus:
        kind = getattr(spec, "gpu_type", None)
        parts.append(f"{gpus} {kind + ' ' if kind else ''}GPU{'s' if gpus != 1 else ''}")
    cpus = getattr(spec, "cpus_milli", None)
    if cpus:
        parts.append(f"{format_cpus(cpus)} CPUs")
    mem = getattr(spec, "memory_bytes", None)
    if mem:
        parts.append(f"{format_memory(mem)} memory")
    shape = ", ".join(parts) or "no resources"
    nodes, tasks = getattr(spec, "nodes", 1), getattr(spec, "tasks_per_node", 1)
    if nodes > 1 or tasks > 1:
        shape = f"{nodes} node{'s' if nodes != 1 else ''} x {tasks} task{'s' if tasks != 1 else ''} of {shape}"
    return shape


def _allocation(allocs: list[c.NodeAllocation]) -> str:
    out = []
    for a in allocs:
        devices = f"[{','.join(a.device_ids)}]" if a.device_ids else ""
        out.append(f"{a.node}{devices} {format_cpus(a.cpus_milli)} CPUs {format_memory(a.memory_bytes)}")
    return "; ".join(out) or "nowhere"


def _ago(t: float | None, now: float, virtual: bool) -> str:
    if t is None:
        return "unknown"
    delta = t - now
    return f"{fmt_time(t, virtual)} (in {delta:,.0f} s)" if delta >= 0 else fmt_time(t, virtual)


def story_line(event: Event, job_id: str, now: float, virtual: bool) -> str:
    """One line of a job's story: what happened, with the reasons the log gives."""
    e: Any = event
    match event:
        case c.JobSubmitted():
            who = "/".join(x for x in (e.tenant, e.user) if x)
            array = f", array {e.array}" if e.array else ""
            deps = f", after {', '.join(f'{d.kind}:{d.job_id}' for d in e.dependencies)}" if e.dependencies else ""
            return f"submitted by {who or 'someone'} (account {e.account or 'default'}), class {e.priority_class}{array}{deps}"
        case c.JobAccepted():
            s = e.spec
            extra = [f"class {s.priority_class}", f"time limit {s.time_limit_s:g} s"]
            if s.array is not None:
                extra.append(f"task {s.array_index} of array {s.array}")
            if s.dependencies:
                extra.append("after " + ", ".join(f"{d.kind}:{d.job_id}" for d in s.dependencies))
            if s.restart_policy != "never":
                extra.append(f"restart {s.restart_policy} up to {s.max_retries} times")
            if qos_class(s) != "guaranteed":  # what every job was before limits existed: not said
                limits = [f"{format_cpus(s.cpu_limit_milli)} CPUs" if s.cpu_limit_milli else "",
                          f"{format_memory(s.memory_limit_bytes)} memory" if s.memory_limit_bytes else ""]
                shown = ", ".join(part for part in limits if part)
                extra.append(f"QoS {qos_class(s)}" + (f" (limits {shown} per task)" if shown else ""))
            return f"accepted: {_resources(s)}; {'; '.join(extra)}"
        case c.JobRejected():
            return f"rejected: {e.reason}" + (f" (field {e.field})" if e.field else "")
        case c.SchedulingCycleCompleted():
            position = e.candidates.index(job_id) + 1 if job_id in e.candidates else 0
            borrowing = ", admitted by borrowing idle quota" if job_id in e.borrowing else ""
            return (f"cycle {e.cycle}: candidate {position} of {len(e.candidates)} "
                    f"({e.queued} queued){borrowing}")
        case c.PlacementBlocked():
            reasons = "; ".join(f"{r.nodes} node{'s' if r.nodes != 1 else ''}: {r.reason}" for r in e.reasons)
            text = f"blocked in cycle {e.cycle}: {reasons or 'no reason given'}"
            if e.fits_nowhere:
                text += "; fits on no node even empty (waits for the nodes to change)"
            if e.reserved_nodes or e.earliest_start_ts is not None:
                text += (f"; reservation: {', '.join(e.reserved_nodes) or 'no nodes'} from "
                         f"{_ago(e.earliest_start_ts, now, virtual)}")
            return text
        case c.JobScheduled():
            how = [f"attempt {e.attempt}", f"cycle {e.cycle}"]
            if e.backfilled:
                how.append("backfilled (does not delay the reserved head)")
            if e.borrowed:
                how.append("on borrowed quota (reclaimable)")
            return f"scheduled ({', '.join(how)}) on {_allocation(e.allocations)}"
        case c.JobStarted():
            return f"started on {e.node} (attempt {e.attempt})"
        case c.PreemptionRequested() if e.job_id == job_id:
            why = f"for {e.for_job}" if e.for_job else "an eviction"
            return (f"preemption requested ({why}, attempt {e.attempt}, grace {e.grace_period_s:g} s)"
                    + (f": {e.reason}" if e.reason else ""))
        case c.PreemptionRequested():
            return (f"preempting {e.job_id} (attempt {e.attempt}) to make room for this job"
                    + (f": {e.reason}" if e.reason else ""))
        case c.JobPreempted():
            ref = f", checkpoint {e.checkpoint_ref}" if e.checkpoint_ref else ""
            why = f": {e.reason}" if e.reason and not e.for_job else ""
            return f"preempted (attempt {e.attempt}){' for ' + e.for_job if e.for_job else ''}{ref}{why}"
        case c.JobCheckpointed():
            return f"checkpointed (attempt {e.attempt}): {e.checkpoint_ref}"
        case c.JobDrainPlanned():
            deadline = f", deadline {fmt_time(e.deadline_ts, virtual)}" if e.deadline_ts else ""
            return f"drain of {e.node} planned (attempt {e.attempt}{deadline}): {e.action}: {e.reason}"
        case c.JobRequeued():
            later = f", not before {fmt_time(e.not_before_ts, virtual)}" if e.not_before_ts > now else ""
            return f"requeued after attempt {e.attempt}: {e.reason or 'no reason given'}{later}"
        case c.JobSucceeded():
            return f"succeeded (attempt {e.attempt}, exit code {e.exit_code}, ran {e.runtime_s:g} s)"
        case c.JobFailed():
            code = f"exit code {e.exit_code}" if e.exit_code is not None else "no exit code"
            return f"failed (attempt {e.attempt}, {code}): {e.reason or 'no reason given'}"
        case c.JobCancelled():
            return f"cancelled{' (attempt ' + str(e.attempt) + ')' if e.attempt else ''}: {e.reason or 'no reason given'}"
        case c.JobHeld():
            return f"held: {e.reason or 'no reason given'}"
        case c.JobReleased():
            return "released"
        case c.JobPriorityChanged():
            return f"priority changed to class {e.priority_class}, nice {e.nice}"
        case c.JobStopRequested():
            return f"stop requested (attempt {e.attempt}, grace {e.grace_period_s:g} s): {e.reason or 'cancel'}"
        case c.RequestRejected():
            return f"{e.verb} request rejected: {e.reason}"
        case c.JobUnschedulable():
            return f"unschedulable: {e.reason}"
        case c.JobDependencyNeverSatisfied():
            return f"dependency never satisfied ({e.dependency.kind}:{e.dependency.job_id}): {e.reason}"
        case c.JobCancelRequested():
            return f"cancel requested{': ' + e.reason if getattr(e, 'reason', '') else ''}"
        case c.JobHoldRequested():
            return "hold requested"
        case c.JobReleaseRequested():
            return "release requested"
        case c.JobUpdateRequested():
            return "update requested"
    return event.event_type


def _mark(verdict: str | None, record: Record, reasons: dict[int, str]) -> str:
    if verdict == REPRODUCED:
        return "reproduced"
    if verdict == OBSERVATION:
        return "observation"
    if verdict == CLAIM:
        return "leader's claim"
    if verdict is not None:
        return f"NOT REPRODUCED: {reasons.get(record.seq, verdict)}"
    subject = parse_subject(record.subject)
    if subject is None:
        return "?"
    if subject.kind in ("input", "admin"):
        return "input"
    return f"report ({subject.owner})"


def story_events(records: list[Record], job_id: str) -> list[tuple[Record, Event]]:
    """The records of ``job_id``'s story, in log order (a task of an array begins with the array's submission)."""
    arrays: dict[str, tuple[Record, Event]] = {}  # array id -> its submission
    mine: list[tuple[Record, Event]] = []
    parent: str | None = None
    for r in records:
        if job_id.encode() not in r.data:
            continue  # cheap: every event of the story names the job
        try:
            event = decode(r.data)
        except DecodeError:
            continue
        if concerns(event, job_id):
            mine.append((r, event))
            if isinstance(event, c.JobAccepted) and event.spec.array is not None:
                parent = event.spec.array
    if parent is not None and parent != job_id:
        for r in records:
            if parent.encode() not in r.data:
                continue
            try:
                event = decode(r.data)
            except DecodeError:
                continue
            if isinstance(event, c.JobSubmitted) and event.job_id == parent:
                arrays[parent] = (r, event)
                break
    if parent in arrays:
        mine.insert(0, arrays[parent])
    return mine


def job_story(mine: list[tuple[Record, Event]], job_id: str, report: AuditReport,
              virtual: bool) -> list[dict[str, Any]]:
    """Each record of the story as a line: its seq, time, type, text and the audit's verdict on it."""
    reasons = {m["seq"]: m["reason"] for m in report.mismatches if m["seq"] is not None}
    lines = []
    for r, event in mine:
        now = _when(event, r, virtual)
        text = story_line(event, job_id, now, virtual)
        if isinstance(event, c.JobSubmitted) and event.job_id != job_id:
            text = f"(array {event.job_id}) " + text
        if isinstance(event, c.JobSubmitted) and event.array and event.job_id == job_id:
            text += f"; its tasks are {job_id}_<index>: audit one with --job {job_id}_<index>"
        lines.append({
            "seq": r.seq, "time": now, "type": event.event_type, "text": text,
            "verdict": _mark(report.verdicts.get(r.seq), r, reasons),
        })
    return lines


def job_verdicts(records: list[Record], config: AuditConfig, *jobs: str) -> dict[str, str]:
    """The audit's verdict on each record of a job's story, by seq (as text): of the first of ``jobs``
    the log tells (a tenant's job by its key in the log, else by its own id)."""
    for job in jobs:
        mine = story_events(records, job)
        if not mine:
            continue
        report = audit(records, audit_cores(config, records), select=lambda e, job=job: concerns(e, job))
        return {str(line["seq"]): line["verdict"] for line in job_story(mine, job, report, False)}
    return {}
