"""A ``SharedSpecJobs`` table holds one spec for jobs whose specs are equal (services/domain/job_specs.py),
never one for specs that differ, and a restored state shares them as the fold does: in placement,
scheduling, submission and preemption."""

from __future__ import annotations

import pytest

from events import catalogue as c
from services.front.registry import make_core
from services.placement.core import PlacementCore
from services.runtime.service import fold_record
from tests.helpers import Feed, accepted


def test_equal_specs_are_one_object_and_different_ones_stay_apart():
    f = Feed(PlacementCore())
    for j in ("a1", "a2", "a3"):
        f.evt("submission", accepted(j, gpus=1))
    core = f.core
    restored = core.load(core.dump(f.state))
    assert restored is not None and core.dump(restored) == core.dump(f.state)
    again = restored.jobs.jobs
    assert again["a1"].spec is again["a2"].spec is again["a3"].spec and again["a1"].spec == f.state.jobs.jobs["a1"].spec
    f.evt("submission", accepted("b1", gpus=1, nice=3))  # differs outside the lookup's fields
    f.evt("submission", accepted("a4", gpus=1))
    jobs = f.state.jobs.jobs
    assert jobs["a1"].spec is jobs["a2"].spec is jobs["a3"].spec
    assert jobs["b1"].spec.nice == 3 and jobs["a4"].spec.nice == 0  # never one spec for two that differ
    assert jobs["a4"].spec == jobs["a1"].spec
    f.evt("submission", c.JobPriorityChanged(job_id="a2", priority_class="high", nice=0))
    assert jobs["a2"].spec.priority_class == "high" and jobs["a1"].spec.priority_class == "normal"


def test_a_spec_with_a_payload_is_its_own():
    from services.domain.job_specs import share_spec
    from tests.helpers import spec

    a, b = spec(gpus=1, payload={"x": 1}), spec(gpus=1, payload={"x": 1.0})
    assert a == b and share_spec(a) is a and share_spec(b) is b  # 1 and 1.0: equal, written apart
    first = share_spec(spec(gpus=1))
    assert share_spec(spec(gpus=1)) is first  # without one, equal specs are one


def test_an_accepted_job_waits_until_its_own_begin_time():
    f = Feed(PlacementCore())
    f.evt("submission", accepted("a1", gpus=1, begin_ts=5.0))
    f.evt("submission", accepted("a2", gpus=1, begin_ts=5.0))
    f.evt("submission", accepted("a3", gpus=1, begin_ts=7.0))
    jobs = f.state.jobs.jobs
    assert jobs["a1"].spec is jobs["a2"].spec and [jobs[j].not_before_ts for j in ("a1", "a2", "a3")] == [5.0, 5.0, 7.0]


def test_preemption_tables_hold_one_spec_after_a_priority_change_and_restore_as_replayed():
    from services.preemption.core import PreemptionCore

    f = Feed(PreemptionCore(virtual_time=True))
    for j in ("a1", "a2", "a3"):
        f.evt("submission", accepted(j, gpus=1))
    f.evt("submission", c.JobPriorityChanged(job_id="a2", priority_class="high", nice=0))
    state, core = f.state, f.core
    view, own = state.sched.jobs.jobs, state.jobs.jobs
    assert view["a1"].spec is own["a1"].spec is own["a3"].spec  # one spec in both tables
    assert own["a2"].spec is view["a2"].spec and own["a2"].spec.priority_class == "high"  # the new one, shaped
    assert own["a1"].spec.priority_class == "normal"
    for k in range(len(f.records) + 1):  # a restart at every cut is a full replay, byte for byte
        prefix = core.initial()
        for r in f.records[:k]:
            prefix, _, _ = fold_record(core, prefix, r)
        resumed = core.load(core.dump(prefix))
        for r in f.records[k:]:
            resumed, _, _ = fold_record(core, resumed, r)
        assert core.dump(resumed) == core.dump(state)
    restored = core.load(core.dump(state))
    assert restored.jobs.jobs["a2"].spec is restored.sched.jobs.jobs["a2"].spec


@pytest.mark.parametrize("name", ["placement", "scheduling", "submission", "preemption"])
def test_each_service_holds_one_spec_for_jobs_submitted_alike_folded_and_restored(name):
    f = Feed(make_core(name))
    for j in ("a1", "a2", "a3"):
        f.evt("submission", accepted(j, gpus=1))
    f.evt("submission", accepted("b1", gpus=1, nice=3))
    restored = f.core.load(f.core.dump(f.state))
    assert restored is not None and f.core.dump(restored) == f.core.dump(f.state)
    for state in (f.state, restored):
        tables = [state.jobs] + ([state.sched.jobs] if name == "preemption" else [])
        for table in tables:
            jobs = table.jobs
            assert jobs["a1"].spec is jobs["a2"].spec is jobs["a3"].spec is tables[0].jobs["a1"].spec
            assert jobs["b1"].spec.nice == 3 and jobs["a1"].spec.nice == 0
