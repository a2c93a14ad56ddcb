"""The partitions a stock ``horizon up`` has: ``main`` and, by the kinds of its own nodes, ``gpu`` and ``cpu``.

``horizon up`` publishes them as the operator would (``PartitionConfigured`` on
``horizon.in._admin.partition``, ``user`` ``horizon up``), so that a stock install behaves as a
Slurm site does: every job has a partition, ``sinfo`` lists them, and a script's ``-p gpu`` runs on
the GPU nodes (a name no stock partition has runs in ``main`` with a warning):

``main``   every node (``ALL``, so nodes that register later join it); the default partition
``gpu``    the nodes with GPUs, when there are any
``cpu``    the nodes without, when the cluster has both kinds

The log decides what is published, read at every start (``publish_stock``): a partition an
operator has configured (or removed) is never touched again, since the last
``PartitionConfigured`` of its name is the operator's; one that ``horizon up`` published itself
and that still says what it would say is not published again; one ``horizon up`` published that
no longer matches its nodes (a development cluster started with another shape) is published anew.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from events import catalogue as c
from events.base import Event
from events.codec import encode
from events.subjects import admin_subject
from services.nodes.spec import NodeSpec
from services.domain.hostlist import compress
from services.domain.protocol import Record
from services.runtime.follow import each, read_through
from services.runtime.jetstream import JetStreamLog

__all__ = ["STOCK_USER", "stock_partitions", "publish_stock"]

STOCK_USER = "horizon up"  # the user of the partitions horizon up publishes: whoever else configured one is an operator


def stock_partitions(nodes: Sequence[NodeSpec]) -> list[c.PartitionConfigured]:
    """The stock partitions of a cluster of ``nodes`` (this ``horizon up``'s own)."""
    out = [c.PartitionConfigured(name="main", nodes=["ALL"], default=True, user=STOCK_USER)]
    gpu = [n.name for n in nodes if n.gpus]
    cpu = [n.name for n in nodes if not n.gpus]
    if gpu:
        out.append(c.PartitionConfigured(name="gpu", nodes=[compress(gpu)], user=STOCK_USER))
    if gpu and cpu:
        out.append(c.PartitionConfigured(name="cpu", nodes=[compress(cpu)], user=STOCK_USER))
    return out


def _same(a: c.PartitionConfigured, b: c.PartitionConfigured) -> bool:
    """Whether two configurations say the same (their envelopes aside)."""
    fields = [f for f in c.PartitionConfigured.__struct_fields__
              if f not in ("id", "ts", "causation_id", "correlation_id", "source", "v", "type")]
    return all(getattr(a, f) == getattr(b, f) for f in fields)


async def publish_stock(url: str, nodes: Sequence[NodeSpec]) -> list[str]:
    """Publish the stock partitions that the log does not already say (see the module's docstring);
    the names published. ``url``: the operator's (``admin`` under ``--auth``)."""
    log = await JetStreamLog.open(url, name="horizon-up-partitions", create=False)
    try:
        last: dict[str, c.PartitionConfigured] = {}

        def note(_record: Record, event: Event) -> None:
            if isinstance(event, c.PartitionConfigured):
                last[event.name] = event

        await read_through(log, each(note), subjects=(admin_subject("partition"),))
        published = []
        for part in stock_partitions(nodes):
            before = last.get(part.name)
            if before is not None and (before.user != STOCK_USER or _same(before, part)):
                continue  # an operator's, or already what it would be
            body = encode(part)
            await log.publish(admin_subject("partition"), body,
                              msg_id=f"horizon-up/partition/{part.name}/{hashlib.sha1(body).hexdigest()[:16]}")
            published.append(part.name)
        return published
    finally:
        await log.close()
