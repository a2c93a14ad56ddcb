"""The nodes read model: every node, its state, capacity, and what is allocated on it (like sinfo).

Nodes are few (thousands at most), so this view is an in-memory fold of the
log (the same ``Cluster`` and job table the services use), rebuilt from
sequence 1 at start and served on ``horizon.query.nodes``.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from services.runtime.consume import readable
from services.runtime.log import EventLog, Record
from services.state.cluster import Cluster, fold_cluster
from services.state.jobs import JobTable

__all__ = ["NodesView"]


class NodesView:
    def __init__(self, log_: EventLog, nc: Any) -> None:
        self.log = log_
        self.nc = nc
        self.cluster = Cluster()
        self.jobs = JobTable()
        self.last_seq = 0
        self._follower: Any = None
        self._sub: Any = None

    async def apply(self, batch: list[Record]) -> None:
        for record, event in readable(batch, self.last_seq):
            self.last_seq = record.seq
            if event is not None:
                fold_cluster(self.cluster, self.jobs, event, record.seq, record.time)

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for node in self.cluster.sorted_nodes():
            models = sorted({f"{d.type}-{d.variant}" if d.variant else d.type for d in node.gpus.values()})
            out.append({
                "node": node.name,
                "state": node.status,
                "cpus_milli": node.cpus_milli,
                "cpus_used_milli": node.used_cpus_milli,
                "memory_bytes": node.memory_bytes,
                "memory_used_bytes": node.used_memory_bytes,
                "gpus": len(node.gpus),
                "gpus_used": len(node.used_devices),
                "gpu_types": models,
                "jobs": sorted(node.jobs),
                "labels": node.labels,
                "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in node.taints],
            })
        return out

    async def start(self) -> None:
        self._follower = await self.log.follow(self.apply, from_seq=1, subjects=("horizon.evt.>",))

        async def answer(msg: Any) -> None:
            if msg.reply:
                await self.nc.publish(msg.reply, json.dumps({"nodes": self.rows(), "last_seq": self.last_seq}).encode())

        self._sub = await self.nc.subscribe("horizon.query.nodes", queue="projections", cb=answer)

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
        if self._follower is not None:
            await self._follower.stop()
