"""How big each benchmark of ``horizon bench`` runs: the full sizes, or ``--quick``."""

from __future__ import annotations


__all__ = ["Sizes"]


class Sizes:
    def __init__(self, quick: bool = False) -> None:
        self.intake_jobs = 5_000 if quick else 50_000
        self.nodes = 100 if quick else 1_000
        self.backlog = 5_000 if quick else 50_000
        self.replay_events = 50_000 if quick else 1_000_000
        self.latency_jobs = 200 if quick else 2_000
        self.memory_jobs = (10_000, 100_000) if quick else (100_000, 1_000_000)
        self.snapshot_events = (5_000, 10_000) if quick else (20_000, 50_000, 100_000, 200_000)
        self.snapshot_tail = 1_000 if quick else 10_000
        self.snapshot_blob_mb = 4 if quick else 50
