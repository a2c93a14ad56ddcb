"""An elastic gang that loses nodes goes on without them, when it can. Pure.

A job holding resources on a lost or removed node is ended (``JobFailed``, ``node_lost``). An elastic
gang (``--nodes MIN-MAX``) is instead shrunk off the nodes that are gone, with ``JobResized``
(``inventory/JobResized/<job>/<attempt>/<basis>``), when what it keeps is still a job: its first node
(where its batch script runs) is not among them and at least its ``min_nodes`` remain. Its agent tells
it the new size as for any resize (``services/nodes/backends/process/resize.py``); the tasks it had on the lost nodes
are gone with them. As Slurm's ``--no-kill`` leaves a job to carry on without a failed node, and a
fault-tolerant framework (``torchrun --nnodes MIN:MAX``) re-forms its group at the new size.

Likewise a ``NoExecute`` taint it does not tolerate on some of its nodes: instead of the eviction of
the whole job (``PreemptionRequested``), the gang gives those nodes back (``JobResized``, the eviction's
grace period for its tasks there), under the same two conditions.
"""

from __future__ import annotations

from events import catalogue as c
from services.domain.cluster import Cluster
from services.domain.envelope import Decider
from services.domain.jobs import HOLDS_RESOURCES, Job
from services.domain.taints import taint_text, untolerated

__all__ = ["shrink_off_lost", "shrink_off_tainted"]


def shrink_off_lost(cluster: Cluster, job: Job, now: float, seq: int, source: str) -> c.JobResized | None:
    """``JobResized`` keeping the job's nodes that are neither lost nor removed, or None when it is not an
    elastic job that can go on without them (then it fails as before)."""
    spec = job.spec
    if spec is None or not spec.elastic or job.state not in HOLDS_RESOURCES or not job.allocations:
        return None
    gone = [a.node for a in job.allocations if _gone(cluster, a.node)]
    kept = [a for a in job.allocations if a.node not in gone]
    if not gone or job.allocations[0].node in gone or len(kept) < spec.min_nodes:
        return None
    why = ", ".join(f"{n} {'lost' if cluster.nodes[n].lost else 'removed'}" for n in gone)
    return Decider("inventory", ts=now, source=source, basis_seq=seq)(
        c.JobResized, job.job_id, job.attempt, seq, correlation_id=job.job_id, job_id=job.job_id,
        attempt=job.attempt, allocations=kept, nodes=len(kept), previous_nodes=len(job.allocations),
        reason=f"node {why}: shrunk from {len(job.allocations)} to {len(kept)} nodes (at least {spec.min_nodes})")


def _gone(cluster: Cluster, name: str) -> bool:
    node = cluster.nodes.get(name)
    return node is None or node.lost or node.removed


def shrink_off_tainted(cluster: Cluster, job: Job, now: float, seq: int, source: str,
                       grace_period_s: float) -> c.JobResized | None:
    """``JobResized`` giving back the job's nodes whose ``NoExecute`` taints it does not tolerate, or None
    when it is not an elastic job that can go on without them (then it is evicted whole as before)."""
    spec = job.spec
    if spec is None or not spec.elastic or job.state not in HOLDS_RESOURCES or not job.allocations:
        return None
    bad: dict[str, c.Taint] = {}
    for alloc in job.allocations:
        node = cluster.nodes.get(alloc.node)
        if node is None:
            continue
        hit = untolerated(spec.tolerations, [t for t in node.taints if t.effect == "NoExecute"], ("NoExecute",))
        if hit:
            bad[alloc.node] = hit[0]
    kept = [a for a in job.allocations if a.node not in bad]
    if not bad or job.allocations[0].node in bad or len(kept) < spec.min_nodes:
        return None
    why = ", ".join(f"node {n} taint {taint_text(t)}" for n, t in bad.items())
    return Decider("inventory", ts=now, source=source, basis_seq=seq)(
        c.JobResized, job.job_id, job.attempt, seq, correlation_id=job.job_id, job_id=job.job_id,
        attempt=job.attempt, allocations=kept, nodes=len(kept), previous_nodes=len(job.allocations),
        grace_period_s=grace_period_s,
        reason=f"{why} is not tolerated: shrunk from {len(job.allocations)} to {len(kept)} nodes "
               f"(at least {spec.min_nodes})")
