"""The audit, as a library: the log read whole, the cores configured as the live services ran them, each
decision replayed from its ``basis_seq`` (``services/runtime/replay.py``), the report and one job's story.

``horizon audit`` (``services/front/cli/audit.py``) prints it; the dashboard's audit page and the
benches ask it too (docs/audit.md).
"""
