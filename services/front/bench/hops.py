"""Where a latency job's time went, hop by hop, from the log's own timestamps.

A job's way to ``JobScheduled`` crosses three services, each a record in the log: its submission
(the input) -> submission's ``JobAccepted`` -> the scheduling cycle that picked it (the record a
``JobScheduled`` names as its ``basis_seq``) -> placement's ``JobScheduled``. The stream stamps
each record as it stores it, one clock for all, so the differences are the time each service took
to read, fold, decide and publish, whatever the harness's own clock and reading delays.
"""

from __future__ import annotations

from typing import Any

from events import catalogue as c
from events.codec import DecodeError, decode
from services.front.sim.metrics import percentile
from services.runtime.jetstream import JetStreamLog

__all__ = ["latency_hops"]

HOPS = ("submission", "scheduling", "placement")


async def latency_hops(log: JetStreamLog, from_seq: int, prefix: str) -> dict[str, Any]:
    """p50/p99/max of each hop for the jobs whose ids start with ``prefix``, read from ``from_seq``;
    ``jobs`` says how many had all three hops in the log."""
    times: dict[int, float] = {}  # seq -> stored time, of the records a hop may start from
    submitted: dict[str, float] = {}
    accepted: dict[str, float] = {}
    scheduled: dict[str, tuple[int, float]] = {}
    async for batch in log.read(from_seq):
        for r in batch:
            times[r.seq] = r.time
            try:
                event = decode(r.data)
            except DecodeError:
                continue
            job_id = getattr(event, "job_id", "")
            if not job_id.startswith(prefix):
                continue
            if isinstance(event, c.JobSubmitted):
                submitted.setdefault(job_id, r.time)
            elif isinstance(event, c.JobAccepted):
                accepted.setdefault(job_id, r.time)
            elif isinstance(event, c.JobScheduled) and event.attempt == 1:
                scheduled.setdefault(job_id, (event.basis_seq or 0, r.time))
    samples: dict[str, list[float]] = {hop: [] for hop in HOPS}
    for job_id, (basis, placed) in scheduled.items():
        if job_id not in submitted or job_id not in accepted or basis not in times:
            continue
        samples["submission"].append(accepted[job_id] - submitted[job_id])
        samples["scheduling"].append(times[basis] - accepted[job_id])
        samples["placement"].append(placed - times[basis])
    out: dict[str, Any] = {"jobs": len(samples["placement"])}
    for hop, values in samples.items():
        ms = [v * 1000 for v in values] or [0.0]
        out[hop] = {"p50_ms": round(percentile(ms, 50), 2), "p99_ms": round(percentile(ms, 99), 2),
                    "max_ms": round(max(ms), 2)}
    return out
