"""Score plugins: each rates a node that passed every filter in [0, 1], higher is better.

One plugin per file or per small group. Each has a ``name`` (its weight's key in a profile), a
``default_weight`` and ``score(cycle)``; the node's score is the profile's weighted sum over
``SCORES`` in ``services/domain/fit/framework.py``, which is also where the names come from. Worked
tables in ``tests/domain/test_placement_plugins.py``. Pure: no I/O, no clock.
"""
