"""How big each benchmark of ``horizon bench`` runs: the full sizes, or ``--quick``; and ``--scale``'s."""

from __future__ import annotations

__all__ = ["Sizes", "ScaleSizes"]


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
        self.partition_cases: tuple[int, ...] = (1, 2, 4)


class ScaleSizes:
    """``horizon bench --scale``: the 100k-GPU cluster (12,500 nodes x 8 GPUs, a backlog of 1,000,000),
    the curves' grid (nodes x backlog), and the partitions' run; ``quick``: a smoke run of about a minute."""

    def __init__(self, quick: bool = False, nodes: tuple[int, ...] | None = None,
                 backlog: tuple[int, ...] | None = None) -> None:
        self.quick = quick
        self.grid_nodes = nodes or ((100, 200) if quick else (1_000, 4_000, 12_500))
        self.grid_backlog = backlog or ((2_000, 5_000) if quick else (50_000, 250_000, 1_000_000))
        # the loaded cluster of the scale figures: the grid's largest cell
        self.nodes = max(self.grid_nodes)
        self.backlog = max(self.grid_backlog)
        self.latency_jobs = 50 if quick else 300
        self.partitions = Sizes(quick)
        self.partitions.nodes = 100 if quick else 1_000
        self.partitions.backlog = 2_000 if quick else 50_000

    def cells(self) -> list[tuple[int, int]]:
        return [(n, b) for n in self.grid_nodes for b in self.grid_backlog]
