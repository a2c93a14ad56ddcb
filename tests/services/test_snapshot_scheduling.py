"""The scheduling core's snapshots: restart from snapshot + tail gives exactly the state of a full replay.

Property (issue 5, acceptance 6): for a random log of N records and any cut
k, folding records 1..N from the initial state, and folding records k+1..N
from ``load(dump(state after k))``, end in states whose ``dump`` bytes are
equal, and whose ``decide`` gives the same decisions after every record of
the tail (``dump`` leaves out the indexes ``load`` rebuilds; decisions would
show a difference there).

Two sources of random logs:

* **By hand**: any order of the events scheduling folds, over a handful of
  jobs and nodes, mostly fitting the job life cycle (attempts follow a small
  model) but sometimes stale or out of place, as races and restarts make
  them; configuration on the admin subject and, wrongly, elsewhere.
* **By the in-process simulator**: random traces run through all five cores,
  so the log holds what the services would really decide, including
  requeues, dependency verdicts, timeouts and quota-bound cycles.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import catalogue as c
from events.base import Event
from events.codec import encode
from events.subjects import admin_subject, event_subject
from services.nodes.spec import local_nodes
from services.domain.protocol import Record
from services.runtime.service import fold_record
from services.scheduling.core import SchedulingCore
from services.front.sim.driver import SimSettings, make_cores, simulate
from services.front.sim.buses import InProcessBus
from services.front.sim.traces import SimJob
from services.domain.jobs import JobState, JobTable
from tests.helpers import node

JOBS = [f"j{i}" for i in range(4)]
NODES = ["n0", "n1"]
CLASSES = ["critical", "high", "normal", "low", "scavenger"]
POLICIES = ["fcfs", "sjf", "f1", "multifactor"]
PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------------------- logs by hand

job = st.sampled_from(JOBS)
stale = st.sampled_from([False, False, False, False, True])
account = st.sampled_from(["a", "b", "default"])

accept = st.tuples(
    st.just("accept"), job, st.integers(0, 2), st.sampled_from(CLASSES),
    st.sampled_from(["never", "on-failure", "always"]), st.integers(0, 2),
    st.none() | st.tuples(st.sampled_from(["after-ok", "after-any", "after-not-ok", "after"]), job),
    st.none() | st.sampled_from([60.0, 3600.0]), account, st.sampled_from(["u1", "u2"]),
    st.sampled_from([0, 0, 1, 2]),
)
LIFE = ["schedule", "start", "succeed", "fail", "lost", "preempt", "cancel", "requeue", "hold", "release",
        "priority", "unschedulable", "never-satisfied", "blocked", "reject"]
# Mostly the job's natural next step (so jobs really run, end and requeue), else any event.
lifecycle = st.tuples(st.sampled_from(["natural"] * 2 * len(LIFE) + LIFE), job, stale, st.booleans())
cycles = st.tuples(st.sampled_from(["cycle", "placed"]), st.lists(job, max_size=4, unique=True), st.integers(0, 3))
nodes_ = st.tuples(st.sampled_from(["registered", "ready", "lost", "cordoned", "uncordoned", "draining", "removed"]),
                   st.sampled_from(NODES))
tick = st.tuples(st.just("tick"), st.sampled_from([1.0, 60.0, 200.0, 3600.0, 86400.0]))
config = st.one_of(
    st.tuples(st.just("account"), st.sampled_from(["a", "b", "a/x"]), st.none() | st.sampled_from(["a", "b"]),
              st.sampled_from([0.5, 1.0, 3.0]), st.none() | st.integers(0, 3), st.none() | st.integers(0, 2),
              st.booleans(), st.booleans()),
    st.tuples(st.just("fairshare"), st.sampled_from([60.0, 3600.0, -1.0]), st.sampled_from([0.0, 1.0]),
              st.booleans(), st.booleans()),
    st.tuples(st.just("policy"), st.none() | st.sampled_from([*POLICIES, "nonsense"]),
              st.none() | st.sampled_from([0.0, 30.0]), st.booleans()),
    st.tuples(st.just("config-rejected"), st.integers(1, 40)),
)
action = st.one_of(accept, lifecycle, lifecycle, lifecycle, lifecycle, lifecycle, lifecycle, cycles, nodes_, tick,
                   tick, config)
pause = st.sampled_from([0.0, 0.5, 30.0, 600.0, 7200.0])


class HandLog:
    """Records from actions. A job table folded alongside (the one every service uses) gives each
    job's true state, so "natural" steps follow the life cycle and attempts are mostly right."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.time = 1_000_000.0
        self.table = JobTable()
        self.cycle = 0

    def add(self, subject: str, event: Event, dt: float) -> None:
        self.time += dt
        seq = len(self.records) + 1
        event = msgspec.structs.replace(event, ts=self.time, id=event.id or f"hand/{seq}")
        self.records.append(Record(seq, subject, encode(event), self.time, {"Nats-Msg-Id": event.id}))
        self.table.apply(event, seq, self.time)

    def act(self, a: tuple[Any, ...], dt: float) -> None:
        kind = a[0]
        seq = len(self.records)
        if kind == "accept":
            _, j, gpus, cls, restart, retries, dep, timeout, acct, user, array_limit = a
            spec = c.JobSpec(
                tenant="t", account=acct, user=user, gpus=gpus, priority_class=cls, restart_policy=restart,
                max_retries=retries, time_limit_s=600.0 * (1 + JOBS.index(j)), scheduling_timeout_s=timeout,
                dependencies=(c.Dependency(kind=dep[0], job_id=dep[1]),) if dep and dep[1] != j else (),
                array="arr" if array_limit else None, array_index=JOBS.index(j) if array_limit else None,
                array_max_running=array_limit,
            )
            event: Event = c.JobAccepted(id=f"submission/JobAccepted/{j}", correlation_id=j, source="submission",
                                         job_id=j, spec=spec, submitted_seq=seq, submitted_ts=self.time,
                                         basis_seq=seq)
            self.add(event_subject("submission", event), event, dt)
        elif kind in ("cycle", "placed"):
            _, candidates, scheduled = a
            if kind == "cycle":
                self.cycle += 1
                event = c.SchedulingCycleCompleted(correlation_id=str(self.cycle), source="scheduling",
                                                   cycle=self.cycle, basis_seq=seq, candidates=candidates,
                                                   queued=len(candidates), borrowing=candidates[:scheduled % 2])
                self.add(event_subject("scheduling", event), event, dt)
            else:
                event = c.PlacementCycleCompleted(correlation_id=str(self.cycle), source="placement",
                                                  cycle=self.cycle, basis_seq=seq, scheduled=scheduled)
                self.add(event_subject("placement", event), event, dt)
        elif kind in ("registered", "ready", "lost", "cordoned", "uncordoned", "draining", "removed"):
            n = a[1]
            types = {"ready": c.NodeReady, "lost": c.NodeLost, "cordoned": c.NodeCordoned,
                     "uncordoned": c.NodeUncordoned, "draining": c.NodeDraining, "removed": c.NodeRemoved}
            event = node(n, gpus=2) if kind == "registered" else types[kind](node=n, correlation_id=n,
                                                                               source="inventory")
            self.add(event_subject("agent" if kind == "registered" else "inventory", event), event, dt)
        elif kind == "tick":
            # the clock moves on by itself (ahead of the next record's time, as a live ticker's would)
            event = c.ClockTicked(correlation_id="t", source="clock", now_ts=self.time + dt + a[1])
            self.add(event_subject("clock", event), event, dt + a[1])
        elif kind == "account":
            _, name, parent, shares, gpus, running, borrowing, wrong_subject = a
            event = c.AccountConfigured(account=name, parent=parent if parent != name else None, shares=shares,
                                        quota=c.Quota(gpus=gpus, running_jobs=running), borrowing=borrowing,
                                        priority_boost=shares - 1)
            self.add(event_subject("t", event) if wrong_subject else admin_subject("account"), event, dt)
        elif kind == "fairshare":
            _, half_life, cpu_weight, dominant, wrong_subject = a
            event = c.FairShareConfigured(half_life_s=half_life, cpu_weight=cpu_weight, dominant_share=dominant)
            self.add(event_subject("t", event) if wrong_subject else admin_subject("fairshare"), event, dt)
        elif kind == "policy":
            _, policy, backoff, age = a
            event = c.PolicyConfigured(policy=policy, backoff_base_s=backoff, max_age_s=86400.0 if age else None,
                                       weights={"age": 2.0} if age else {})
            self.add(admin_subject("policy"), event, dt)
        elif kind == "config-rejected":
            event = c.ConfigRejected(source="scheduling", verb="account", reason="no", request_seq=a[1],
                                     correlation_id=f"seq-{a[1]}")
            self.add(event_subject("scheduling", event), event, dt)
        else:
            self.life(kind, a[1], a[2], a[3], dt)

    def natural(self, j: str, flag: bool) -> str:
        known = self.table.get(j)
        if known is None:
            return "accept"
        return {
            JobState.PENDING: "hold" if flag and len(self.records) % 5 == 0 else "schedule",
            JobState.HELD: "release",
            JobState.SCHEDULED: "start",
            JobState.RUNNING: "succeed" if flag else "fail",
            JobState.FAILED: "requeue",
            JobState.SUCCEEDED: "requeue" if flag else "blocked",
            JobState.PREEMPTED: "requeue",
        }.get(known.state, "reject")

    def life(self, kind: str, j: str, is_stale: bool, flag: bool, dt: float) -> None:
        if kind == "natural":
            kind = self.natural(j, flag)
            if kind == "accept":
                self.act(("accept", j, 1, "normal", "on-failure", 1, None, None, "a", "u1", 0), dt)
                return
        known = self.table.get(j)
        current = known.attempt if known else 0
        attempt = max(1, current - 1) if is_stale else max(1, current)
        n = NODES[JOBS.index(j) % len(NODES)]
        seq = len(self.records)
        event: Event
        source = "agent"
        if kind == "schedule":
            attempt = current if is_stale else current + 1
            alloc = c.NodeAllocation(node=n, device_ids=["gpu0"], cpus_milli=1000, memory_bytes=1 << 30)
            event = c.JobScheduled(job_id=j, attempt=attempt, allocations=[alloc], basis_seq=seq, cycle=self.cycle,
                                   time_limit_s=600.0, borrowed=flag)
            source = "placement"
        elif kind == "start":
            event = c.JobStarted(job_id=j, attempt=attempt, node=n)
        elif kind == "succeed":
            event = c.JobSucceeded(job_id=j, attempt=attempt, node=n, runtime_s=10.0)
        elif kind in ("fail", "lost"):
            event = c.JobFailed(job_id=j, attempt=attempt, node=n, exit_code=None if kind == "lost" else 1,
                                reason="boom", node_lost=kind == "lost")
            source = "inventory" if kind == "lost" else "agent"
        elif kind == "preempt":
            event = c.JobPreempted(job_id=j, attempt=attempt, for_job=JOBS[0])
        elif kind == "cancel":
            event = c.JobCancelled(job_id=j, attempt=attempt, reason="asked")
            source = "submission" if flag else "agent"
        elif kind == "requeue":
            event = c.JobRequeued(job_id=j, attempt=attempt, reason="again",
                                  not_before_ts=self.time + (300.0 if flag else 0.0), basis_seq=seq)
            source = "scheduling"
        elif kind == "hold":
            event, source = c.JobHeld(job_id=j, reason="wait"), "submission"
        elif kind == "release":
            event, source = c.JobReleased(job_id=j), "submission"
        elif kind == "priority":
            event, source = c.JobPriorityChanged(job_id=j, priority_class="high" if flag else "low", nice=3), "submission"
        elif kind == "unschedulable":
            event, source = c.JobUnschedulable(job_id=j, reason="timeout", basis_seq=seq), "scheduling"
        elif kind == "never-satisfied":
            event = c.JobDependencyNeverSatisfied(job_id=j, dependency=c.Dependency(job_id=JOBS[0]), reason="no",
                                                  basis_seq=seq)
            source = "scheduling"
        elif kind == "blocked":
            event = c.PlacementBlocked(job_id=j, cycle=self.cycle, basis_seq=seq, fits_nowhere=flag)
            source = "placement"
        else:  # reject
            event, source = c.JobRejected(job_id=j, tenant="t", reason="bad"), "submission"
        event = msgspec.structs.replace(event, correlation_id=j, source=source)
        self.add(event_subject(source, event), event, dt)


def fold(core: SchedulingCore, state: Any, records: list[Record]) -> Any:
    for record in records:
        state, _event, _error = fold_record(core, state, record)
    return state


def decisions(core: SchedulingCore, state: Any) -> list[bytes]:
    return [encode(e) for e in core.decide(state)]


def check_restart_equals_full_replay(core: SchedulingCore, records: list[Record], k: int) -> None:
    full = fold(core, core.initial(), records)
    prefix = fold(core, core.initial(), records[:k])
    restored = core.load(core.dump(prefix))
    assert restored is not None and restored.seq == prefix.seq
    resumed = fold(core, restored, records[k:])
    assert core.dump(resumed) == core.dump(full)
    # step by step through the tail, the two must decide alike
    a = fold(core, core.initial(), records[:k])
    b = core.load(core.dump(a))
    assert decisions(core, a) == decisions(core, b)
    for record in records[k:]:
        a, _, _ = fold_record(core, a, record)
        b, _, _ = fold_record(core, b, record)
        assert decisions(core, a) == decisions(core, b), f"decisions differ after seq {record.seq}"


@PROPERTY
@given(actions=st.lists(st.tuples(action, pause), min_size=40, max_size=200), cut=st.integers(0, 10**6),
       policy=st.sampled_from(POLICIES), virtual_time=st.booleans())
def test_restart_from_a_snapshot_of_a_random_log_equals_a_full_replay(actions, cut, policy, virtual_time):
    log = HandLog()
    for a, dt in actions:
        log.act(a, dt)
    core = SchedulingCore(policy=policy, virtual_time=virtual_time, max_candidates=3)
    check_restart_equals_full_replay(core, log.records, cut % (len(log.records) + 1))


# ---------------------------------------------------------------------------- logs by the simulator

sim_job = st.builds(
    lambda i, submit, run, est, gpus, cls, acct, deps, exit_code, fails, restart, retries, timeout: SimJob(
        job_id=f"s{i}", submit_s=submit, runtime_s=run, estimate_s=max(run, est), gpus=gpus, account=acct,
        user=f"{acct}-u", priority_class=cls, dependencies=deps, exit_code=exit_code, fail_attempts=fails,
        restart_policy=restart, max_retries=retries, scheduling_timeout_s=timeout),
    st.integers(0, 10**6), st.sampled_from([0.0, 10.0, 50.0, 200.0]), st.sampled_from([5.0, 60.0, 300.0]),
    st.sampled_from([5.0, 600.0]), st.integers(1, 4), st.sampled_from(CLASSES[1:4]), st.sampled_from(["a", "b"]),
    st.just(()), st.sampled_from([0, 0, 0, 2]), st.integers(0, 2), st.sampled_from(["never", "on-failure", "always"]),
    st.integers(0, 2), st.none() | st.sampled_from([30.0, 400.0]),
)


def trace(jobs: list[SimJob], deps: list[tuple[int, int, str]]) -> list[SimJob]:
    """Unique ids, and dependencies only on earlier jobs (submission rejects cycles and unknown ids)."""
    out: list[SimJob] = []
    for n, j in enumerate(jobs):
        job_deps = tuple((kind, f"s{m}") for a, m, kind in deps if a == n and m < n)
        out.append(dataclasses.replace(j, job_id=f"s{n}", dependencies=job_deps))
    return out


def simulated_log(jobs: list[SimJob], policy: str, quotas: bool) -> list[Record]:
    settings_ = SimSettings(policy=policy, backfill="easy", gpus_per_node=4)
    bus = InProcessBus(make_cores(settings_), keep_records=True)
    config: list[Event] = []
    if quotas:
        config = [c.AccountConfigured(account="a", shares=2.0, quota=c.Quota(gpus=4), borrowing=True),
                  c.AccountConfigured(account="b", shares=1.0, quota=c.Quota(running_jobs=2)),
                  c.FairShareConfigured(half_life_s=600.0)]
    asyncio.run(simulate(jobs, local_nodes(2, gpus_per_node=4, prefix="sn"), settings_, bus, config=config))
    return bus.records


@PROPERTY
@given(jobs=st.lists(sim_job, min_size=1, max_size=12),
       deps=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11),
                               st.sampled_from(["after-ok", "after-any", "after-not-ok"])), max_size=4),
       cuts=st.lists(st.integers(0, 10**6), min_size=1, max_size=3),
       policy=st.sampled_from(POLICIES), quotas=st.booleans())
def test_restart_from_a_snapshot_of_a_simulated_log_equals_a_full_replay(jobs, deps, cuts, policy, quotas):
    records = simulated_log(trace(jobs, deps), policy, quotas)
    core = SchedulingCore(policy=policy, virtual_time=True, max_candidates=100_000)
    for cut in cuts:
        check_restart_equals_full_replay(core, records, cut % (len(records) + 1))


def test_another_configuration_or_format_is_refused():
    log = HandLog()
    log.act(("accept", "j1", 1, "normal", "never", 0, None, None, "a", "u1", 0), 1.0)
    core = SchedulingCore(policy="fcfs")
    state = fold(core, core.initial(), log.records)
    data = core.dump(state)
    assert core.load(data) is not None
    assert SchedulingCore(policy="sjf").load(data) is None
    assert SchedulingCore(policy="fcfs", max_candidates=5).load(data) is None
    assert core.load(b"\x93not a snapshot") is None


def accepted_job(j: str) -> tuple[Any, ...]:
    return ("accept", j, 1, "normal", "on-failure", 2, None, None, "a", "u1", 0)


def test_a_stale_backoff_wakeup_is_not_a_difference_between_replay_and_restart():
    log = HandLog()
    for a, dt in [
        (("registered", "n0"), 1.0), (accepted_job("j0"), 1.0),
        (("schedule", "j0", False, False), 1.0), (("fail", "j0", False, False), 1.0),
        (("requeue", "j0", False, True), 1.0),  # pending again, not before +300 s: a wakeup entry
        (("schedule", "j0", False, False), 1.0), (("fail", "j0", False, False), 1.0),
        (("requeue", "j0", False, False), 1.0),  # pending again, no backoff: that entry is stale
        (("cycle", ["j0"], 0), 1.0), (("placed", [], 0), 1.0),
        (("blocked", "j0", False, False), 600.0),  # past the stale entry's time
    ]:
        log.act(a, dt)
    check_restart_equals_full_replay(SchedulingCore(policy="fcfs"), log.records, 8)


def test_a_backoff_that_ends_on_a_node_event_still_wakes_its_job_after_a_restart():
    """Hypothesis's find: a node event (which does not wake jobs) moves "now" past a requeued job's
    backoff; a snapshot there must still carry the wakeup the next waking record (the tick) takes."""
    log = HandLog()
    for a, dt in [
        (("registered", "n0"), 1.0), (accepted_job("j0"), 1.0),
        (("schedule", "j0", False, False), 1.0), (("start", "j0", False, False), 1.0),
        (("fail", "j0", False, False), 1.0),
        (("requeue", "j0", False, True), 1.0),  # pending again, not before +300 s: a wakeup entry
        (("registered", "n0"), 600.0),  # "now" passes the backoff; node events wake nothing
        (("tick", 1.0), 0.0),  # wakes j0: a cycle is due
    ]:
        log.act(a, dt)
    check_restart_equals_full_replay(SchedulingCore(policy="fcfs"), log.records, 7)


# ---------------------------------------------------------------------------- settled jobs


def test_jobs_that_ended_for_good_keep_only_their_outcome():
    """The state (and so each snapshot) does not grow with the jobs that have come and gone:
    a finished job is kept as its outcome, which is all a later dependency or a duplicate needs."""
    from services.domain.dependencies import MET, NEVER, dependency_status
    from tests.helpers import Feed, accepted

    core = SchedulingCore()
    f = Feed(core)
    f.evt("agent", node("n0", gpus=8))
    f.evt("inventory", c.NodeReady(node="n0", basis_seq=1))

    def run(job_id: str, ok: bool = True, **kw: Any) -> None:
        f.evt("submission", accepted(job_id, gpus=1, **kw))
        f.evt("placement", c.JobScheduled(job_id=job_id, attempt=1, allocations=[c.NodeAllocation(
            node="n0", device_ids=["gpu0"], cpus_milli=1000, memory_bytes=1 << 30)]))
        f.evt("agent", c.JobStarted(job_id=job_id, attempt=1, node="n0"))
        end = c.JobSucceeded(job_id=job_id, attempt=1) if ok else c.JobFailed(job_id=job_id, attempt=1, exit_code=1)
        f.evt("agent", end)

    run("first")
    small = len(core.dump(f.state))
    for i in range(200):
        run(f"done{i}", ok=i % 2 == 0)
    assert f.state.jobs.jobs == {} and len(f.state.jobs.settled) == 201
    assert len(core.dump(f.state)) < small + 200 * 16  # bytes per finished job: its id and one small int
    # what dependencies still see
    assert dependency_status(c.Dependency(job_id="done0", kind="after-ok"), f.state.jobs, {})[0] == MET
    verdict, why = dependency_status(c.Dependency(job_id="done1", kind="after-ok"), f.state.jobs, {})
    assert (verdict, why) == (NEVER, "done1 ended FAILED, not SUCCEEDED (after-ok)")
    assert dependency_status(c.Dependency(job_id="done1", kind="after"), f.state.jobs, {})[0] == MET
    # a duplicate acceptance of a settled job changes nothing
    before = core.dump(f.state)
    f.state.jobs.apply(accepted("done3"), f.state.seq + 1, f.state.now)
    assert core.dump(f.state) == before
    # a job that will be retried is not settled until its retries are spent
    run("flaky", ok=False, restart_policy="on-failure", max_retries=1)
    assert "flaky" in f.state.jobs.jobs and "flaky" in f.state.to_requeue
