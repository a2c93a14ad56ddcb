"""The preemption service's state as bytes and back: its snapshots (services/runtime/service.py reads
them). Pure.

Without a snapshot a restart folds the whole log through the preemption fold, which folds the
scheduler's ``QueueFold`` and its cluster ledger: 20-37 s at 1,000,000 queued jobs (in process, a busy
2-core machine, when it still kept a job table of its own). With one it folds only the records after it.

``dump`` writes every field of ``PreemptionState``: the scheduler's view as the scheduling snapshot
writes it (``QueueFold.dump``, ``services/domain/queue/codec.py``), which holds the one job table the
ledger follows too, its nodes as rows (``services/domain/job_rows.py``), and the rest as it is; it
refuses a state with a field it does not know, so a field added without a line here fails the tests
rather than a restart. Maps keep the order they were folded in and sets are written sorted, so equal
states give equal bytes. ``load`` returns None for another format or another configuration (the
fingerprint: this format, the inner scheduling snapshot's, virtual time), and the runner then folds
the whole log.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from types import MappingProxyType
from typing import Any

import msgspec

from events import catalogue as c
from services.domain.cluster import Node
from services.domain.job_rows import node_data, read_snapshot, restore_nodes
from services.domain.preemption.state import PreemptionConfig, PreemptionState
from services.domain.queue.fold import QueueFold

__all__ = ["SNAPSHOT_FORMAT", "dump", "load"]

SNAPSHOT_FORMAT = 7  # 2: its own table's queued jobs as rows of shared specs (services/domain/backlog_rows.py);
# 3: a job holding the very spec its scheduler's view holds is written as that; 4: the rows as columns;
# 5: both tables share equal specs (job_specs.SharedSpecJobs), a priority change's new spec too, so a
# changed job holds its view's very spec again (written as that: other bytes for the same state);
# 6: the table as job_rows.JobColumns with ``like`` (backlog_rows merged into it); 7: no table of its own
# (the ledger follows the scheduler's view's table, written with the view)

_FIELDS = frozenset({"seq", "now", "layout", "layout_seq", "relayed_seq", "sched", "jobs", "cluster", "config",
                     "blocked", "preempted", "checkpoint_ts", "stopping", "no_cascade", "recent", "candidates",
                     "blocked_seq", "round_ended", "running_by_class", "borrowed_running", "config_rejections",
                     "held"})
_CONFIG = ("rules", "victims", "grace_period_s", "max_preemptions", "per_minute", "per_account_per_minute")


class _Config(msgspec.Struct, array_like=True):
    rules: dict[str, tuple[str, ...]]
    victims: str
    grace_period_s: float
    max_preemptions: int
    per_minute: int
    per_account_per_minute: int


class _Snapshot(msgspec.Struct, array_like=True):
    format: int
    fingerprint: str
    counters: tuple[int, float, int, int, int, int]  # seq, now, layout, layout_seq, relayed_seq, borrowed_running
    sched: bytes  # the scheduler's view, a scheduling snapshot (the job table too)
    nodes: list[Node]
    config: _Config
    blocked: dict[str, c.PlacementBlocked]
    preempted: dict[str, int]
    checkpoint_ts: dict[str, float]
    stopping: dict[str, str]
    no_cascade: list[str]
    recent: list[tuple[float, str]]
    candidates: dict[int, list[str]]
    blocked_seq: dict[str, int]
    round_ended: dict[str, int]
    running_by_class: dict[str, int]
    config_rejections: dict[int, str]
    held: dict[str, list[str]]


def _check_fields(state: PreemptionState) -> None:
    unknown = set(vars(state)) - _FIELDS
    assert not unknown, f"preemption snapshot: PreemptionState has fields it does not write: {sorted(unknown)}"
    config = tuple(f.name for f in dataclasses.fields(PreemptionConfig))
    assert config == _CONFIG, f"preemption snapshot: PreemptionConfig's fields are {config}, it writes {_CONFIG}"


def dump(state: PreemptionState, queue: QueueFold, fingerprint: str) -> bytes:
    """The whole state, as bytes (``queue``: the fold of the scheduler's view, which writes it)."""
    _check_fields(state)
    cfg = state.config
    return msgspec.msgpack.encode([
        SNAPSHOT_FORMAT, fingerprint,
        (state.seq, state.now, state.layout, state.layout_seq, state.relayed_seq, state.borrowed_running),
        queue.dump(state.sched), node_data(state.cluster),
        [{k: tuple(v) for k, v in cfg.rules.items()}, cfg.victims, cfg.grace_period_s, cfg.max_preemptions,
         cfg.per_minute, cfg.per_account_per_minute],
        state.blocked, state.preempted, state.checkpoint_ts, state.stopping, sorted(state.no_cascade),
        list(state.recent), state.candidates, state.blocked_seq, state.round_ended, state.running_by_class,
        state.config_rejections, {node: sorted(jobs) for node, jobs in state.held.items()},
    ])


def load(data: bytes, queue: QueueFold, fingerprint: str) -> PreemptionState | None:
    """The state ``dump`` wrote, or None when it is from another format or configuration."""
    snap = read_snapshot(data, _Snapshot, SNAPSHOT_FORMAT, fingerprint)
    if snap is None:
        return None
    sched = queue.load(snap.sched)
    if sched is None:
        return None
    state = PreemptionState(sched)
    (state.seq, state.now, state.layout, state.layout_seq, state.relayed_seq,
     state.borrowed_running) = snap.counters
    restore_nodes(state.cluster, snap.nodes)
    cfg = snap.config
    state.config = PreemptionConfig(
        rules=MappingProxyType(cfg.rules), victims=cfg.victims, grace_period_s=cfg.grace_period_s,
        max_preemptions=cfg.max_preemptions, per_minute=cfg.per_minute,
        per_account_per_minute=cfg.per_account_per_minute)
    state.blocked, state.preempted, state.checkpoint_ts = snap.blocked, snap.preempted, snap.checkpoint_ts
    state.stopping, state.no_cascade, state.recent = snap.stopping, set(snap.no_cascade), deque(snap.recent)
    state.candidates, state.blocked_seq, state.round_ended = snap.candidates, snap.blocked_seq, snap.round_ended
    state.running_by_class, state.config_rejections = snap.running_by_class, snap.config_rejections
    state.held = {node: frozenset(jobs) for node, jobs in snap.held.items()}
    return state
