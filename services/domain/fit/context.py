"""The context a job's fit is judged in: ``Context`` (the profile, when the job would run, its account,
advance reservations, where jobs run, the room held for preemptors), and the room a preemption holds
for its preemptor (``hold_room``, ``release_room``). Pure. The ledger overlay and the per-node cycle
the plugins read are ``services/domain/fit/cycle.py``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from events import catalogue as c
from services.domain.fit.cycle import AdvanceReservation, PartitionView
from services.domain.fit.profile import Profile
from services.domain.fit.topology import Topology

__all__ = ["Context", "DEFAULT_CONTEXT", "hold_room", "release_room"]


@dataclass(slots=True)
class Context:
    """What a placement knows besides the node and the request: the profile, when the job would
    run (now or a reservation's time, until its time limit), its account, the advance
    reservations, for inter-job (anti-)affinity where jobs run, and its partition (None: it may
    use any node). ``memberships`` (node -> its partitions) files nodes apart in the node index."""

    profile: Profile = field(default_factory=Profile)
    start_ts: float = 0.0
    end_ts: float = math.inf
    account: str = ""
    reservations: tuple[AdvanceReservation, ...] = ()
    topology: Topology | None = None
    job_id: str = ""
    held: Mapping[str, frozenset[str]] = field(default_factory=dict)  # node -> preemptors its freed room is held for
    partition: PartitionView | None = None
    memberships: Mapping[str, frozenset[str]] = field(default_factory=dict)


DEFAULT_CONTEXT = Context()


def hold_room(held: dict[str, frozenset[str]], allocations: Iterable[c.NodeAllocation], for_job: str) -> None:
    """A victim is being preempted for ``for_job``: the nodes it runs on are held for that job
    (``fit_node`` refuses them to anyone else) until it starts or ends (``release_room``).
    Placement and preemption fold this alike, so a preemption plan never counts on room held
    for another preemptor."""
    for alloc in allocations:
        held[alloc.node] = held.get(alloc.node, frozenset()) | {for_job}


def release_room(held: dict[str, frozenset[str]], job_id: str) -> None:
    """``job_id`` left the queue (it started, or ended waiting): what was held for it is free."""
    for node in [n for n, holders in held.items() if job_id in holders]:
        rest = held[node] - {job_id}
        if rest:
            held[node] = rest
        else:
            del held[node]
