"""Inventory: the nodes, their state, and the allocation ledger. Pure.

Folds node registrations, operator node commands (``horizon.in._admin.node``),
node state changes and the job lifecycle (the ledger is derived from job
allocations, never counted by hand). ``decide``:

* a registered node whose registration is newer than its last loss becomes
  ``NodeReady``;
* a node command becomes ``NodeCordoned`` / ``NodeUncordoned`` /
  ``NodeDraining`` / ``NodeRemoved`` (or ``RequestRejected`` for an unknown
  node or action);
* every job still holding resources on a lost or removed node is ended with
  ``JobFailed`` ("node lost"), which frees its devices in every service's
  ledger; its restart policy then decides whether it is requeued.

``NodeLost`` itself is an *observation* (heartbeats stopped, measured by the
wall clock in ``services.inventory.app``), not a decision of this core.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from events import catalogue as c
from events.base import Event
from events.subjects import WHOLE_LOG
from events.subjects import parse_subject
from services.runtime.log import Record
from services.runtime.service import CoreState
from services.state.cluster import Cluster, fold_cluster
from services.state.jobs import HOLDS_RESOURCES, JobTable

__all__ = ["InventoryCore", "InventoryState", "NODE_ACTIONS"]

NODE_ACTIONS = ("cordon", "uncordon", "drain", "remove")


class InventoryState(CoreState):
    def __init__(self) -> None:
        super().__init__()
        self.jobs = JobTable()
        self.cluster = Cluster()
        self.commands: dict[int, c.NodeCommandIssued] = {}  # request seq -> unanswered command


@dataclass
class InventoryCore:
    name: ClassVar[str] = "inventory"
    virtual_time: bool = False
    subjects: tuple[str, ...] = WHOLE_LOG

    def initial(self) -> InventoryState:
        return InventoryState()

    def evolve(self, state: InventoryState, event: Event, record: Record) -> InventoryState:
        subject = parse_subject(record.subject)
        if subject is not None and subject.kind == "admin":
            if isinstance(event, c.NodeCommandIssued):
                state.commands[record.seq] = event
            return state
        if event.source == self.name and event.causation_id and event.causation_id.startswith("seq:"):
            state.commands.pop(int(event.causation_id[4:]), None)
        fold_cluster(state.cluster, state.jobs, event, record.seq, state.now)
        return state

    def decide(self, state: InventoryState) -> list[Event]:
        out: list[Event] = []
        base = {"ts": state.now, "source": self.name, "basis_seq": state.seq}
        for node in state.cluster.sorted_nodes():
            if not node.removed and (not node.ready or node.lost) and node.registered_seq > node.lost_seq:
                out.append(
                    c.NodeReady(
                        id=f"inventory/NodeReady/{node.name}/{node.registered_seq}",
                        correlation_id=node.name,
                        node=node.name,
                        **base,
                    )
                )
            if node.lost or node.removed:
                why = "lost" if node.lost else "removed"
                for job_id in sorted(node.jobs):
                    job = state.jobs.get(job_id)
                    if job is None or job.state not in HOLDS_RESOURCES:
                        continue
                    out.append(
                        c.JobFailed(
                            id=f"inventory/JobFailed/{job_id}/{job.attempt}",
                            ts=state.now,
                            source=self.name,
                            correlation_id=job_id,
                            job_id=job_id,
                            attempt=job.attempt,
                            node=node.name,
                            reason=f"node {node.name} {why}",
                            basis_seq=state.seq,
                            node_lost=True,
                        )
                    )
        for seq in sorted(state.commands):
            out.append(self._command(state, seq, state.commands[seq], base))
        return out

    def _command(self, state: InventoryState, seq: int, cmd: c.NodeCommandIssued, base: dict[str, object]) -> Event:
        common = {"correlation_id": cmd.node, "causation_id": f"seq:{seq}", **base}
        node = state.cluster.nodes.get(cmd.node)
        reason = cmd.reason or f"{cmd.action} by {cmd.user or 'an operator'}"
        if node is None or node.removed:
            return c.RequestRejected(
                id=f"inventory/RequestRejected/{cmd.node}/{seq}", job_id="", tenant="_admin", verb=f"node {cmd.action}",
                reason=f"no node {cmd.node!r}", request_seq=seq, **common,  # type: ignore[arg-type]
            )
        match cmd.action:
            case "cordon":
                return c.NodeCordoned(id=f"inventory/NodeCordoned/{cmd.node}/{seq}", node=cmd.node, reason=reason, **common)  # type: ignore[arg-type]
            case "uncordon":
                return c.NodeUncordoned(id=f"inventory/NodeUncordoned/{cmd.node}/{seq}", node=cmd.node, **common)  # type: ignore[arg-type]
            case "drain":
                return c.NodeDraining(id=f"inventory/NodeDraining/{cmd.node}/{seq}", node=cmd.node, reason=reason, **common)  # type: ignore[arg-type]
            case "remove":
                return c.NodeRemoved(id=f"inventory/NodeRemoved/{cmd.node}/{seq}", node=cmd.node, reason=reason, **common)  # type: ignore[arg-type]
        return c.RequestRejected(
            id=f"inventory/RequestRejected/{cmd.node}/{seq}", job_id="", tenant="_admin", verb="node",
            reason=f"action {cmd.action!r} is not one of {', '.join(NODE_ACTIONS)}", request_seq=seq, **common,  # type: ignore[arg-type]
        )
