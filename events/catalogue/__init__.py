"""The catalogue: every event Horizon records, one frozen Struct per type.

Naming: facts in the past tense (``JobScheduled``); a request to another
party ends in ``Requested`` (``JobCancelRequested``). Units are in field
names (``memory_bytes``, ``time_limit_s``, ``cpus_milli``). New fields always
get a default, so an older reader and a newer writer can share the log.

Two shapes of a job exist on purpose:

* ``JobSubmitted`` is what a client publishes, from any language. Its fields
  are loosely typed (``memory: "16Gi" | 17179869184``, enumerations as plain
  strings) so that a *wrong value* decodes and earns a ``JobRejected`` with a
  reason, rather than dying as an undecodable message.
* ``JobSpec`` (inside ``JobAccepted``) is the validated, normalised form that
  every service after submission reads: integers in base units, known
  enumerations.

A field's meaning in the published schema is written beside it
(``Annotated[T, Meta(description=...)]``, which changes nothing on the wire);
an event's is its docstring. ``events/payloads.py`` adds what a field's name
says by convention and what the services check beyond the type.

One module per producer, all of them read through this package
(``from events import catalogue as c``; ``c.JobScheduled``):

``values``      the vocabulary and the value objects inside events (``JobSpec``, ``NodeAllocation``, ...)
``clients``     a client's inputs, ``horizon.in.<tenant>.<verb>``
``operators``   an operator's inputs, ``horizon.in._admin.<verb>``
``submission``  submission's decisions (the verdicts among them)
``scheduling``  scheduling and placement's decisions
``preemption``  preemption's decisions
``agents``      node agents' reports
``inventory``   inventory's decisions about nodes
``clock``       ``ClockTicked``
``leases``      ``LeadershipClaimed``, a leader's claim (a runner's, not a decision)

``AnyEvent`` (the tagged union) and ``EVENT_TYPES`` (tag -> class) are here.
"""

from __future__ import annotations

from types import ModuleType

from events.base import Event
from events.catalogue.values import *  # noqa: F403
from events.catalogue.clients import *  # noqa: F403
from events.catalogue.operators import *  # noqa: F403
from events.catalogue.submission import *  # noqa: F403
from events.catalogue.scheduling import *  # noqa: F403
from events.catalogue.preemption import *  # noqa: F403
from events.catalogue.agents import *  # noqa: F403
from events.catalogue.inventory import *  # noqa: F403
from events.catalogue.clock import *  # noqa: F403
from events.catalogue.leases import *  # noqa: F403


AnyEvent = (
    JobSubmitted
    | JobCancelRequested
    | JobHoldRequested
    | JobReleaseRequested
    | JobUpdateRequested
    | NodeCommandIssued
    | AccountConfigured
    | UserConfigured
    | TenantConfigured
    | FairShareConfigured
    | PolicyConfigured
    | PreemptionConfigured
    | ProfileConfigured
    | ReservationConfigured
    | PartitionConfigured
    | PartitionPolicyConfigured
    | DatasetAvailable
    | LicenseConfigured
    | JobAccepted
    | JobRejected
    | InputRejected
    | LogLayoutChanged
    | InputRelayed
    | JobCancelled
    | JobHeld
    | JobReleased
    | JobPriorityChanged
    | JobStopRequested
    | RequestRejected
    | SchedulingCycleCompleted
    | UsageCharged
    | PlacementCycleCompleted
    | JobScheduled
    | JobResized
    | PlacementBlocked
    | JobUnschedulable
    | ConfigRejected
    | JobDependencyNeverSatisfied
    | JobRequeued
    | PreemptionRequested
    | JobPreempted
    | JobCheckpointed
    | JobStepStarted
    | JobStepEnded
    | JobStarted
    | JobSucceeded
    | JobFailed
    | NodeRegistered
    | NodeReady
    | NodeCordoned
    | NodeUncordoned
    | NodeDraining
    | JobDrainPlanned
    | NodeTaintsChanged
    | NodeDatasetsChanged
    | NodeOvercommitChanged
    | NodeMemoryPressure
    | NodeLost
    | NodeRemoved
    | ClockTicked
    | LeadershipClaimed
)

EVENT_TYPES: dict[str, type[Event]] = {
    cls.__struct_config__.tag: cls  # type: ignore[misc]
    for cls in AnyEvent.__args__  # type: ignore[attr-defined]
}

# What ``from events.catalogue import *`` (events/__init__.py) gives: every name above but the modules.
__all__ = [name for name, value in list(globals().items())
           if not name.startswith("_") and name != "annotations" and not isinstance(value, ModuleType)]
