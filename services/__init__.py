"""Horizon's parts, in layers: a layer is a folder (docs/architecture.md, "The layers";
tests/contract/test_walls.py enforces them). Bottom to top:

* ``domain/``: the shared, pure domain: the log's record and the core protocol,
  a decision's envelope (``envelope.py``: its deterministic id), the job table,
  the cluster ledger, fair share, quotas, the priority policy, dependencies,
  node fit and the placement plugins, the scheduler's fold (``domain/queue/``)
  and preemption's fold and planner (``domain/preemption/``). It imports only
  ``events``.
* ``runtime/``: plumbing that serves and never knows whom: the log port and
  its JetStream and memory adapters, the pull reader, the service runner,
  leases, snapshots, telemetry, the bundled nats-server, ``ServicePart``. It
  imports ``events`` and ``domain``.
* the services, six folders: the five decision services ``submission/``,
  ``scheduling/``, ``placement/``, ``preemption/`` and ``inventory/`` (each a
  pure ``core.py``, its adapter, and ``part.py`` registering what is special
  about it), and ``quota/``, the quota provider that publishes accounts'
  limits kept elsewhere. Each imports ``events``, ``domain`` and ``runtime``,
  never another service.
* ``nodes/``: the node model (``spec.py``), the node agent (``agent/``) and the
  backends it runs jobs through (``backends/``: processes on this machine, or
  a Slurm cluster). It imports ``events``, ``domain`` and ``runtime``.
* ``front/``, on top: the registry of services, the client, Slurm's face, the
  audit, the simulator, the benches and the host (the in-process stack, the
  supervisor, the dashboard); it may import any layer below. ``front/cli/`` is
  the ``horizon`` command's click wiring, which nothing imports.

``projections/`` (beside the services and the nodes) imports ``events``, ``domain`` and ``runtime``.
"""
