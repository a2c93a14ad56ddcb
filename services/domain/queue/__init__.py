"""The scheduler's fold, shared: the queue and its order, why a job waits, snapshots. Pure.

Imports only ``events`` and the rest of ``services.domain``. The scheduling
service, the preemption service and the projections fold the same ``QueueFold``;
only the scheduling service decides from it (``services/scheduling/core.py``).
"""
