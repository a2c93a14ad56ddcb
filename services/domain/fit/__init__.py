"""Node fit: whether a job fits on a node, with which devices, and how well. Pure, shared by placement,
preemption and the projections' "why does it wait".

``framework.py`` holds the ``Filter`` and ``Score`` protocols and the one registry of plugins (the
profile's weight names and ``NEVER_FILTERS`` derive from it); ``filters/`` and ``scores/`` the plugins;
``node.py`` runs them (``Fitter``, ``fit_node``); ``cycle.py`` what one node is judged against (the
overlay of a decision, the cycle state); ``context.py`` the job's context and held room; ``topology.py`` who runs where; ``profile.py`` the
placement profiles. No I/O, no clock, no service imports: what to do with a fit (backfilling,
reservations, gangs) is ``services/placement/``.
"""
