"""Placement holds one spec for jobs whose specs are equal (services/placement/specs.py), never one for
specs that differ, and a restored state shares them as the fold does."""

from __future__ import annotations

from events import catalogue as c
from services.placement.core import PlacementCore
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
