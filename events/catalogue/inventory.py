"""Inventory's decisions: ``horizon.evt.inventory.<Type>.<node>``."""

from __future__ import annotations

from events.base import Event, JobId, NodeId
from events.catalogue.values import Taint


class NodeReady(Event, tag="NodeReady", kw_only=True):
    node: NodeId
    basis_seq: int = 0


class NodeCordoned(Event, tag="NodeCordoned", kw_only=True):
    node: NodeId
    reason: str = ""
    basis_seq: int = 0


class NodeUncordoned(Event, tag="NodeUncordoned", kw_only=True):
    node: NodeId
    basis_seq: int = 0


class NodeDraining(Event, tag="NodeDraining", kw_only=True):
    """The node takes no new jobs; those on it run to their end, unless the drain says more
    (``horizon node drain NODE --migrate --deadline D``, docs/jobs.md, Draining a node):

    ``migrate``: its checkpointable jobs are stopped at once (checkpoint signal first) and requeued to
    resume elsewhere from their checkpoint; ``deadline_ts`` (0: none): what still runs there then is
    stopped, and requeued unless its spec says ``requeue`` false. ``jobs``: the jobs on the node when the
    drain was decided, each told what will happen to it in a ``JobDrainPlanned``."""

    node: NodeId
    reason: str = ""
    basis_seq: int = 0
    migrate: bool = False
    deadline_ts: float = 0.0
    jobs: list[JobId] = []
    grace_s: float | None = None  # each stop's grace period (None: inventory's eviction grace, 30 s)


class JobDrainPlanned(Event, tag="JobDrainPlanned", kw_only=True):
    """What a drain of ``node`` will do to the job's attempt there, decided with the ``NodeDraining``
    (``causation_id`` the operator's command): ``action`` is ``migrate`` (checkpointed now, requeued,
    resumed elsewhere from its checkpoint), ``finish`` (it ends by itself before the deadline, or there
    is none), ``requeue-at-deadline`` or ``end-at-deadline`` (if it still runs at ``deadline_ts`` it is
    stopped, then requeued, or ends for it is not requeueable). ``reason`` says why, in words."""

    job_id: JobId
    attempt: int
    node: NodeId
    action: str
    deadline_ts: float = 0.0
    reason: str = ""
    basis_seq: int = 0


class NodeLost(Event, tag="NodeLost", kw_only=True):
    node: NodeId
    reason: str = ""
    last_heartbeat_ts: float | None = None
    basis_seq: int = 0


class NodeTaintsChanged(Event, tag="NodeTaintsChanged", kw_only=True):
    """The node's taints now (an operator's taint/untaint). A ``NoExecute`` taint evicts the jobs
    on the node that do not tolerate it (``PreemptionRequested`` by inventory)."""

    node: NodeId
    taints: list[Taint] = []
    reason: str = ""
    basis_seq: int = 0


class NodeDatasetsChanged(Event, tag="NodeDatasetsChanged", kw_only=True):
    """The datasets the node holds now, the whole sorted list (the answer to an operator's
    ``horizon node add-datasets`` or ``remove-datasets``). Placement's ``locality`` score prefers, for a
    job that names datasets, the nodes holding them."""

    node: NodeId
    datasets: list[str] = []
    reason: str = ""
    basis_seq: int = 0


class NodeOvercommitChanged(Event, tag="NodeOvercommitChanged", kw_only=True):
    """The node's overcommit ratios now, both of them (the answer to an operator's ``horizon node set``).
    Placement packs the requests of burstable and best-effort jobs against capacity x ratio, those of
    guaranteed jobs against the capacity itself (docs/scheduling-policy.md, Overcommit). 1.0: none.
    They outlive a re-registration of the node."""

    node: NodeId
    cpu_overcommit: float = 1.0
    memory_overcommit: float = 1.0
    reason: str = ""
    basis_seq: int = 0


class NodeRemoved(Event, tag="NodeRemoved", kw_only=True):
    node: NodeId
    reason: str = ""
    basis_seq: int = 0
