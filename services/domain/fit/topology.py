"""Which jobs run in which topology domain: a node, or the nodes sharing a label value (``rack``,
``nvlink-domain``). Read by the inter-job affinity filters; jobs placed earlier in the same decision
count. Pure."""

from __future__ import annotations

from events import catalogue as c
from services.domain.cluster import Cluster

__all__ = ["Topology", "labels_match", "labels_text"]


class Topology:
    """Which jobs run in which topology domain (a node, or the nodes sharing a label value), for the
    inter-job affinity filters; jobs placed earlier in the same decision count."""

    def __init__(self, cluster: Cluster, specs: dict[str, c.JobSpec]) -> None:
        self.cluster = cluster
        self.on_node: dict[str, list[c.JobSpec]] = {}
        for name in sorted(cluster.nodes):
            node = cluster.nodes[name]
            self.on_node[name] = [specs[j] for j in node.jobs if j in specs]
        self._domains: dict[str, dict[str, list[c.JobSpec]]] = {}

    def add(self, node: str, spec: c.JobSpec) -> None:
        self.on_node.setdefault(node, []).append(spec)
        self._domains.clear()

    @property
    def has_anti_affinity(self) -> bool:
        return any(s.affinity and s.affinity.job_anti_affinity for specs in self.on_node.values() for s in specs)

    def domain(self, node: str, key: str) -> str | None:
        if key == "node":
            return node
        found = self.cluster.nodes.get(node)
        return found.labels.get(key) if found is not None else None

    def members(self, key: str, value: str) -> list[c.JobSpec]:
        by_value = self._domains.get(key)
        if by_value is None:
            by_value = {}
            for name, specs in self.on_node.items():
                d = self.domain(name, key)
                if d is not None and specs:
                    by_value.setdefault(d, []).extend(specs)
            self._domains[key] = by_value
        return by_value.get(value, [])

    def anyone(self, labels: tuple[tuple[str, str], ...]) -> bool:
        return any(labels_match(s.labels, labels) for specs in self.on_node.values() for s in specs)

    def anti_terms(self) -> list[tuple[str, tuple[tuple[str, str], ...], str]]:
        """(node, labels to match, topology key) of every anti-affinity term of a running job."""
        out = []
        for name, specs in self.on_node.items():
            for s in specs:
                for t in (s.affinity.job_anti_affinity if s.affinity else ()):
                    out.append((name, tuple(sorted(t.match_labels.items())), t.topology_key))
        return out


def labels_match(labels: dict[str, str] | tuple[tuple[str, str], ...], wanted: tuple[tuple[str, str], ...]) -> bool:
    have = dict(labels) if isinstance(labels, tuple) else labels
    return all(have.get(k) == v for k, v in wanted)


def labels_text(labels: tuple[tuple[str, str], ...]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels) or "any labels"
