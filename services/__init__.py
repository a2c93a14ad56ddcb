"""Horizon's parts, in layers (docs/architecture.md, "The layers"; tests/contract/test_walls.py enforces them).

* ``domain/``: the shared, pure domain: the log's record and the core protocol,
  the job table, the cluster ledger, fair share, quotas, the priority policy,
  dependencies, node fit and the placement plugins, the scheduler's fold
  (``domain/queue/``) and preemption's fold and planner (``domain/preemption/``).
  It imports only ``events``.
* ``runtime/``: plumbing that serves and never knows whom: the log port and
  its JetStream adapter, the pull reader, the service runner, leases,
  snapshots, telemetry, the bundled nats-server, ``ServicePart``. It imports
  ``events`` and ``domain``, never a service, the CLI, a bench or the simulator.
* the six services, ``submission/``, ``scheduling/``, ``placement/``,
  ``preemption/``, ``inventory/`` and ``agent/``: each a pure ``core.py`` and
  its adapter; each imports ``events``, ``domain`` and ``runtime``, never
  another service, and registers what is special about it in ``part.py``.
* the host, on top: ``host/`` (the registry of services, the in-process stack,
  the supervisor, the whole-log checker), ``cli/``, ``bench/``, ``sim/``. It
  may import anything; nothing imports it.

``projections/`` (beside the services) imports ``events``, ``domain`` and ``runtime``.
"""
