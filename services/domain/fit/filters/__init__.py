"""Filter plugins: a node failing any of them cannot take the job, and the first failure is its reason.

One plugin per file or per small group. Each has a ``name`` (the ``filter`` of a ``BlockReason``),
``never`` (its failure does not go away when jobs end), ``check(cycle)`` returning ``None`` (pass) or
the failure's detail, and ``explain(detail, request)`` for people. Their order is ``FILTERS`` in
``services/domain/fit/framework.py``. Pure: no I/O, no clock.
"""
