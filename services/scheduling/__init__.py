"""The scheduling service: when to run a cycle, requeues, dependency verdicts, timeouts.

``core.py`` is its pure core: ``SchedulingCore`` folds the scheduler's state
with the shared ``QueueFold`` (``services/domain/queue/``) and adds ``decide``;
``part.py`` registers it with the host. The queue's order, why a job waits,
fair share, quotas and the policy live in ``services/domain/``, because
preemption and the projections need them too. Imports only ``events``,
``services.domain`` and ``services.runtime``, never another service.
"""
