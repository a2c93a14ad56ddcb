"""The preemption service's snapshots: restart from a snapshot + the tail is exactly a full replay.

The property of the other cores' snapshots (tests/services/test_snapshot_scheduling.py, whose logs and
check this reuses): for a log and a cut k, ``load(dump(state after k))`` folded on with records k+1..N
ends in the state a fold of 1..N reaches (equal ``dump`` bytes), and decides alike after every record
of the tail. One log really preempts (victims stopped, held nodes, the rate window, a configuration
and a rejected one); every cut of it is checked.
"""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from events import catalogue as c
from services.preemption.core import PreemptionCore
from services.front.sim.traces import SimJob
from tests.services.test_preemption import HOUR, _sim
from tests.services.test_snapshot_scheduling import (
    PROPERTY, HandLog, action, check_restart_equals_full_replay, fold, pause, sim_job, simulated_log, trace,
)


@pytest.fixture(scope="module")
def preempting_log() -> list:
    jobs = [SimJob("wide", 0.0, 4 * HOUR, 4 * HOUR, gpus=8)]
    jobs += [SimJob(f"small{i}", 100.0 * i, 4 * HOUR, 4 * HOUR, gpus=1) for i in range(8)]
    jobs += [SimJob("urgent", 1000.0, 600.0, 600.0, gpus=4, priority_class="critical")]
    jobs += [SimJob("high", 1200.0, 600.0, 600.0, gpus=8, priority_class="high")]
    config = [("preemption", c.PreemptionConfigured(grace_period_s=10.0, per_minute=30)),
              ("preemption", c.PreemptionConfigured(victims="nonsense"))]
    _run, events, records = _sim(jobs, config=config)
    assert any(isinstance(e, c.PreemptionRequested) for e in events)
    assert any(isinstance(e, c.ConfigRejected) and e.source == "preemption" for e in events)
    return records


def test_restart_at_every_cut_of_a_preempting_log_equals_a_full_replay(preempting_log):
    core = PreemptionCore(virtual_time=True)
    seen = set()
    state = core.initial()
    for k in range(len(preempting_log) + 1):
        check_restart_equals_full_replay(core, preempting_log, k)  # type: ignore[arg-type]
        if k < len(preempting_log):
            state = fold(core, state, preempting_log[k:k + 1])  # type: ignore[arg-type]
            seen.update(name for name in ("stopping", "recent", "held", "blocked", "candidates", "config_rejections")
                        if getattr(state, name))
    assert seen == {"stopping", "recent", "held", "blocked", "candidates", "config_rejections"}


def test_a_snapshot_round_trips_byte_for_byte(preempting_log):
    core = PreemptionCore(virtual_time=True)
    state = fold(core, core.initial(), preempting_log)  # type: ignore[arg-type]
    data = core.dump(state)
    loaded = core.load(data)
    assert loaded is not None and core.dump(loaded) == data
    assert loaded.config == state.config and dict(loaded.config.rules) == dict(state.config.rules)
    assert loaded.sched.seq == state.sched.seq and set(loaded.sched.jobs.jobs) == set(state.sched.jobs.jobs)
    assert core.decide(loaded) == core.decide(state)


def test_another_configuration_or_format_is_refused(preempting_log):
    core = PreemptionCore(virtual_time=True)
    data = core.dump(fold(core, core.initial(), preempting_log[:60]))  # type: ignore[arg-type]
    assert core.load(data) is not None
    assert PreemptionCore(virtual_time=True, max_preemptors_per_round=3).load(data) is not None  # decides only
    assert PreemptionCore(virtual_time=False).load(data) is None
    assert core.load(b"\x93not a snapshot") is None
    fields = msgspec.msgpack.decode(data)
    fields[0] = 99
    assert core.load(msgspec.msgpack.encode(fields)) is None
    state = core.initial()
    state.something_new = 1  # type: ignore[attr-defined]
    with pytest.raises(AssertionError, match="something_new"):
        core.dump(state)


@PROPERTY
@given(jobs=st.lists(sim_job, min_size=1, max_size=12),
       deps=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11),
                               st.sampled_from(["after-ok", "after-any", "after-not-ok"])), max_size=4),
       cuts=st.lists(st.integers(0, 10**6), min_size=1, max_size=3), quotas=st.booleans())
def test_restart_from_a_snapshot_of_a_simulated_log_equals_a_full_replay(jobs, deps, cuts, quotas):
    records = simulated_log(trace(jobs, deps), "fcfs", quotas)
    core = PreemptionCore(virtual_time=True)
    for cut in cuts:
        check_restart_equals_full_replay(core, records, cut % (len(records) + 1))  # type: ignore[arg-type]


@PROPERTY
@given(actions=st.lists(st.tuples(action, pause), min_size=40, max_size=200), cut=st.integers(0, 10**6))
def test_restart_from_a_snapshot_of_a_random_log_equals_a_full_replay(actions, cut):
    log = HandLog()
    for a, dt in actions:
        log.act(a, dt)
    core = PreemptionCore()
    check_restart_equals_full_replay(core, log.records, cut % (len(log.records) + 1))  # type: ignore[arg-type]
