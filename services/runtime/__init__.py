"""The plumbing every part runs on, which serves and never knows whom.

The ``EventLog`` port (``log.py``) and its two adapters (``jetstream.py`` on NATS JetStream, with
``natsclient.py``, ``publish_pipeline.py`` and ``jetstream_snapshots.py``; ``memory_log.py`` for tests
and the simulator), the pull reader (``pullreader.py``), the one reading loop every reader runs
(``follow.py``: to the end, caught up, then the live tail) and the decoding it applies
(``consume.py``), the ``ServiceRunner`` every decision service runs on (``service.py``) and the
``ServicePart`` a service registers itself with (``parts.py``), leader leases (``lease.py``),
snapshots (``snapshots.py``), the replay that audits a log (``replay.py``), telemetry
(``telemetry.py``) and the bundled nats-server (``natsserver.py``, ``natscluster.py``).

It imports ``events/`` and the pure protocol of ``services/domain/`` only: never a service, the CLI,
the host, the benchmarks or the simulator (``tests/contract/test_walls.py``). What is special about a service
is declared by the service (its core's attributes, its part), never branched on by name here.
"""
