"""The shared, pure domain: what more than one service or projection folds or computes.

Here: the core protocol and the log's record (``protocol.py``), the job state
machine and table (``jobs.py``), the cluster ledger (``cluster.py``), taints,
fair share (``fairshare.py``), quotas (``quotas.py``), the priority policy
(``policy.py``), dependencies, bounded echoes of operator input
(``quoting.py``), configuration answers (``config.py``), node fit and the
placement plugins (``fit/``), the scheduler's fold (``queue/``: shared by
scheduling, preemption and the projections) and preemption's fold and victim
planner (``preemption/``: shared by the preemption service and the dry run).

Must not: import anything of ours but ``events``; do I/O (asyncio, NATS,
SQLite, files, processes); read a clock or draw random numbers ("now" is the
triggering event's time, passed in). A rule that only one service uses stays
in that service.
"""
