"""``horizon audit``: replay the log through the decision functions and prove every decision.

Reads the whole ``HORIZON`` stream (a progress bar on a terminal), folds it
through the five services' cores configured as the live services were, and
checks that every recorded decision is reproduced exactly from its
``basis_seq`` (``services/runtime/replay.py``; docs/audit.md). ``--job JOB``
tells one job's story from the log, each line marked reproduced or not.

The contract: ``horizon audit --nats URL --json`` prints
``{"decisions": N, "reproduced": N, "mismatches": [...]}`` (and more keys), and
the exit code is non-zero when any decision is not reproduced.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import click

from events import catalogue as c
from events.base import Event
from events.codec import DecodeError, decode, decode_json
from events.resources import format_cpus, format_memory
from events.subjects import STREAM, parse_subject
from services.front.client.client import no_jetstream_text
from services.front.client.progress import Bar
from services.front.cli.options import nats_option
from services.runtime.log import LogError
from services.domain.protocol import Record
from services.domain.qos import qos_class
from services.runtime.replay import OBSERVATION, REPRODUCED, AuditReport, audit, concerns, differing_fields

__all__ = ["register", "read_log", "audit_cores"]

POLICIES = ["fcfs", "sjf", "f1", "multifactor"]
BACKFILL_MODES = ["easy", "shadow", "greedy", "none"]


@dataclass(frozen=True)
class AuditConfig:
    policy: str = "multifactor"
    backfill: str = "easy"
    virtual_time: bool = False

    def describe(self) -> str:
        time_ = ("virtual time (a simulator's log: ClockTicked and event times are the clock; "
                 "100,000 candidates per cycle)" if self.virtual_time else "live time (the log's stored times)")
        return f"policy {self.policy}, backfill {self.backfill}, {time_}"

    def as_json(self) -> dict[str, Any]:
        return {"policy": self.policy, "backfill_mode": self.backfill, "virtual_time": self.virtual_time}


def audit_cores(config: AuditConfig, records: Sequence[Record] = ()) -> list[Any]:
    """The five cores as the live services run them (``horizon up``/``horizon service`` with these flags),
    or as the simulator runs them (``virtual_time``); and, for a log with partition leaders
    (``horizon service scheduling --partition P``, docs/scaling.md), their cores, found in ``records``."""
    if config.virtual_time:
        from services.front.sim.driver import SimSettings, make_cores

        return make_cores(SimSettings(policy=config.policy, backfill=config.backfill))
    from services.front.registry import SERVICES, leader_cores, make_core

    cores = [make_core(name, policy=config.policy, backfill=config.backfill) for name in SERVICES]
    owners, partitions = partition_leaders(records)
    return cores + leader_cores(owners, partitions, policy=config.policy, backfill=config.backfill)


def partition_leaders(records: Sequence[Record]) -> tuple[set[str], set[str]]:
    """The service tokens of the partition leaders that published in ``records``, and every partition
    name the log configured (to tell ``scheduling-a-b``'s partitions apart)."""
    owners: set[str] = set()
    partitions: set[str] = set()
    for r in records:
        subject = r.subject
        if subject.startswith("horizon.evt.scheduling-") or subject.startswith("horizon.evt.placement-"):
            owners.add(subject.split(".", 3)[2])
        elif subject == "horizon.in._admin.partition":
            try:
                event = decode(r.data)
            except DecodeError:
                continue
            if isinstance(event, c.PartitionConfigured):
                partitions.add(event.name)
    return owners, partitions


# ---------------------------------------------------------------------- reading


async def read_log(url: str, on_batch: Callable[[int, int], None] | None = None) -> list[Record]:
    """Every record of the log, from seq 1; ``on_batch(records read, last seq)``. One-line errors
    (``LogError``) for an unreachable server, a missing stream, an empty or truncated log."""
    import nats.errors
    import nats.js.errors

    from services.runtime.jetstream import JetStreamLog, connect, redact_url

    nc = await connect(url, name="horizon-audit", connect_timeout_s=3.0, max_attempts=2)
    log = JetStreamLog(nc)
    where = redact_url(url)  # never a password in an error
    try:
        try:
            info = await log.js.stream_info(STREAM)
        except nats.js.errors.NotFoundError:
            raise LogError(f"there is no Horizon log at {where} (no stream {STREAM}): nothing to audit") from None
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
            raise LogError(f"JetStream at {where} is not answering ({type(exc).__name__}): is -js enabled?") from None
        except nats.js.errors.ServiceUnavailableError as exc:
            raise LogError(no_jetstream_text(exc, "reading the whole log")) from None
        last, first = int(info.state.last_seq), int(info.state.first_seq)
        if last == 0 or int(info.state.messages) == 0:
            raise LogError(f"the log at {where} is empty: nothing to audit")
        if first > 1:
            raise LogError(f"the log at {where} begins at seq {first}: records 1..{first - 1} were removed, so no "
                           f"decision can be replayed from the start")
        out: list[Record] = []
        async for batch in log.read(1, until_seq=last):
            out.extend(batch)
            if on_batch is not None:
                on_batch(len(out), last)
        return out
    finally:
        await log.close()


def _looks_simulated(records: list[Record]) -> bool:
    """Whether the log was written by the simulator (it registers the nodes as ``source: simulator``)."""
    for r in records[:500]:
        if b'"simulator"' in r.data:
            try:
                if decode(r.data).source == "simulator":
                    return True
            except DecodeError:
                continue
    return False


# ---------------------------------------------------------------------- the report


def _json_or_text(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return decode_json(text)
    except ValueError:
        return text


def _mismatch_json(m: dict[str, Any]) -> dict[str, Any]:
    out = dict(m)
    out["recorded"] = _json_or_text(m["recorded"])
    out["replayed"] = _json_or_text(m["replayed"])
    if m["recorded"] is not None and m["replayed"] is not None:
        out["differs"] = differing_fields(m["recorded"].encode(), m["replayed"].encode())
    return out


def _summary_json(report: AuditReport, url: str, config: AuditConfig, first: int, last: int | None,
                  hint: str | None) -> dict[str, Any]:
    return {
        "decisions": report.decisions,
        "reproduced": report.reproduced,
        "mismatches": [_mismatch_json(m) for m in report.mismatches],
        "observations": report.observations,
        "records": report.records,
        "log": {"url": url, "first_seq": report.first_seq, "last_seq": report.last_seq},
        "checked": {"from": first, "to": last if last is not None else report.last_seq},
        "config": config.as_json(),
        "services": {name: vars(t) for name, t in report.services.items()},
        "hint": hint,
    }


def _short(text: str | None, width: int = 400) -> str:
    if text is None:
        return "(nothing)"
    return text if len(text) <= width else text[: width - 1] + "…"


SHOWN = 20  # mismatches printed in text; --json lists them all


def _print_mismatches(report: AuditReport) -> None:
    for m in report.mismatches[:SHOWN]:
        if m["kind"] == "gap":
            click.echo(f"  GAP: {m['reason']}")
            continue
        where = f"seq {m['seq']}" if m["seq"] is not None else "not in the log"
        about = f" job {m['job']}" if m["job"] else (f" node {m['node']}" if m["node"] else "")
        click.echo(f"  {where}  {m['service']} {m['type']}{about}  basis {m['basis_seq']}  id {m['id']}")
        click.echo(f"    {m['reason']}")
        if m["recorded"] is not None or m["replayed"] is not None:
            click.echo(f"    recorded: {_short(m['recorded'])}")
            click.echo(f"    replayed: {_short(m['replayed'])}")
    if len(report.mismatches) > SHOWN:
        click.echo(f"  … and {len(report.mismatches) - SHOWN} more (--json lists them all)")


def _print_summary(report: AuditReport, url: str, config: AuditConfig, first: int, last: int | None,
                   hint: str | None, elapsed: float) -> None:
    to = last if last is not None else report.last_seq
    scope = "every decision" if first <= 1 and to >= report.last_seq else f"decisions recorded at seq {first}..{to}"
    click.echo(f"horizon audit of {url}: {report.records} records, seq {report.first_seq}..{report.last_seq}; "
               f"checked {scope} ({elapsed:.1f} s)")
    click.echo(f"configuration: {config.describe()}")
    click.echo(f"  {'service':<12}{'decisions':>11}{'reproduced':>12}{'mismatches':>12}")
    for name, t in report.services.items():
        click.echo(f"  {name:<12}{t.decisions:>11}{t.reproduced:>12}{t.mismatches:>12}")
    click.echo(f"  {'total':<12}{report.decisions:>11}{report.reproduced:>12}{len(report.mismatches):>12}")
    if report.observations:
        click.echo(f"observations, not decisions (inventory's heartbeat watch: NodeLost/NodeReady): "
                   f"{report.observations}")
    if report.ok:
        click.echo(f"OK: all {report.decisions} decisions reproduced exactly from their basis_seq.")
    else:
        click.echo(f"MISMATCHES: {len(report.mismatches)}")
        _print_mismatches(report)
    if hint:
        click.echo(f"hint: {hint}")


# ---------------------------------------------------------------------- a job's story


def _when(event: Event, record: Record, virtual: bool) -> float:
    return event.ts if virtual else record.time


def _fmt_time(t: float, virtual: bool) -> str:
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
    return f"{_fmt_time(t, virtual)} (in {delta:,.0f} s)" if delta >= 0 else _fmt_time(t, virtual)


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
            deadline = f", deadline {_fmt_time(e.deadline_ts, virtual)}" if e.deadline_ts else ""
            return f"drain of {e.node} planned (attempt {e.attempt}{deadline}): {e.action}: {e.reason}"
        case c.JobRequeued():
            later = f", not before {_fmt_time(e.not_before_ts, virtual)}" if e.not_before_ts > now else ""
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


# ---------------------------------------------------------------------- the command


@click.command("audit")
@nats_option
@click.option("--from", "from_seq", type=click.IntRange(min=1), default=1, show_default=True,
              help="Check the decisions recorded from this seq on (the replay still folds from seq 1).")
@click.option("--to", "to_seq", type=click.IntRange(min=1), default=None,
              help="Check the decisions recorded up to this seq (default: the end of the log).")
@click.option("--job", "job_id", default=None, help="Tell this job's story, each line marked reproduced or not.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: decisions, reproduced, mismatches, ...")
@click.option("--policy", type=click.Choice(POLICIES), default="multifactor", show_default=True,
              help="The queue policy the services ran with (horizon up --policy), until a PolicyConfigured.")
@click.option("--backfill-mode", type=click.Choice(BACKFILL_MODES), default="easy", show_default=True,
              help="The backfill mode the services ran with (horizon up --backfill-mode), until a ProfileConfigured.")
@click.option("--virtual-time", is_flag=True,
              help="The log was written by the simulator (horizon simulate --nats): replay at virtual time, "
                   "with the simulator's core configuration.")
def audit_command(nats_url: str, from_seq: int, to_seq: int | None, job_id: str | None, as_json: bool, policy: str,
                  backfill_mode: str, virtual_time: bool) -> None:
    """Replay the log and check that every decision is reproduced exactly from its basis_seq.

    Exits 1 when any decision is not reproduced (or the log cannot be read)."""
    if to_seq is not None and to_seq < from_seq:
        raise click.BadParameter(f"--to {to_seq} is before --from {from_seq}", param_hint="--to")
    config = AuditConfig(policy=policy, backfill=backfill_mode, virtual_time=virtual_time)
    started = time.perf_counter()
    with Bar("reading") as reading:
        records = asyncio.run(read_log(nats_url, reading.update))
        last = records[-1].seq
        if from_seq > last:
            raise LogError(f"--from {from_seq} is past the end of the log (its last seq is {last})")
        mine = story_events(records, job_id) if job_id is not None else []
        if job_id is not None and not mine:
            raise LogError(f"no job {job_id} in the log")
        replaying = reading.add("replaying", total=len(records))
        select = (lambda e: concerns(e, job_id)) if job_id else None
        report = audit(records, audit_cores(config, records), first=from_seq, last=to_seq, select=select, progress=replaying.update)
    elapsed = time.perf_counter() - started
    simulated = _looks_simulated(records)
    hint = None
    if simulated and not virtual_time:
        hint = "this log was written by the simulator: audit it with --virtual-time"
    elif virtual_time and not simulated:
        hint = "--virtual-time is for the simulator's logs; this one looks live"
    if job_id is not None:
        story = job_story(mine, job_id, report, virtual_time)
        _emit_story(job_id, story, report, nats_url, config, from_seq, to_seq, hint, as_json)
    elif as_json:
        click.echo(json.dumps(_summary_json(report, nats_url, config, from_seq, to_seq, hint)))
    else:
        _print_summary(report, nats_url, config, from_seq, to_seq, hint, elapsed)
    if not report.ok:
        sys.exit(1)


def _emit_story(job_id: str, story: list[dict[str, Any]], report: AuditReport, url: str, config: AuditConfig,
                first: int, last: int | None, hint: str | None, as_json: bool) -> None:
    if as_json:
        out = _summary_json(report, url, config, first, last, hint)
        out.update(job=job_id, story=story)
        click.echo(json.dumps(out))
        return
    click.echo(f"job {job_id}: its story in the log at {url} ({config.describe()})")
    virtual = config.virtual_time
    for line in story:
        click.echo(f"  {line['seq']:>8}  {_fmt_time(line['time'], virtual):<24} {line['text']}  [{line['verdict']}]")
    click.echo(f"{report.decisions} decisions about {job_id}: {report.reproduced} reproduced, "
               f"{len(report.mismatches)} mismatches")
    if hint:
        click.echo(f"hint: {hint}")
    if report.mismatches:
        _print_mismatches(report)


def register(group: click.Group) -> None:
    group.add_command(audit_command)
