"""The dashboard's charts (docs/dashboard.md): decisions, queue length, GPU use and waits, by 5 s
buckets of log time, for the operator or one tenant (``Series.view``)."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import msgspec

__all__ = ["BUCKET_S", "BUCKETS", "Charted", "Series", "charted"]

BUCKET_S = 5.0  # charts: one point per 5 s of log time
BUCKETS = 240  # 20 minutes of them


class Charted(msgspec.Struct):
    """What the charts read of a record's body (``Series.event``); the rest is skipped unread (a whole
    JSON decode of every record cost 1.8% of an idle ``horizon up``'s time)."""

    type: Any = None
    source: Any = None
    basis_seq: Any = None
    job_id: Any = None
    spec: Any = None

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)


charted = msgspec.json.Decoder(Charted).decode


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    k = max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))
    return ordered[k]


class Series:
    """The charts' data, by 5 s buckets of log time: decisions recorded (the same rule as the
    decisions table, projections/jobs.py), queue length and GPU use at each refresh, and the waits
    of the jobs placed (accepted, or requeued, to scheduled)."""

    def __init__(self) -> None:
        self.decisions: dict[int, int] = {}
        self.samples: deque[dict[str, Any]] = deque(maxlen=BUCKETS * 4)
        self.waits: deque[tuple[float, float, str | None]] = deque(maxlen=20_000)
        self.accepted: dict[str, tuple[float, str | None]] = {}  # job -> (accepted or last ended, tenant)
        self.last_ts = 0.0

    def event(self, body: dict[str, Any] | Charted, ts: float, subject: str) -> None:
        self.last_ts = max(self.last_ts, ts)
        kind = body.get("type")
        source = str(body.get("source") or "")
        if body.get("basis_seq") is not None and source and not source.startswith(("agent", "clock")):
            bucket = int(ts // BUCKET_S)
            self.decisions[bucket] = self.decisions.get(bucket, 0) + 1
            for old in [b for b in self.decisions if b < bucket - BUCKETS]:
                del self.decisions[old]
        job = body.get("job_id")
        if not isinstance(job, str):
            return
        if kind == "JobAccepted":
            spec = body.get("spec") or {}
            self.accepted[job] = (ts, spec.get("tenant") if isinstance(spec, dict) else None)
        elif kind == "JobScheduled" and job in self.accepted:
            since, tenant = self.accepted[job]
            self.waits.append((ts, max(0.0, ts - since), tenant))
        elif kind in ("JobRequeued", "JobPreempted") and job in self.accepted:
            self.accepted[job] = (ts, self.accepted[job][1])
        elif kind in ("JobSucceeded", "JobFailed", "JobCancelled", "JobTimedOut", "JobRejected"):
            self.accepted.pop(job, None)

    def sample(self, ts: float, queued: dict[str | None, int], busy: int, total: int) -> None:
        self.samples.append({"t": ts, "queued": queued, "busy": busy, "total": total})

    def view(self, tenant: str | None) -> dict[str, Any]:
        end = int((self.last_ts or time.time()) // BUCKET_S)
        start = end - BUCKETS + 1
        decisions = [[b * BUCKET_S, self.decisions.get(b, 0) / BUCKET_S] for b in range(start, end + 1)]
        by_bucket: dict[int, dict[str, Any]] = {}
        for s in self.samples:
            by_bucket[int(s["t"] // BUCKET_S)] = s
        queue, util = [], []
        for b, s in sorted(by_bucket.items()):
            if b < start:
                continue
            queue.append([s["t"], s["queued"].get(tenant, 0) if tenant is not None else s["queued"].get(None, 0)])
            util.append([s["t"], s["busy"] / s["total"] if s["total"] else 0.0])
        waits: dict[int, list[float]] = {}
        for ts, wait, who in self.waits:
            if tenant is None or who == tenant:
                waits.setdefault(int(ts // BUCKET_S), []).append(wait)
        wait_rows = [[b * BUCKET_S, _pct(w, 0.5), _pct(w, 0.9), _pct(w, 0.99), len(w)]
                     for b, w in sorted(waits.items()) if b >= start]
        return {"bucket_s": BUCKET_S, "from": start * BUCKET_S, "to": (end + 1) * BUCKET_S,
                "decisions": decisions, "queue": queue, "utilisation": util, "wait": wait_rows}
