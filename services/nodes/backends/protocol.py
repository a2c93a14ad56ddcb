"""What an execution backend is to Horizon: a part that offers nodes and runs what is placed on them,
talking to the rest through the log alone (docs/backends.md).

The contract, in events (``events/catalogue.py``), is the node agent's, unchanged:

* **nodes in**: ``NodeRegistered`` for each node it offers (``backend`` names it: "" the node agent,
  "slurm" ...), again whenever a node's capacity or devices change (the id digests the body, so an
  unchanged node is stored once), and a heartbeat per node on ``horizon.hb.<node>``; a node its own
  system takes out of service is drained through inventory (``NodeCommandIssued`` drain / uncordon,
  user ``slurm``) like an operator's;
* **bind**: it follows the log and takes the ``JobScheduled`` whose first allocation is on one of its
  nodes (``AgentCore.mine``), with the nodes, CPUs, memory and devices placement chose; it also takes
  ``JobStopRequested`` (a cancel: stop, report ``JobCancelled``), ``PreemptionRequested`` (checkpoint
  signal, then stop within the grace, report ``JobPreempted``) and endings decided by others (stop
  silently);
* **status out**: ``JobStarted`` when the job runs, then exactly one of ``JobSucceeded``,
  ``JobFailed`` (exit code, reason), ``JobCancelled``, ``JobPreempted``, each with the id
  ``agent/<Type>/<job>/<attempt>`` so that a report sent twice is stored once;
* **restart**: it catches up with the log, adopts what still runs (never starting an attempt twice),
  and reports what ended or was lost while it was away (``AgentCore.resume``).

``NodeAgent`` (``services/nodes/agent/app.py``) is the first implementation, over processes on its own
machine (``ProcessExecutor``) or simulated jobs; the Slurm backend (``services/nodes/backends/slurm/``) is the
same agent over a Slurm cluster's executor, plus a watch of the cluster's nodes.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

__all__ = ["Backend"]


class Backend(Protocol):
    """A running execution backend (see the module doc for its events)."""

    ready: asyncio.Event  # set once it has registered its nodes and caught up with the log

    async def start(self) -> None:
        """Register the nodes, catch up with the log, adopt or report what it finds, follow the log."""
        ...

    async def stop(self) -> None:
        """Stop following the log; jobs a detached backend runs (Slurm's, supervised processes) run on."""
        ...
