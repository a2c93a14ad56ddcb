"""Test helpers: drive a pure core with events as if they came from the log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from events import catalogue as c
from events.codec import encode
from events.subjects import admin_subject, event_subject, input_subject
from services.domain.protocol import Record
from services.runtime.service import fold_record


class Feed:
    """A pure core plus a fake log position: ``input``/``evt`` fold, ``settle`` decides and folds the output."""

    def __init__(self, core: Any, t0: float = 1_000_000.0) -> None:
        self.core = core
        self.state = core.initial()
        self.seq = 0
        self.time = t0
        self.records: list[Record] = []

    def _fold(self, subject: str, event: c.Event, dt: float) -> c.Event:
        self.seq += 1
        self.time += dt
        record = Record(self.seq, subject, encode(event), self.time, {"Nats-Msg-Id": event.id or f"m{self.seq}"})
        self.records.append(record)
        self.state, decoded, error = fold_record(self.core, self.state, record)
        assert error is None, error
        return decoded

    def input(self, tenant: str, verb: str, event: c.Event, dt: float = 1.0) -> None:
        self._fold(input_subject(tenant, verb), event, dt)

    def admin(self, verb: str, event: c.Event, dt: float = 1.0) -> None:
        self._fold(admin_subject(verb), event, dt)

    def evt(self, service: str, event: c.Event, dt: float = 1.0) -> None:
        if not event.correlation_id:
            import msgspec

            key = getattr(event, "job_id", None) or getattr(event, "node", None) or "x"
            event = msgspec.structs.replace(event, correlation_id=key)
        self._fold(event_subject(service, event), event, dt)

    def decide(self) -> list[c.Event]:
        return self.core.decide(self.state)

    def settle(self) -> list[c.Event]:
        """Decide, fold the decisions back as the log would, and check the core then rests."""
        out = self.decide()
        for event in out:
            self.evt(self.core.name, event, dt=0.001)
        return out


def node(name: str, gpus: int = 8, gpu_type: str = "a100", variant: str | None = None, cpus: int = 64,
         memory: int = 512 * 2**30, numa_split: bool = True) -> c.NodeRegistered:
    devices = [
        c.GpuDevice(id=f"gpu{i}", type=gpu_type, variant=variant, memory_bytes=80 * 2**30,
                    numa_node=(0 if i < gpus // 2 else 1) if numa_split else 0)
        for i in range(gpus)
    ]
    return c.NodeRegistered(node=name, cpus_milli=cpus * 1000, memory_bytes=memory, gpus=devices,
                            correlation_id=name, source=f"agent/{name}")


def spec(tenant: str = "acme", gpus: int = 1, **kw: Any) -> c.JobSpec:
    return c.JobSpec(tenant=tenant, gpus=gpus, **kw)


def accepted(job_id: str, seq_hint: int = 0, **kw: Any) -> c.JobAccepted:
    return c.JobAccepted(id=f"submission/JobAccepted/{job_id}", job_id=job_id, spec=spec(**kw), correlation_id=job_id,
                         source="submission", basis_seq=max(1, seq_hint))


def ready(f: Feed, *regs: c.NodeRegistered) -> None:
    """Register each node and mark it ready, as its agent and inventory would."""
    for reg in regs:
        f.evt("agent", reg)
        f.evt("inventory", c.NodeReady(node=reg.node, basis_seq=1))


def placement_cycle(f: Feed, n: int, candidates: list[str], dt: float = 1.0) -> list[c.Event]:
    """Scheduling cycle ``n`` offers ``candidates``; the core's decisions, folded back."""
    f.evt("scheduling", c.SchedulingCycleCompleted(cycle=n, candidates=candidates, basis_seq=f.seq), dt=dt)
    return f.settle()


def job_file(state_dir: Path | str, job_id: str, attempt: int, name: str) -> Path:
    """A file of an attempt's own folder (its default output, its checkpoint) as the process executor on
    ``state_dir`` (a stack's ``<data dir>/jobs``) keeps it: in the jobs' spool, not the data dir."""
    from services.nodes.backends.process.job_files import default_spool, spool_name

    return default_spool(Path(state_dir)) / spool_name(job_id, attempt) / name
