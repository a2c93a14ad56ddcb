"""The preemption service: which running jobs to stop for a blocked job, within the rate limits.

``core.py`` is its pure core (``decide``: the requests and the rate limits);
the fold and the choice of victims (``PreemptionPlanner``) live in
``services/domain/preemption/``, shared with the projections' dry run;
``part.py`` registers it with the host. Imports only ``events``,
``services.domain`` and ``services.runtime``, never another service.
"""
