"""Submission's snapshots: restart from a snapshot + the tail is exactly a full replay.

The property of the other cores' snapshots (tests/services/test_snapshot_scheduling.py, whose check
this reuses): for a log and a cut k, ``load(dump(state after k))`` folded on with records k+1..N ends
in the state a fold of 1..N reaches (equal ``dump`` bytes), and decides alike after every record of
the tail. The log is submission's own: written by the core deciding as the service does, with tenants
through the intake (users, limits, a tenant's scope), operators' configurations relayed after the
layout marker, arrays waiting for the next round, rejections, repeats, malformed inputs, requests
about jobs and arrays, jobs running and ending, and rounds cut short by a crash (some decisions of a
round never stored). Every cut of the log is checked. Against the real runner and nats-server:
tests/runtime/test_snapshots_submission.py.
"""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from events import catalogue as c
from services.domain.jobs import Job, JobState
from services.submission.core import SubmissionCore
from tests.helpers import node
from tests.services.test_intake_core import submit
from tests.services.test_snapshot_scheduling import (
    PROPERTY, HandLog, action, check_restart_equals_full_replay, fold, pause, sim_job, simulated_log, trace,
)
from tests.services.test_tenant_limits import Limited


def core() -> SubmissionCore:
    return SubmissionCore(mark_layout=True, array_tasks_per_round=4)


def store(f: Limited, keep: int | None = None) -> list[c.Event]:
    """A decision round, its first ``keep`` decisions stored (None: all of them; fewer: a crash cut it)."""
    out = f.decide()
    for event in out[:keep]:
        f.evt(f.core.name, event, dt=0.001)
    return out


def submission_log() -> list:  # list[Record]
    f = Limited(core())
    f.evt("agent", node("n1"))
    f.evt("agent", msgspec.structs.replace(node("n2", gpus=4, gpu_type="h100"), labels={"zone": "b"}))
    store(f)  # the layout marker: operators' inputs after it are relayed
    for uid, tenant in enumerate(("acme", "globex"), start=2001):
        f.admin("user", c.UserConfigured(tenant=tenant, name=tenant, uid=uid, gid=uid))
    f.admin("account", c.AccountConfigured(account="research", shares=2.0, tenants=["acme"],
                                           max_priority_class="normal"))
    f.admin("tenant", c.TenantConfigured(tenant="acme", max_pending_jobs=12, max_array_tasks=6))
    f.admin("partition", c.PartitionConfigured(name="main", nodes=["n1"], default=True))
    f.admin("partition", c.PartitionConfigured(name="zone-b", nodes=["n2"]))
    f.admin("license", c.LicenseConfigured(name="matlab", count=3))
    store(f, keep=3)  # some relays stored, the rest still to relay
    f.send("acme", "submit", submit("a1", account="research", resources=c.ResourceRequest(gpus=1)))
    f.send("acme", "submit", submit("a2", array="0-5", resources=c.ResourceRequest(gpus=1)))
    f.send("acme", "submit", submit("a3", array="0-3"))  # waits: the round made its tasks
    f.send("acme", "submit", submit("a4", priority_class="critical", account="research"))  # over the class
    f.send("globex", "submit", submit("g1", account="research", tenant="globex"))  # not open to globex
    f.send("globex", "submit", submit("g2", dependencies=[c.Dependency(job_id="g9")],
                                      licenses={"matlab": 1}, partitions=["zone-b"], tenant="globex"))
    f.send("acme", "submit", submit("a1"))  # a repeat
    f.raw("acme", "submit", b'{"type": "JobSubmitted", "job_id": ')  # does not decode
    store(f, keep=4)  # a crash: an array's tasks half stored
    store(f)
    store(f)
    f.send("acme", "hold", c.JobHoldRequested(job_id="a2", tenant="acme"))  # the array: each live task
    f.send("acme", "update", c.JobUpdateRequested(job_id="a1", tenant="acme", nice=5))
    f.send("globex", "cancel", c.JobCancelRequested(job_id="a1", tenant="globex"))  # not its job
    f.evt("placement", c.JobScheduled(job_id="acme:a2_0", attempt=1, basis_seq=1,
                                      allocations=[c.NodeAllocation(node="n1", device_ids=["gpu0"])]))
    f.evt("agent", c.JobStarted(job_id="acme:a2_0", attempt=1, node="n1"))
    store(f, keep=2)
    f.admin("cancel", c.JobCancelRequested(job_id="acme:a3", tenant="acme", reason="operator"))
    f.admin("tenant", c.TenantConfigured(tenant="globex", max_pending_jobs=1))
    f.evt("agent", c.JobSucceeded(job_id="acme:a2_0", attempt=1, node="n1", runtime_s=3.0))
    f.evt("agent", c.NodeRemoved(node="n2"))
    store(f)
    f.send("acme", "release", c.JobReleaseRequested(job_id="a2", tenant="acme"))
    f.send("globex", "submit", submit("g3", tenant="globex"))
    f.send("globex", "submit", submit("g4", tenant="globex"))  # over globex's pending jobs
    store(f)
    store(f)
    return f.records


@pytest.fixture(scope="module")
def records() -> list:
    return submission_log()


def test_the_log_holds_what_the_snapshot_must_carry(records):
    """The log is what the check needs: pending inputs of every kind at some cut, and every kind of verdict."""
    kinds = {r.subject.split(".")[3] for r in records if r.subject.startswith("horizon.evt.submission.")}
    assert {"LogLayoutChanged", "InputRelayed", "JobAccepted", "JobRejected", "RequestRejected", "InputRejected",
            "JobHeld", "JobReleased", "JobCancelled", "JobPriorityChanged"} <= kinds, kinds
    seen = set()
    s = core()
    state = s.initial()
    for k in range(len(records)):
        state = fold(s, state, records[k:k + 1])
        for name in ("submissions", "requests", "repeats", "malformed", "to_relay", "users", "referenced"):
            if getattr(state, name):
                seen.add(name)
    assert seen == {"submissions", "requests", "repeats", "malformed", "to_relay", "users", "referenced"}
    assert state.jobs.arrays and state.tenants.limits and state.partitions.configs and state.licenses.totals


def test_restart_at_every_cut_equals_a_full_replay(records):
    s = core()
    for k in range(len(records) + 1):
        check_restart_equals_full_replay(s, records, k)  # type: ignore[arg-type]


def test_a_snapshot_round_trips_byte_for_byte_and_keeps_the_verdicts(records):
    s = core()
    state = fold(s, s.initial(), records)
    data = s.dump(state)
    loaded = s.load(data)
    assert loaded is not None and s.dump(loaded) == data
    assert loaded.verdicts == state.verdicts and "acme:a4" in loaded.verdicts and "acme:a2" in loaded.verdicts
    assert loaded.users == state.users and loaded.capacity.shapes == state.capacity.shapes
    assert loaded.accounts.accounts == state.accounts.accounts and loaded.tenants == state.tenants


def test_another_configuration_or_format_is_refused(records):
    s = core()
    data = s.dump(fold(s, s.initial(), records[:40]))
    assert s.load(data) is not None
    assert SubmissionCore(mark_layout=True, array_tasks_per_round=9).load(data) is not None  # decides only
    assert SubmissionCore(gpu_vocabulary=("h100",)).load(data) is None  # the fold's vocabulary differs
    assert SubmissionCore(virtual_time=True).load(data) is None
    assert s.load(b"\x93not a snapshot") is None
    fields = msgspec.msgpack.decode(data)
    assert fields[0] == 4  # the format
    fields[0] = 99
    assert s.load(msgspec.msgpack.encode(fields)) is None


def test_a_state_with_a_field_it_does_not_write_is_refused():
    s = core()
    state = s.initial()
    state.something_new = {}  # type: ignore[attr-defined]
    with pytest.raises(AssertionError, match="something_new"):
        s.dump(state)


def test_a_job_without_a_verdict_survives_too():
    """Not in a log submission wrote, but the restored ``verdicts`` must be exact whatever the log holds."""
    s = core()
    state = s.initial()
    state.jobs.jobs["x"] = Job("x", None, JobState.PENDING, 1, 1.0)
    state.verdicts.add("only-a-verdict")
    loaded = s.load(s.dump(state))
    assert loaded.verdicts == {"only-a-verdict"} and "x" in loaded.jobs.jobs


@PROPERTY
@given(jobs=st.lists(sim_job, min_size=1, max_size=12),
       deps=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11),
                               st.sampled_from(["after-ok", "after-any", "after-not-ok"])), max_size=4),
       cuts=st.lists(st.integers(0, 10**6), min_size=1, max_size=3), quotas=st.booleans())
def test_restart_from_a_snapshot_of_a_simulated_log_equals_a_full_replay(jobs, deps, cuts, quotas):
    """The simulator's logs: submissions answered, jobs scheduled, run, ended, requeued."""
    records = simulated_log(trace(jobs, deps), "fcfs", quotas)
    s = SubmissionCore(virtual_time=True)
    for cut in cuts:
        check_restart_equals_full_replay(s, records, cut % (len(records) + 1))  # type: ignore[arg-type]


@PROPERTY
@given(actions=st.lists(st.tuples(action, pause), min_size=40, max_size=200), cut=st.integers(0, 10**6))
def test_restart_from_a_snapshot_of_a_random_log_equals_a_full_replay(actions, cut):
    """Logs by hand: any job event in any order (stale attempts, configurations on wrong subjects)."""
    log = HandLog()
    for a, dt in actions:
        log.act(a, dt)
    s = core()
    check_restart_equals_full_replay(s, log.records, cut % (len(log.records) + 1))  # type: ignore[arg-type]
