"""Whole-log invariants, checked record by record (used by the tests and by ``horizon check``).

The log is folded from sequence 1 exactly as the services fold it (a record that
``decode_record`` refuses, e.g. a decision published on an input subject, is skipped
by every service, so here too). The invariants, in the words of the problems reported:

1. **Capacity, at every sequence.** No device is given to a job while another holds it,
   and no node's CPUs or memory are allocated beyond its capacity; every allocation names
   devices that exist; at the end, the ledger recomputed from the jobs equals the
   incremental one (``Cluster.check``).
2. **Decisions.** Every ``JobScheduled`` (whether or not it takes effect) is for an
   accepted job, and no attempt of a job is scheduled twice. A ``JobResized`` keeps an
   elastic job within its least and most nodes and on its first node; the nodes it gains
   are checked as a placement's (3, and capacity at 1).
3. **A live node.** Every node of every ``JobScheduled`` was, *at the decision's basis*
   (the state of the log at ``basis_seq``, which is what placement decided on), registered,
   ready and not cordoned, draining, lost or removed: placement's ``NodeReady`` filter. A
   node that changed *after* the basis and before the decision landed is a race, not a
   violation; but if it was lost or removed by then, the attempt must end (inventory fails
   it, ``JobFailed`` with ``node_lost``): one still holding resources at the end of the log
   is reported. (Taints are left to the audit: whether one stops a job depends on its
   tolerations.)
4. **Endings.** Every accepted job ends in exactly one terminal state or is still live.
   What an ending ends is one *run* (attempt ``a`` from its ``JobScheduled`` to
   ``JobSucceeded``/``JobFailed``/``JobPreempted``, or the agent's ``JobCancelled``) or
   one *wait* (the job pending after attempt ``a``, ended by submission's
   ``JobCancelled``, ``JobUnschedulable`` or ``JobDependencyNeverSatisfied``). Reported:
   a second ending of one run or one wait, of the same kind or another; an ending for a job
   never accepted; an ending for an attempt never scheduled; a wait's ending for a job that
   was not waiting. Not reported: an ending decided for a wait that a later ``JobScheduled``
   superseded (a cancel that lost the race with a placement: the job table ignores it by
   design, and the agent stops the new attempt).
5. **Quotas, at every sequence** (``services.domain.quotas`` is the model; limits as
   configured when the attempt's ``JobScheduled`` lands). For every account on a job's path,
   after every charge:

   * its running jobs stay within ``running_jobs`` (never borrowed);
   * an account that may not borrow holds, with all the jobs under it, at most its limit
     on GPUs, CPUs, memory and each GPU type of ``gpus_by_type``;
   * an account that may borrow holds at most its limits with the jobs *not* admitted on
     borrowed quota (what it holds by borrowing is bounded by its cohort, below);
   * **the cohort bound**: when an attempt admitted on borrowed quota is scheduled, for
     every account on its path with borrowing on that it takes over a limit, the accounts
     of that account's cohort (it and its sibling accounts) that have a limit on that
     resource hold together at most the sum of those limits. This is what admission
     guarantees: borrowing needs the excess of all the siblings to fit in what idle ones
     leave unused, so their sum stays within the sum of their limits. It is checked when
     borrowing lands, not at every sequence: a lender that starts its own jobs within its
     own quota may take the cohort over the sum until reclaim preempts the borrowers (that
     is allowed, and bounded per account by the previous point).
6. **Licenses** (``services.domain.licenses``; totals as configured when the attempt's
   ``JobScheduled`` lands): an attempt that takes licenses leaves no license held beyond its
   total, nor held when it is not defined. (An operator lowering a total below what is held
   is no violation; what starts after must fit.)

Decisions reproducing (the audit's replay) is the other half of ``horizon check``
(``services.front.cli.check``).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from events import catalogue as c
from events.codec import DecodeError
from events.subjects import parse_subject
from services.runtime.consume import decode_record
from services.domain.protocol import Record
from services.domain.fairshare import ROOT, Account, FairShare
from services.domain.licenses import Licenses
from services.domain.quotas import Amount, amount_of
from services.domain.cluster import Cluster, Node
from services.domain.jobs import HOLDS_RESOURCES, LIVE, TERMINAL, Job, JobTable, Transition
from services.domain.qos import overcommitted

__all__ = ["LogCheck", "check_log", "check_summary", "ENDINGS"]

ENDINGS = (c.JobSucceeded, c.JobFailed, c.JobCancelled, c.JobPreempted, c.JobUnschedulable,
           c.JobDependencyNeverSatisfied)
_RUN_REPORTS = (c.JobSucceeded, c.JobFailed, c.JobPreempted)  # always end a run (attempt)
_DIMS = ("gpus", "cpus_milli", "memory_bytes")


@dataclass
class LogCheck:
    records: int = 0
    scheduled: int = 0
    problems: list[str] = field(default_factory=list)
    jobs: JobTable = field(default_factory=JobTable)
    cluster: Cluster = field(default_factory=Cluster)
    accounts: FairShare = field(default_factory=FairShare)
    held: dict[str, Amount] = field(default_factory=dict)  # account -> held by every job under it
    own_use: dict[str, Amount] = field(default_factory=dict)  # account -> held by jobs not on borrowed quota
    borrowed: int = 0  # attempts scheduled on borrowed quota
    licenses: Licenses = field(default_factory=Licenses)  # defined, and held by the jobs holding resources

    @property
    def ok(self) -> bool:
        return not self.problems


def check_summary(report: LogCheck, audited: Any = None) -> dict[str, Any]:
    """What ``horizon check --json`` prints: the log's counts and problems, and the replay's tally
    (``audited``: its ``AuditReport``; None: not replayed)."""
    states = [j.state for j in report.jobs.jobs.values()]
    body: dict[str, Any] = {
        "records": report.records, "jobs": len(states), "live": sum(1 for s in states if s in LIVE),
        "ended": sum(1 for s in states if s in TERMINAL), "scheduled": report.scheduled,
        "borrowed": report.borrowed, "problems": list(report.problems),
    }
    if audited is not None:
        body["audit"] = {"decisions": audited.decisions, "reproduced": audited.reproduced,
                         "mismatches": len(audited.mismatches)}
    return body


def check_log(records: Iterable[Record]) -> LogCheck:
    out = LogCheck()
    nodes = _NodeHistory()
    endings = _Endings()
    quotas = _Quotas(out)
    scheduled_attempts: set[tuple[str, int]] = set()
    raced: dict[tuple[str, int], str] = {}  # (job, attempt) -> how its node was lost after the basis
    for record in records:
        out.records += 1
        try:
            event = decode_record(record)
        except DecodeError:
            continue
        seq = record.seq
        if out.cluster.apply(event, seq):
            nodes.note(out.cluster, event.node, seq)  # type: ignore[attr-defined]
            continue
        if isinstance(event, c.AccountConfigured):
            subject = parse_subject(record.subject)
            if subject is not None and subject.kind == "admin" and out.accounts.check_account(event) is None:
                out.accounts.configure_account(event, record.time)
                quotas.recount()  # as the scheduler does: the account may have moved in the tree
            continue
        if isinstance(event, c.LicenseConfigured):
            out.licenses.apply(event, record.subject)  # as every fold applies it (or refuses it)
            continue
        if isinstance(event, c.JobResized):
            _check_resize(out, nodes, seq, event)
            continue
        race = ""
        if isinstance(event, c.JobScheduled):
            key = (event.job_id, event.attempt)
            if key in scheduled_attempts:
                out.problems.append(f"seq {seq}: attempt {event.attempt} of {event.job_id} scheduled twice")
            scheduled_attempts.add(key)
            job = out.jobs.get(event.job_id)
            if job is None or job.spec is None:
                out.problems.append(f"seq {seq}: {event.job_id} scheduled but never accepted")
            race = _check_nodes(out, nodes, seq, event)
        moved = out.jobs.jobs.get(event.job_id) if isinstance(event, c.JobStarted) and event.devices else None
        before = moved.allocations if moved is not None else ()
        tr = out.jobs.apply(event, seq, record.time)
        if moved is not None and moved.allocations is not before:  # its backend chose other GPUs: the ledger follows
            for alloc in before:
                out.cluster._give_back(moved.job_id, alloc)
            for alloc in moved.allocations:
                out.cluster._take(moved.job_id, alloc)
        if isinstance(event, ENDINGS):
            endings.see(out, record, event, tr)
        if tr is None:
            continue
        if tr.after in HOLDS_RESOURCES and tr.before not in HOLDS_RESOURCES:
            out.scheduled += 1
            endings.scheduled(tr.job.job_id, seq)
            if race:
                raced[(tr.job.job_id, tr.job.attempt)] = race
            _check_take(out, seq, tr.job.job_id, tr.job.allocations)
            quotas.take(seq, tr.job)
            _take_licenses(out, seq, tr.job)
        elif tr.before in HOLDS_RESOURCES and tr.after not in HOLDS_RESOURCES:
            quotas.give_back(tr.job)
            if tr.job.spec is not None and tr.job.spec.licenses:
                out.licenses.charge(tr.job.spec.licenses, -1)
        out.cluster.on_transition(tr)
    for (job_id, attempt), how in sorted(raced.items()):
        job = out.jobs.get(job_id)
        lost = how.split(",", 1)[0]  # the node (an elastic gang may have been shrunk off it instead)
        if job is not None and job.state in HOLDS_RESOURCES and job.attempt == attempt \
                and any(a.node == lost for a in job.allocations):
            out.problems.append(f"{job_id} attempt {attempt} was placed on {how} and never ended")
    out.problems.extend(out.cluster.check(out.jobs))
    return out


def _take_licenses(out: LogCheck, seq: int, job: Job) -> None:
    """An attempt takes its licenses: none may then be held beyond its total (6.)."""
    wanted = job.spec.licenses if job.spec is not None else {}
    if not wanted:
        return
    out.licenses.charge(wanted, +1)
    for name in sorted(wanted):
        total, held = out.licenses.totals.get(name), out.licenses.used.get(name, 0)
        if total is None:
            out.problems.append(f"seq {seq}: {job.job_id} took license {name}, which is not defined")
        elif held > total:
            out.problems.append(f"seq {seq}: license {name}: {held} held, more than its {total} ({job.job_id})")


# ---------------------------------------------------------------- nodes: what placement saw


def _unfit(node: Node) -> str:
    """Why placement's ``NodeReady`` filter refuses the node ("" if it does not)."""
    if node.removed:
        return "removed"
    if node.lost:
        return "lost"
    if not node.ready:
        return "not ready"
    if node.cordoned:
        return "cordoned"
    if node.draining:
        return "draining"
    return ""


class _NodeHistory:
    """Each node's fitness after every node event, to answer "as of sequence b"."""

    def __init__(self) -> None:
        self.seqs: dict[str, list[int]] = {}
        self.why: dict[str, list[str]] = {}

    def note(self, cluster: Cluster, name: str, seq: int) -> None:
        node = cluster.nodes.get(name)
        if node is not None:
            self.seqs.setdefault(name, []).append(seq)
            self.why.setdefault(name, []).append(_unfit(node))

    def at(self, name: str, seq: int) -> str | None:
        """Why the node was unfit after record ``seq`` ("" if fit, None if not registered yet)."""
        i = bisect_right(self.seqs.get(name, []), seq)
        return self.why[name][i - 1] if i else None


def _check_resize(out: LogCheck, nodes: _NodeHistory, seq: int, event: c.JobResized) -> None:
    """An elastic job's new allocation: within its least and most nodes, its first node kept, the nodes
    it gains fit at the decision's basis and free in the ledger; the ledger then follows it."""
    job = out.jobs.jobs.get(event.job_id)
    if job is None or job.spec is None or job.state not in HOLDS_RESOURCES or job.attempt != event.attempt:
        return  # nothing held: the job table ignores it too
    spec = job.spec
    if not spec.elastic:
        out.problems.append(f"seq {seq}: {event.job_id} resized, but it is not elastic")
    elif not spec.min_nodes <= len(event.allocations) <= spec.nodes:
        out.problems.append(f"seq {seq}: {event.job_id} resized to {len(event.allocations)} nodes, outside its "
                            f"{spec.min_nodes}-{spec.nodes}")
    if event.allocations and job.allocations and event.allocations[0].node != job.allocations[0].node:
        out.problems.append(f"seq {seq}: {event.job_id} resized off its first node {job.allocations[0].node}")
        return
    before = job.allocations
    out.jobs.apply(event, seq, 0.0)
    if job.allocations is before:
        return
    for alloc in before:
        out.cluster._give_back(job.job_id, alloc)
    held = {a.node for a in before}
    gained = [a for a in job.allocations if a.node not in held]
    if gained:
        _check_nodes(out, nodes, seq, c.JobScheduled(job_id=event.job_id, attempt=event.attempt, allocations=gained,
                                                     basis_seq=event.basis_seq))
        _check_take(out, seq, job.job_id, tuple(gained))
    for alloc in job.allocations:
        out.cluster._take(job.job_id, alloc)


def _check_nodes(out: LogCheck, nodes: _NodeHistory, seq: int, event: c.JobScheduled) -> str:
    """Report nodes unfit at the decision's basis; return the race (a node lost or removed since
    the basis, before the decision landed) the attempt must then get an ending for, or ""."""
    if event.basis_seq >= seq:
        out.problems.append(f"seq {seq}: {event.job_id}'s JobScheduled states basis seq {event.basis_seq}, "
                            f"not before it")
    basis = event.basis_seq if 0 < event.basis_seq < seq else seq - 1  # none stated: as it landed
    race = ""
    for alloc in event.allocations:
        was = nodes.at(alloc.node, basis)
        if was is None:
            out.problems.append(f"seq {seq}: {event.job_id} placed on {alloc.node}, "
                                f"not registered at its basis (seq {basis})")
        elif was:
            out.problems.append(f"seq {seq}: {event.job_id} placed on {alloc.node}, "
                                f"{was} at its basis (seq {basis})")
        else:
            now = out.cluster.nodes[alloc.node]
            if now.lost or now.removed:
                race = race or f"{alloc.node}, {_unfit(now)} after its basis (seq {basis}) and before seq {seq},"
    return race


def _check_take(out: LogCheck, seq: int, job_id: str, allocations: tuple[c.NodeAllocation, ...]) -> None:
    for alloc in allocations:
        node = out.cluster.nodes.get(alloc.node)
        if node is None:
            continue  # reported with the decision (not registered at its basis)
        for device in alloc.device_ids:
            if device not in node.gpus:
                out.problems.append(f"seq {seq}: {job_id} got {alloc.node}/{device}, which does not exist")
            holder = node.used_devices.get(device)
            if holder is not None:
                out.problems.append(f"seq {seq}: {alloc.node}/{device} given to {job_id} while {holder} holds it")
        # bounded by the node's overcommit ratios (1: its capacity; services/domain/qos.py)
        if node.used_cpus_milli + alloc.cpus_milli > overcommitted(node.cpus_milli, node.cpu_overcommit):
            out.problems.append(f"seq {seq}: {alloc.node} CPUs over-allocated by {job_id}")
        if node.used_memory_bytes + alloc.memory_bytes > overcommitted(node.memory_bytes, node.memory_overcommit):
            out.problems.append(f"seq {seq}: {alloc.node} memory over-allocated by {job_id}")


# ---------------------------------------------------------------- endings: one per run, one per wait


class _Endings:
    def __init__(self) -> None:
        self.ended: dict[tuple[str, int, bool], tuple[str, int]] = {}  # (job, attempt, run?) -> (kind, seq)
        self.runs: dict[str, list[int]] = {}  # job -> the sequences its attempts 1, 2, ... were scheduled at

    def scheduled(self, job_id: str, seq: int) -> None:
        self.runs.setdefault(job_id, []).append(seq)

    def see(self, out: LogCheck, record: Record, event: c.Event, tr: Transition | None) -> None:
        job_id: str = event.job_id  # type: ignore[attr-defined]
        kind, seq = event.event_type, record.seq
        job = out.jobs.get(job_id)
        if job is None or job.spec is None:
            out.problems.append(f"seq {seq}: {kind} for {job_id}, which was never accepted")
            return
        if tr is not None:  # it took effect: it ended the run or the wait the job was in
            run = tr.before in HOLDS_RESOURCES
            self.ended[(job_id, job.attempt, run)] = (kind, seq)
            return
        subject = parse_subject(record.subject)
        if isinstance(event, _RUN_REPORTS) or (subject is not None and subject.owner == "agent"):
            attempt: int = event.attempt  # type: ignore[attr-defined]
            first = self.ended.get((job_id, attempt, True))
            if first is not None:
                out.problems.append(f"seq {seq}: {job_id} attempt {attempt} ended twice ({first[0]} at seq "
                                    f"{first[1]}, then {kind})")
            elif not 1 <= attempt <= job.attempt:
                out.problems.append(f"seq {seq}: {kind} for attempt {attempt} of {job_id}, which was never scheduled")
            return
        # A wait's ending that did not take effect: which wait was it decided for?
        if isinstance(event, c.JobCancelled):
            after = event.attempt
        else:
            basis = getattr(event, "basis_seq", 0)
            after = bisect_right(self.runs.get(job_id, []), basis) if 0 < basis < seq else job.attempt
        if after < job.attempt:
            return  # superseded: a later attempt was scheduled meanwhile (see the module doc)
        if after > job.attempt:
            out.problems.append(f"seq {seq}: {kind} for {job_id} after attempt {after}, which was never scheduled")
            return
        first = self.ended.get((job_id, after, False))
        if first is not None:
            out.problems.append(f"seq {seq}: {job_id} ended twice ({first[0]} at seq {first[1]}, then {kind})")
        else:  # with services deciding on their basis, it was superseded or it took effect
            out.problems.append(f"seq {seq}: {kind} for {job_id}, which was {job.state.value}, not waiting")


# ---------------------------------------------------------------- quotas


def _limit(quota: c.Quota, dim: str) -> int | None:
    return quota.gpus_by_type.get(dim[5:]) if dim.startswith("type:") else getattr(quota, dim)


def _label(dim: str) -> str:
    return f"{dim[5:]} GPUs" if dim.startswith("type:") else dim


@dataclass(slots=True)
class _Charge:
    leaf: str
    amount: Amount
    borrowed: bool


class _Quotas:
    """What every account holds, charged from an attempt's ``JobScheduled`` to its end."""

    def __init__(self, out: LogCheck) -> None:
        self.out = out
        self.charges: dict[str, _Charge] = {}  # job -> its holding attempt's charge

    def _accounts(self, leaf: str) -> list[Account]:
        return [acc for acc in self.out.accounts.path(leaf) if not acc.leaf]

    def _add(self, charge: _Charge, sign: int) -> list[Account]:
        accounts = self._accounts(charge.leaf)
        for acc in accounts:
            self.out.held.setdefault(acc.name, Amount()).add(charge.amount, sign)
            if not charge.borrowed:
                self.out.own_use.setdefault(acc.name, Amount()).add(charge.amount, sign)
        return accounts

    def recount(self) -> None:
        self.out.held, self.out.own_use = {}, {}
        for charge in self.charges.values():
            self._add(charge, +1)

    def give_back(self, job: Job) -> None:
        charge = self.charges.pop(job.job_id, None)
        if charge is not None:
            self._add(charge, -1)

    def take(self, seq: int, job: Job) -> None:
        """Charge the attempt to every account on its path, then check each one's limits."""
        spec = job.spec
        if spec is None:
            return
        out = self.out
        out.borrowed += job.borrowed
        charge = _Charge(out.accounts.leaf_for(spec, 0.0).name, amount_of(spec), job.borrowed)
        self.charges[job.job_id] = charge
        for acc in self._add(charge, +1):
            q, held = acc.quota, out.held[acc.name]
            if q.running_jobs is not None and held.running_jobs > q.running_jobs:
                out.problems.append(f"seq {seq}: account {acc.name} runs {held.running_jobs} jobs, "
                                    f"quota {q.running_jobs} ({job.job_id})")
            # Only an account that may borrow holds beyond its limits, and only with borrowed jobs.
            counted = out.own_use.get(acc.name, Amount()) if acc.borrowing else held
            for dim in (*_DIMS, *(f"type:{t}" for t in sorted(q.gpus_by_type))):
                limit = _limit(q, dim)
                if limit is None:
                    continue
                if counted.get(dim) > limit:
                    out.problems.append(f"seq {seq}: account {acc.name} holds {counted.get(dim)} {_label(dim)} "
                                        f"without borrowing, quota {limit} ({job.job_id})")
                elif job.borrowed and acc.borrowing and held.get(dim) > limit:
                    self._check_cohort(seq, acc, dim, job.job_id)

    def _check_cohort(self, seq: int, acc: Account, dim: str, job_id: str) -> None:
        """The cohort bound (module doc, 5): its members with a limit on ``dim`` within their sum."""
        fs, out = self.out.accounts, self.out
        members = [fs.accounts[s] for s in fs.accounts[acc.parent or ROOT].children]
        members = [m for m in members if not m.leaf and _limit(m.quota, dim) is not None]
        total = sum(out.held[m.name].get(dim) if m.name in out.held else 0 for m in members)
        bound = sum(_limit(m.quota, dim) or 0 for m in members)
        if total > bound:
            names = ", ".join(sorted(m.name for m in members))
            out.problems.append(f"seq {seq}: cohort of {acc.name} ({names}) holds {total} {_label(dim)}, over "
                                f"the {bound} of their quotas together, as {job_id} borrows")
