"""Preemption's fold and victim choice, shared by the preemption service and the projections' dry run. Pure.

Imports only ``events`` and the rest of ``services.domain``.
"""
