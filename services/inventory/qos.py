"""Inventory's part in QoS and overcommit: the answer to ``horizon node set`` (``NodeOvercommitChanged``)
and the evictions a node's memory pressure calls for (``JobFailed`` with ``evicted``). Pure; the rules
themselves (classes, ratios, who goes first) are ``services/domain/qos.py``'s.

A ratio may go down only as far as the node's requests allow: the ledger never holds more than
``capacity x ratio`` (``horizon check`` proves it over the log), so lowering the CPU ratio of a node
whose jobs hold 12 CPUs of requests on 8 CPUs below 1.5 is refused with what it holds; cordon the
node and lower it once enough of its jobs have ended.

Evictions: the latest ``NodeMemoryPressure`` of each node is kept until the node's next one, and
every round ``memory_victims`` is asked again on it. Jobs already evicted (or ended) since the
measure count as freed, so the same measure never evicts twice; a job started after it is not in
it and is never its victim. One eviction per attempt (``JobFailed``'s id is the node-lost one's, so
the two can never both be stored).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from events import catalogue as c
from events.base import Event
from events.resources import format_cpus, format_memory
from services.domain.cluster import Node
from services.domain.envelope import Decider
from services.domain.quoting import clipped
from services.domain.jobs import HOLDS_RESOURCES, JobTable
from services.domain.qos import check_ratio, memory_victims, overcommitted

__all__ = ["overcommit_answer", "memory_evictions"]


def overcommit_answer(node: Node, cmd: c.NodeCommandIssued, decide: Decider,
                      reject: Callable[[str], Event], seq: int, answered: tuple[float, float] | None = None) -> Event:
    """``NodeOvercommitChanged`` with both ratios after ``cmd`` (``set``), or why it is refused.
    ``decide``: builds the answer with the command's common fields.
    ``answered``: the node's ratios as an earlier command of the same round set them (they compose)."""
    if cmd.cpu_overcommit is None and cmd.memory_overcommit is None:
        return reject("node set needs --cpu-overcommit or --mem-overcommit (or both)")
    why = check_ratio(cmd.cpu_overcommit, "--cpu-overcommit") or check_ratio(cmd.memory_overcommit,
                                                                              "--mem-overcommit")
    if why:
        return reject(why)
    now_cpu, now_memory = answered or (node.cpu_overcommit, node.memory_overcommit)
    cpu = now_cpu if cmd.cpu_overcommit is None else float(cmd.cpu_overcommit)
    memory = now_memory if cmd.memory_overcommit is None else float(cmd.memory_overcommit)
    if node.used_cpus_milli > overcommitted(node.cpus_milli, cpu):
        return reject(f"node {node.name}'s jobs hold {format_cpus(node.used_cpus_milli)} CPUs of requests on "
                      f"{format_cpus(node.cpus_milli)}: a CPU ratio of {cpu:g} leaves room for "
                      f"{format_cpus(overcommitted(node.cpus_milli, cpu))}; cordon it and lower it once they fit")
    if node.used_memory_bytes > overcommitted(node.memory_bytes, memory):
        return reject(f"node {node.name}'s jobs hold {format_memory(node.used_memory_bytes)} of memory requests on "
                      f"{format_memory(node.memory_bytes)}: a memory ratio of {memory:g} leaves room for "
                      f"{format_memory(overcommitted(node.memory_bytes, memory))}; cordon it and lower it once "
                      "they fit")
    return decide(
        c.NodeOvercommitChanged, cmd.node, seq, node=cmd.node, cpu_overcommit=cpu, memory_overcommit=memory,
        reason=clipped(cmd.reason or f"overcommit cpu x{cpu:g} memory x{memory:g} by {cmd.user or 'an operator'}"),
    )


def memory_evictions(nodes: Mapping[str, Node], jobs: JobTable, pressure: Mapping[str, c.NodeMemoryPressure],
                     asked: set[str], now: float, basis_seq: int) -> list[Event]:
    """``JobFailed`` (``evicted``) for each victim of each node's latest pressure, in node order;
    ``asked``: jobs this round already ends (failed with a lost node), left alone."""
    out: list[Event] = []
    decide = Decider("inventory", ts=now, source="inventory", basis_seq=basis_seq)
    for name in sorted(pressure):
        node = nodes.get(name)
        if node is None or node.lost or node.removed:
            continue  # its jobs are failed as lost instead
        running: dict[str, tuple[int, c.JobSpec, int]] = {}
        for job_id, alloc in node.jobs.items():
            job = jobs.get(job_id)
            if job is not None and job.spec is not None and job.state in HOLDS_RESOURCES:
                running[job_id] = (job.attempt, job.spec, alloc.memory_bytes)
        event = pressure[name]
        line = event.memory_bytes - event.reserve_bytes
        for job_id, attempt, cls, used in memory_victims(event, running):
            if job_id in asked:
                continue
            asked.add(job_id)
            requested = running[job_id][2]
            what = (f"best-effort, using {format_memory(used)}" if cls == "best-effort" else
                    f"burstable, using {format_memory(used)}, {format_memory(used - requested)} over its request of "
                    f"{format_memory(requested)}")
            out.append(decide(
                c.JobFailed, job_id, attempt, correlation_id=job_id, job_id=job_id, attempt=attempt, node=name,
                evicted=True,
                reason=(f"evicted: node {name} ran short of memory (its jobs used {format_memory(event.used_bytes)}, "
                        f"more than the {format_memory(line)} it gives them); {what}"),
            ))
    return out
