"""Inventory forgets a job that has ended for good, exactly when scheduling does, and holds the rest lean.

Scheduling alone decides requeues; inventory keeps an ended job only while a ``JobRequeued`` can
still follow (services/domain/restart.py, which both ask). So after every record of any log, the
jobs inventory still holds are the ones scheduling holds, and the others are settled in both.
"""

from __future__ import annotations

import ast
import pathlib
from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from events import catalogue as c
from events.codec import encode
from events.subjects import event_subject
from services.domain.protocol import Record
from services.domain.qos import Requests
from services.runtime.service import fold_record
from services.inventory.core import InventoryCore
from services.inventory.jobs import READ, inventory_spec
from services.scheduling.core import SchedulingCore
from tests.services.test_snapshot_scheduling import PROPERTY, HandLog, action, pause, sim_job, simulated_log, trace


def same_jobs_step_by_step(records: list[Record], policy: str = "fcfs") -> tuple[Any, Any]:
    scheduling, inventory = SchedulingCore(policy=policy, virtual_time=True), InventoryCore(virtual_time=True)
    s, i = scheduling.initial(), inventory.initial()
    for record in records:
        s, _, _ = fold_record(scheduling, s, record)
        i, _, _ = fold_record(inventory, i, record)
        assert set(i.jobs.jobs) == set(s.jobs.jobs), f"after seq {record.seq}"
        assert i.jobs.settled == s.jobs.settled, f"after seq {record.seq}"
        assert i.retries == s.retries, f"after seq {record.seq}"
        assert set(i.preemptions) <= set(i.jobs.jobs)
    return s, i


@PROPERTY
@given(jobs=st.lists(sim_job, min_size=1, max_size=12),
       deps=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11),
                               st.sampled_from(["after-ok", "after-any", "after-not-ok"])), max_size=4),
       policy=st.sampled_from(["fcfs", "multifactor"]), quotas=st.booleans())
def test_inventory_settles_what_scheduling_settles_on_a_simulated_log(jobs, deps, policy, quotas):
    s, i = same_jobs_step_by_step(simulated_log(trace(jobs, deps), policy, quotas), policy)
    assert not i.jobs.jobs  # the simulation runs every job to its end
    assert not i.jobs.arrays and not i.jobs.checkpointed


@PROPERTY
@given(actions=st.lists(st.tuples(action, pause), min_size=40, max_size=200))
def test_inventory_settles_what_scheduling_settles_on_a_random_log(actions):
    log = HandLog()
    for a, dt in actions:
        log.act(a, dt)
    same_jobs_step_by_step(log.records)


def test_a_retried_job_is_kept_until_its_last_retry_then_settled():
    spec = c.JobSpec(tenant="t", gpus=1, restart_policy="on-failure", max_retries=1, name="flaky")
    alloc = c.NodeAllocation(node="n0", device_ids=["gpu0"], cpus_milli=1000, memory_bytes=1 << 30)
    events: list[tuple[c.Event, str]] = [
        (c.JobAccepted(job_id="j", spec=spec), "submission"),
        (c.JobScheduled(job_id="j", attempt=1, allocations=[alloc]), "placement"),
        (c.PreemptionRequested(job_id="j", attempt=1, for_job=""), "inventory"),
        (c.JobFailed(job_id="j", attempt=1, exit_code=1, reason="boom"), "agent"),
        (c.JobRequeued(job_id="j", attempt=1, reason="again"), "scheduling"),
        (c.JobScheduled(job_id="j", attempt=2, allocations=[alloc]), "placement"),
        (c.JobFailed(job_id="j", attempt=2, exit_code=1, reason="boom"), "agent"),
        (c.PreemptionRequested(job_id="j", attempt=2, for_job=""), "inventory"),  # late: ignored
    ]
    records = []
    for n, (event, source) in enumerate(events, 1):
        event = msgspec.structs.replace(event, source=source, id=f"t/{n}", correlation_id="j")
        records.append(Record(n, event_subject(source, event), encode(event), float(n)))
    core = InventoryCore(virtual_time=True)
    state = core.initial()
    for record in records[:5]:
        state, _, _ = fold_record(core, state, record)
    assert "j" in state.jobs.jobs and state.retries == {"j": 1} and state.preemptions == {"j": 1}
    for record in records[5:]:
        state, _, _ = fold_record(core, state, record)
    assert not state.jobs.jobs and "j" in state.jobs.settled
    assert state.retries == {} and state.preemptions == {}
    same_jobs_step_by_step(records)


def test_inventory_holds_one_spec_for_jobs_that_agree_on_what_it_reads():
    a = inventory_spec(c.JobSpec(tenant="t1", name="a", gpus=2, command=("x",), env={"A": "1"}))
    b = inventory_spec(c.JobSpec(tenant="t2", name="b", gpus=2, account="other", priority_class="high"))
    assert a is b and a.name == "" and a.gpus == 2
    assert inventory_spec(c.JobSpec(tenant="t", gpus=3)) is not a


def _spec_reads(path: pathlib.Path) -> set[str]:
    """Attribute names read off a ``spec`` (a name, or ``x.spec``) in a module."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            base = node.value
            if (isinstance(base, ast.Name) and base.id == "spec") or (isinstance(base, ast.Attribute)
                                                                     and base.attr == "spec"):
                out.add(node.attr)
    return out


def test_inventory_reads_no_spec_field_it_does_not_keep():
    derived = {"elastic": {"min_nodes", "nodes"}, "gpus_on_node": {"gpus_per_node", "gpus", "tasks_per_node"},
               "tolerations": {"tolerations"}}
    inventory = pathlib.Path(__file__).parents[2] / "services" / "inventory"
    reads: set[str] = set()
    for path in sorted(inventory.glob("*.py")):
        reads |= _spec_reads(path)
    reads |= set(Requests.__annotations__) | {"gpus_on_node"}  # memory pressure: qos_class(spec)
    reads |= {"requeue", "restart_policy", "max_retries"}  # services/domain/restart.py
    needed = set().union(*(derived.get(r, {r}) for r in reads))
    assert needed <= set(READ), sorted(needed - set(READ))
