"""Inventory: the nodes, their state, and the allocation ledger. Pure.

Folds node registrations, operator node commands (``horizon.in._admin.node``),
node state changes and the job lifecycle (the ledger is derived from job
allocations, never counted by hand). ``decide``:

* a registered node whose registration is newer than its last loss becomes
  ``NodeReady``;
* a node command becomes ``NodeCordoned`` / ``NodeUncordoned`` /
  ``NodeDraining`` / ``NodeRemoved`` / ``NodeTaintsChanged`` /
  ``NodeDatasetsChanged`` (or ``RequestRejected`` for an unknown node or
  action, a malformed taint or dataset name, the untaint of a taint the node
  does not have, or the removal of a dataset it does not hold);
* every job still holding resources on a lost or removed node is ended with
  ``JobFailed`` ("node lost"), which frees its devices in every service's
  ledger; its restart policy then decides whether it is requeued. An elastic
  gang that keeps its first node and its least nodes is shrunk off them
  instead (``JobResized``; ``services/inventory/elastic.py``);
* every job holding resources on a node with a ``NoExecute`` taint it does
  not tolerate is **evicted**: ``PreemptionRequested`` (``for_job`` empty),
  once per attempt. Its agent stops it (checkpoint signal first, if the job
  has one) and reports ``JobPreempted``, which frees the resources; scheduling
  requeues a preempted job at once, without counting a retry. An elastic gang
  that keeps its first node and its least nodes gives the tainted nodes back
  instead (``JobResized``);
* a drain with ``--migrate`` or ``--deadline`` answers ``NodeDraining`` and a
  ``JobDrainPlanned`` per job on the node (what will happen to it), then
  stops its checkpointable jobs at once to resume elsewhere and, at the
  deadline, what still runs there (``services/inventory/drain.py``);
* a node's memory pressure (``NodeMemoryPressure``, its agent's measure)
  ends best-effort jobs, then burstable ones over their requests, with
  ``JobFailed`` (``evicted``); ``horizon node set`` answers with
  ``NodeOvercommitChanged`` (``services/inventory/qos.py``).

Dataset commands (``add-datasets`` / ``remove-datasets``) answer likewise with
the node's whole sorted list of datasets; like taints, they outlive a
re-registration.

Taint commands answer with the node's whole new taint list, so a reader
needs no history to know a node's taints. A taint replaces the node's taint
with the same key and effect (a new value); an untaint names a key and
optionally a value and an effect, and removes every taint it matches.

Why 30 s of grace for an eviction: it is Kubernetes' default
``terminationGracePeriodSeconds``, which is what a NoExecute eviction there
gives a pod, and ``PreemptionRequested``'s default. A job that checkpoints
on a signal gets it at the start of that period, so it is long enough to
write a checkpoint of modest size and short enough that an operator who
marks a node broken sees it emptied within a minute.

``NodeLost`` itself is an *observation* (heartbeats stopped, measured by the
wall clock in ``services.inventory.app``), not a decision of this core.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from events import catalogue as c
from events.base import Event
from events.subjects import WHOLE_LOG
from events.vocabulary import GRACE_PERIOD_MAX_S, NODE_ACTIONS
from events.subjects import EVENTS_ONLY, parse_subject
from services.domain.envelope import Decider
from services.domain.protocol import Record
from services.domain.protocol import CoreState
from services.domain.quoting import bounded_id, clipped, id_token
from services.domain.cluster import Cluster, Node, fold_cluster
from services.domain.jobs import HOLDS_RESOURCES
from services.domain.restart import ends_for_good
from services.domain.taints import check_taint, taint_text, untolerated
from services.domain.datasets import check_datasets
from services.inventory import snapshot
from services.inventory.jobs import InventoryJobs
from services.inventory.qos import memory_evictions, overcommit_answer
from services.inventory.drain import Drain, drain_plan, drain_stops
from services.inventory.elastic import shrink_off_lost, shrink_off_tainted

__all__ = ["InventoryCore", "InventoryState", "NODE_ACTIONS", "EVICTION_GRACE_S"]

EVICTION_GRACE_S = 30.0  # Kubernetes' default terminationGracePeriodSeconds (see the module doc)


class InventoryState(CoreState):
    def __init__(self) -> None:
        super().__init__()
        self.jobs = InventoryJobs()  # lean: services/inventory/jobs.py; ended jobs settled (see evolve)
        self.cluster = Cluster()
        self.commands: dict[int, c.NodeCommandIssued] = {}  # request seq -> unanswered command
        # job -> the attempt whose stop was last requested (by anyone): an eviction is asked once
        self.preemptions: dict[str, int] = {}
        self.pressure: dict[str, c.NodeMemoryPressure] = {}  # node -> its agent's latest measure of pressure
        self.retries: dict[str, int] = {}  # job -> retries granted, as scheduling counts them (restart.py)


@dataclass
class InventoryCore:
    name: ClassVar[str] = "inventory"
    # NodeLost/NodeReady with basis_seq 0 record the heartbeat watch's wall-clock silence: observations
    # of the world that no replay can reproduce (services/runtime/replay.py takes them as inputs).
    observations: ClassVar[tuple[str, ...]] = ("NodeLost", "NodeReady")
    virtual_time: bool = False
    subjects: tuple[str, ...] = WHOLE_LOG
    layout_subjects: tuple[str, ...] = EVENTS_ONLY  # layout 2: operator inputs come relayed
    eviction_grace_s: float = EVICTION_GRACE_S
    snapshot_every: int = 50_000  # records between snapshots (0: never; services/inventory/snapshot.py)

    def initial(self) -> InventoryState:
        return InventoryState()

    def fingerprint(self) -> str:
        """What a snapshot must have been folded with to be loaded by this core."""
        return f"inventory/{snapshot.SNAPSHOT_FORMAT}/{self.eviction_grace_s!r}/{int(self.virtual_time)}"

    def dump(self, state: InventoryState) -> bytes:
        """The whole state as bytes (``snapshot.dump``)."""
        return snapshot.dump(state, self.fingerprint())

    def load(self, data: bytes) -> InventoryState | None:
        """The state a ``dump`` wrote, or None when it is from another format or configuration."""
        return snapshot.load(data, self.fingerprint(), self.initial())

    def evolve(self, state: InventoryState, event: Event, record: Record) -> InventoryState:
        subject = parse_subject(record.subject)
        if subject is not None and subject.kind == "admin":
            if isinstance(event, c.NodeCommandIssued):
                state.commands[record.input_seq] = event
            return state
        if event.source == self.name and event.causation_id and event.causation_id.startswith("seq:"):
            state.commands.pop(int(event.causation_id[4:]), None)
        if isinstance(event, c.PreemptionRequested) and event.job_id in state.jobs.jobs:
            # Whoever asked (this core evicting, or preemption), the attempt is being stopped.
            state.preemptions[event.job_id] = max(event.attempt, state.preemptions.get(event.job_id, 0))
        if isinstance(event, c.NodeMemoryPressure):
            state.pressure[event.node] = event
        elif isinstance(event, c.NodeRegistered):
            state.pressure.pop(event.node, None)  # a restarted agent measures afresh
        tr = fold_cluster(state.cluster, state.jobs, event, record.seq, state.now)
        if tr is not None and ends_for_good(tr, event, state.retries):
            # Ended, and no requeue can follow: nothing later moves it or reads more than its outcome
            # (a late report of its attempt, a stop asked for it, a drain or a resize name it in vain),
            # so only the outcome is kept, as scheduling keeps it (JobTable.settle).
            job_id = tr.job.job_id
            state.jobs.settle(job_id)
            state.retries.pop(job_id, None)
            state.preemptions.pop(job_id, None)
        return state

    def decide(self, state: InventoryState) -> list[Event]:
        out: list[Event] = []
        base = {"ts": state.now, "source": self.name, "basis_seq": state.seq}
        decide = Decider(self.name, **base)
        shrunk: set[str] = set()  # elastic jobs shrunk off lost nodes (services/inventory/elastic.py)
        irregular = state.cluster.sorted_irregular()  # the others are ready, not lost, not removed, not draining
        for node in irregular:
            if not node.removed and (not node.ready or node.lost) and node.registered_seq > node.lost_seq:
                out.append(decide(c.NodeReady, node.name, node.registered_seq, correlation_id=node.name, node=node.name))
            if node.lost or node.removed:
                why = "lost" if node.lost else "removed"
                for job_id in sorted(node.jobs):
                    job = state.jobs.get(job_id)
                    if job is None or job.state not in HOLDS_RESOURCES or job_id in shrunk:
                        continue
                    shrink = shrink_off_lost(state.cluster, job, state.now, state.seq, self.name)
                    if shrink is not None:  # an elastic gang goes on without the nodes that are gone
                        shrunk.add(job_id)
                        out.append(shrink)
                        continue
                    out.append(decide(
                        c.JobFailed, job_id, job.attempt, correlation_id=job_id, job_id=job_id, attempt=job.attempt,
                        node=node.name, reason=f"node {node.name} {why}", node_lost=True,
                    ))
        out.extend(self._evictions(state, irregular, {e.job_id for e in out if isinstance(e, c.JobFailed)} | shrunk))
        if state.pressure:
            asked = {e.job_id for e in out if isinstance(e, (c.JobFailed, c.PreemptionRequested, c.JobResized))}
            out.extend(memory_evictions(state.cluster.nodes, state.jobs, state.pressure, asked, state.now, state.seq))
        # drains with migration or a deadline (services/inventory/drain.py)
        drains = [n for n in irregular if n.draining and (n.drain_migrate or n.drain_deadline_ts)]
        if drains:
            asked = {e.job_id for e in out if isinstance(e, (c.JobFailed, c.PreemptionRequested, c.JobResized))}
            out.extend(drain_stops(drains, state.jobs, state.preemptions, asked,
                                   state.now, state.seq, self.eviction_grace_s))
        taints: dict[str, list[c.Taint]] = {}  # this round's taint answers, so two commands compose
        datasets: dict[str, frozenset[str]] = {}  # and its dataset answers
        ratios: dict[str, tuple[float, float]] = {}  # and its overcommit answers
        for seq in sorted(state.commands):
            answer = self._command(state, seq, state.commands[seq], base, taints, datasets, ratios)
            out.append(answer)
            if isinstance(answer, c.NodeDraining):  # and what it will do to each job on the node
                out.extend(drain_plan(state.cluster.nodes[answer.node],
                                      Drain(answer.migrate, answer.deadline_ts, answer.grace_s),
                                      state.jobs, state.now, self.eviction_grace_s,
                                      Decider(self.name, **base, causation_id=answer.causation_id), seq))
        return out

    def _evictions(self, state: InventoryState, irregular: list[Node], failing: set[str]) -> list[Event]:
        """``PreemptionRequested`` for each job on a node with a NoExecute taint it does not tolerate.

        Once per attempt: an attempt already asked to stop (by this core or by preemption) is left
        to that request. A gang job on several such nodes is named by the first in node order.
        """
        out: list[Event] = []
        decide = Decider(self.name, ts=state.now, source=self.name, basis_seq=state.seq)
        asked = set(failing)
        tainted = [n for n in irregular if n.taints]  # a NoExecute taint makes a node irregular
        for node in tainted:
            if node.lost or node.removed or not node.jobs:
                continue  # a lost or removed node's jobs are failed instead (above)
            no_execute = [t for t in node.taints if t.effect == "NoExecute"]
            if not no_execute:
                continue
            for job_id in sorted(node.jobs):
                job = state.jobs.get(job_id)
                if job is None or job.spec is None or job.state not in HOLDS_RESOURCES or job_id in asked:
                    continue
                if state.preemptions.get(job_id, 0) >= job.attempt:
                    continue
                bad = untolerated(job.spec.tolerations, no_execute, ("NoExecute",))
                if not bad:
                    continue
                asked.add(job_id)
                shrink = shrink_off_tainted(state.cluster, job, state.now, state.seq, self.name, self.eviction_grace_s)
                if shrink is not None:  # an elastic gang gives those nodes back instead (services/inventory/elastic.py)
                    out.append(shrink)
                    continue
                out.append(decide(
                    c.PreemptionRequested, job_id, job.attempt, correlation_id=job_id, job_id=job_id,
                    attempt=job.attempt, for_job="", grace_period_s=self.eviction_grace_s,
                    reason=f"node {node.name} taint {taint_text(bad[0])} is not tolerated",
                ))
        return out

    def _command(
        self, state: InventoryState, seq: int, cmd: c.NodeCommandIssued, base: dict[str, object],
        taints: dict[str, list[c.Taint]], datasets: dict[str, frozenset[str]],
        ratios: dict[str, tuple[float, float]],
    ) -> Event:
        # What the operator wrote comes back bounded (services/domain/quoting.py): the answer must fit
        # in one message whatever the command carried.
        decide = Decider(self.name, correlation_id=bounded_id(cmd.node), causation_id=f"seq:{seq}", **base)
        node = state.cluster.nodes.get(cmd.node)
        reason = clipped(cmd.reason or f"{cmd.action} by {cmd.user or 'an operator'}")

        def reject(why: str, verb: str = f"node {cmd.action}") -> Event:
            return decide(c.RequestRejected, id_token(cmd.node), seq, job_id="", tenant="_admin",
                          verb=clipped(verb, 64), reason=clipped(why), request_seq=seq)

        if node is None or node.removed:
            return reject(f"no node {cmd.node!r}")
        if (cmd.migrate or cmd.deadline_s is not None or cmd.grace_s is not None) and cmd.action != "drain":
            return reject(f"--migrate, --deadline and --grace are for drain, not {cmd.action}")
        if cmd.action in ("taint", "untaint"):
            current = taints.get(node.name, node.taints)
            new, why = self._retaint(node, current, cmd)
            if why:
                return reject(why)
            taints[node.name] = new
            text = _pattern_text(cmd.taint)  # type: ignore[arg-type]
            return decide(c.NodeTaintsChanged, cmd.node, seq, node=cmd.node, taints=new,
                          reason=clipped(cmd.reason or f"{cmd.action} {text} by {cmd.user or 'an operator'}"))
        if cmd.action in ("add-datasets", "remove-datasets"):
            why = check_datasets(cmd.datasets)
            if why:
                return reject(why)
            current = datasets.get(node.name, node.datasets)
            names = frozenset(cmd.datasets)
            if cmd.action == "add-datasets":
                new = current | names
            else:
                missing = sorted(names - current)
                if missing:
                    return reject(f"node {node.name} holds no dataset {', '.join(missing)} "
                                  f"(it holds: {', '.join(sorted(current)) or 'none'})")
                new = current - names
            datasets[node.name] = new
            verb = "add" if cmd.action == "add-datasets" else "remove"
            return decide(c.NodeDatasetsChanged, cmd.node, seq, node=cmd.node, datasets=sorted(new),
                          reason=clipped(cmd.reason or f"{verb} {', '.join(sorted(names))} by {cmd.user or 'an operator'}"))
        if cmd.action == "set":
            answer = overcommit_answer(node, cmd, decide, reject, seq, ratios.get(node.name))
            if isinstance(answer, c.NodeOvercommitChanged):
                ratios[node.name] = (answer.cpu_overcommit, answer.memory_overcommit)
            return answer
        match cmd.action:
            case "cordon":
                return decide(c.NodeCordoned, cmd.node, seq, node=cmd.node, reason=reason)
            case "uncordon":
                return decide(c.NodeUncordoned, cmd.node, seq, node=cmd.node)
            case "drain":
                deadline = cmd.deadline_s
                if deadline is not None and not 0 <= deadline < float("inf"):
                    return reject(f"a drain deadline is a number of seconds, 0 or more, not {deadline!r}")
                if cmd.grace_s is not None and not 0 <= cmd.grace_s <= GRACE_PERIOD_MAX_S:
                    return reject(f"a drain's grace is between 0 and {GRACE_PERIOD_MAX_S:g} s, not {cmd.grace_s!r}")
                jobs = sorted(j for j in node.jobs if (job := state.jobs.get(j)) is not None
                              and job.state in HOLDS_RESOURCES)
                return decide(c.NodeDraining, cmd.node, seq, node=cmd.node, reason=reason, migrate=cmd.migrate,
                              deadline_ts=0.0 if deadline is None else state.now + deadline, jobs=jobs,
                              grace_s=cmd.grace_s)
            case "remove":
                return decide(c.NodeRemoved, cmd.node, seq, node=cmd.node, reason=reason)
        return reject(f"action {cmd.action!r} is not one of {', '.join(NODE_ACTIONS)}", verb="node")

    @staticmethod
    def _retaint(node: Node, current: list[c.Taint], cmd: c.NodeCommandIssued) -> tuple[list[c.Taint], str]:
        """The node's taints after a taint or untaint command, or why the command is refused.

        ``taint`` replaces the taint with the same key and effect (in place) or appends;
        ``untaint`` removes every taint of the key, and of the value and effect if given.
        """
        taint = cmd.taint
        if taint is None:
            return current, f"{cmd.action} needs a taint (key, value, effect)"
        if cmd.action == "taint":
            why = check_taint(taint)
            if why:
                return current, why
            new, replaced = [], False
            for t in current:
                if (t.key, t.effect) == (taint.key, taint.effect):
                    if not replaced:
                        new.append(taint)
                    replaced = True
                else:
                    new.append(t)
            return (new if replaced else [*current, taint]), ""
        why = check_taint(taint, effect_required=False)
        if why:
            return current, why
        kept = [t for t in current if not _covers(taint, t)]
        if len(kept) == len(current):
            has = ", ".join(taint_text(t) for t in current) or "none"
            return current, f"node {node.name} has no taint {_pattern_text(taint)} (its taints: {has})"
        return kept, ""


def _covers(pattern: c.Taint, taint: c.Taint) -> bool:
    """An untaint's pattern matches ``taint``: same key, and same value and effect where given."""
    return (pattern.key == taint.key and (not pattern.value or pattern.value == taint.value)
            and (not pattern.effect or pattern.effect == taint.effect))


def _pattern_text(taint: c.Taint) -> str:
    """``key[=value][:Effect]``: a taint, or an untaint's pattern that may leave parts out."""
    text = f"{taint.key}={taint.value}" if taint.value else taint.key
    return f"{text}:{taint.effect}" if taint.effect else text
