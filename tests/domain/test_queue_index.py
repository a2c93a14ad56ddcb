"""The queue index (services/domain/queue/index.py): a cycle's order is the merge of the runs' heads, and it
is exactly the full sort of the pending jobs by the queue's key, for every policy, whatever the queue holds.

The reference below is the order and the candidates as they were computed before the index (every
pending job's key, sorted): random queues of classes, accounts and users with fair-share factors, nice,
time limits, sizes, partitions with priority tiers, holds and releases, priority changes, requeues that
re-enter with their old sequence, equal submit times and submit times that go back, are folded through
the real ``QueueFold``, and the two are compared after every few records, and after a snapshot.
"""

from __future__ import annotations

import math
import random

import pytest

from events import catalogue as c
from services.domain.dependencies import NEVER, dependency_expired, dependency_status
from services.domain.fairshare import association
from services.domain.jobs import Job, JobState
from services.domain.policy import POLICIES
from services.domain.queue import never, order
from services.domain.queue.index import QueueIndex, merged
from services.domain.queue.state import SchedulingState
from services.domain.queue.waiting import _Scan
from services.domain.quotas import BLOCKED, BORROW, Amount, amount_of
from services.scheduling.core import SchedulingCore
from tests.helpers import Feed, accepted

CLASSES = ("critical", "high", "normal", "low", "scavenger")


# ------------------------------------------------------------------ the reference: the full sort


def reference_order(state: SchedulingState, ctx=None) -> list[Job]:
    ctx = ctx or order.context(state)
    key = order.queue_key(state)
    return sorted(state.pending.values(), key=lambda j: key(j, ctx))


def reference_candidates(state: SchedulingState, max_candidates: int) -> tuple[list[Job], list[str]]:
    """``order.candidates`` as it was before the index: the same walk over the full sort."""
    ctx = order.context(state)
    blocked, nowhere, gated = state.blocked_basis, state.fits_nowhere, state.gated
    fs, quotas = state.fairshare, state.quotas
    limited = quotas.limited(fs)
    backoff = bool(state.wakeups)
    licensed, licenses = state.licensed, state.licenses
    if not blocked and not gated and not limited and not backoff and not state.throttled and not licensed:
        return reference_order(state, ctx)[:max_candidates], []
    out: list[Job] = []
    borrowing: list[str] = []
    cycle_use: dict[str, Amount] = {}
    array_use: dict[str, int] = {}
    license_use: dict[str, int] = {}
    head_kept = False
    for job in reference_order(state, ctx):
        job_id, spec = job.job_id, job.spec
        if backoff and job.not_before_ts > state.now:
            continue
        if job_id in gated and not order.ready(state, job):
            continue
        if nowhere.get(job_id, -1) >= state.nodes_seq:
            continue
        if job_id in state.throttled:
            array = spec.array or ""
            if state.array_running.get(array, 0) + array_use.get(array, 0) >= spec.array_max_running:
                continue
        verdict = ""
        if limited:
            x = amount_of(spec)
            verdict, _why = quotas.admit(fs, association(spec), x, cycle_use)
            if verdict == BLOCKED:
                continue
        if job_id in licensed and licenses.judge(spec.licenses, license_use):
            continue
        if blocked.get(job_id, -1) >= state.capacity_seq:
            if head_kept:
                continue
            head_kept = True
        out.append(job)
        if verdict == BORROW:
            borrowing.append(job_id)
        if limited:
            quotas.add_cycle(fs, association(spec), x, cycle_use)
        if job_id in state.throttled:
            array_use[spec.array or ""] = array_use.get(spec.array or "", 0) + 1
        if job_id in licensed:
            licenses.add_cycle(spec.licenses, license_use)
        if len(out) >= max_candidates:
            break
    return out, borrowing


def reference_scan(state: SchedulingState, job: Job, ctx) -> tuple:
    """``waiting._Scan`` as it was: every pending job's key compared with the job's."""
    key = order.queue_key(state)
    mine = key(job, ctx)
    array = job.spec.array if job.spec is not None else None
    count = tasks = 0
    head = holder = blocker = None
    for other in state.pending.values():
        if other is job:
            continue
        k = key(other, ctx)
        if not k < mine:
            continue
        count += 1
        if head is None or k < head[0]:
            head = (k, other)
        if other.reserved_at is not None and (holder is None or k < holder[0]):
            holder = (k, other)
        if other.last_block and (blocker is None or k < blocker[0]):
            blocker = (k, other)
        if array is not None and other.spec is not None and other.spec.array == array:
            tasks += 1
    return (count, head[1] if head else None, holder[1] if holder else None, blocker[1] if blocker else None, tasks)


# ------------------------------------------------------------------ random queues


class Queue:
    """A random queue folded through the scheduling core, record by record."""

    def __init__(self, policy: str, seed: int) -> None:
        self.rng = random.Random(seed)
        self.core = SchedulingCore(policy=policy, max_candidates=10_000)
        self.f = Feed(self.core)
        self.n = 0
        self.running: list[tuple[str, int]] = []
        rng = self.rng
        self.partitions = ["p0", "p1", "p2"]
        if rng.random() < 0.6:  # tiers (equal ones too)
            for name in self.partitions:
                self.f.admin("partition", c.PartitionConfigured(name=name, nodes=["ALL"],
                                                                priority_tier=rng.choice((0, 1, 1, 5))))
        for account in ("a0", "a1", "a2"):
            self.f.admin("account", c.AccountConfigured(account=account, shares=rng.choice((1.0, 2.0, 5.0)),
                                                        priority_boost=rng.choice((0.0, 0.0, 300.0))))
        if policy == "multifactor" and rng.random() < 0.5:
            self.f.admin("policy", c.PolicyConfigured(qos_boost={"express": 0.25},
                                                      weights={"age": rng.choice((0.0, 1_000.0, 50_000.0))},
                                                      max_age_s=rng.choice((60.0, 3_600.0, 604_800.0))))
        self.skew = rng.choice(("equal", "monotone", "jumbled"))
        self.shapes = [dict(priority_class=rng.choice(("normal", "high")), account=rng.choice(("a0", "a1")),
                            user="u0", nice=0, time_limit_s=3_600.0, gpus=rng.choice((1, 8)),
                            partition=rng.choice(("p0", "p1")), qos="") for _ in range(3)]

    def submit(self) -> None:
        rng = self.rng
        self.n += 1
        job_id = f"j{self.n:04d}"
        kw = dict(priority_class=rng.choice(CLASSES), account=rng.choice(("a0", "a1", "a2")),
                  user=rng.choice(("u0", "u1", "")), nice=rng.choice((0, 0, 0, 5, -3)),
                  time_limit_s=rng.choice((60.0, 600.0, 3_600.0, 86_400.0)), gpus=rng.choice((0, 1, 4, 8)),
                  partition=rng.choice(self.partitions + [""]), qos=rng.choice(("", "express")))
        if rng.random() < 0.8:  # most jobs of a few shapes, so that groups hold many jobs
            kw.update(self.shapes[rng.randrange(len(self.shapes))])
        if kw["gpus"] == 0:
            kw["cpus_milli"] = rng.choice((1_000, 16_000))
        if rng.random() < 0.05:
            kw["begin_ts"] = self.f.time + rng.choice((5.0, 500.0))  # in backoff for a while
        if rng.random() < 0.2:
            kw["array"] = rng.choice(("arrA", "arrB"))
        event = accepted(job_id, **kw)
        if self.skew == "jumbled" or rng.random() < 0.05:  # a client's or a skewed clock's submit time
            event = c.JobAccepted(**{**{f: getattr(event, f) for f in event.__struct_fields__},
                                     "submitted_ts": self.f.time - rng.choice((0.0, 1.0, 30.0, 5_000.0))})
        self.f.evt("submission", event, dt=0.0 if self.skew == "equal" else rng.choice((0.0, 0.5, 7.0)))

    def pending(self) -> list[str]:
        return sorted(self.f.state.pending)

    def step(self) -> None:
        rng, f = self.rng, self.f
        roll = rng.random()
        pending = self.pending()
        if roll < 0.5 or not pending:
            self.submit()
        elif roll < 0.6:
            job_id = rng.choice(pending)
            attempt = f.state.jobs.jobs[job_id].attempt + 1
            f.evt("placement", c.JobScheduled(job_id=job_id, attempt=attempt), dt=rng.choice((0.0, 3.0)))
            self.running.append((job_id, attempt))
        elif roll < 0.68 and self.running:  # the node is lost: requeued at once, with its old sequence
            job_id, attempt = self.running.pop(rng.randrange(len(self.running)))
            f.evt("inventory", c.JobFailed(job_id=job_id, attempt=attempt, node_lost=True, reason="lost"), dt=40.0)
            f.evt("scheduling", c.JobRequeued(job_id=job_id, attempt=attempt, reason="lost"), dt=0.0)
        elif roll < 0.74:
            job_id = rng.choice(pending)
            f.evt("submission", c.JobHeld(job_id=job_id), dt=1.0)
            if rng.random() < 0.7:
                if rng.random() < 0.3:  # its class changes while it is held
                    f.evt("submission", c.JobPriorityChanged(job_id=job_id, priority_class=rng.choice(CLASSES)))
                f.evt("submission", c.JobReleased(job_id=job_id), dt=2.0)
        elif roll < 0.82:
            f.evt("submission", c.JobPriorityChanged(job_id=rng.choice(pending), priority_class=rng.choice(CLASSES),
                                                     nice=rng.choice((0, 2, -1))), dt=1.0)
        elif roll < 0.88:
            f.evt("submission", c.JobCancelled(job_id=rng.choice(pending)), dt=1.0)
        elif roll < 0.94:
            job_id = rng.choice(pending)
            f.evt("placement", c.PlacementBlocked(
                job_id=job_id, basis_seq=f.seq, fits_nowhere=rng.random() < 0.3,
                reasons=[c.BlockReason(reason="full", nodes=1)] if rng.random() < 0.8 else [],
                earliest_start_ts=f.time + 100.0 if rng.random() < 0.4 else None), dt=0.0)
        else:
            dt = rng.choice((1.0, 600.0, 86_400.0))
            f.evt("inventory", c.ClockTicked(now_ts=f.time + dt), dt=dt)


def check(q: Queue) -> None:
    state = q.f.state
    expected = [j.job_id for j in reference_order(state)]
    assert [j.job_id for j in order.ordered_queue(state)] == expected
    for limit in (1, 3, 10):
        assert [j.job_id for j in order.ordered_queue(state, limit)] == expected[:limit]
    for most in (1, 4, 10_000):
        got, borrowing = order.candidates(state, most)
        want, want_borrowing = reference_candidates(state, most)
        assert ([j.job_id for j in got], borrowing) == ([j.job_id for j in want], want_borrowing)
    ctx = order.context(state)
    waiting_jobs = list(state.pending.values()) + [j for j in state.jobs.jobs.values() if j.state is JobState.HELD]
    for job in waiting_jobs[::max(1, len(waiting_jobs) // 12)]:  # where each stands: as the full scan found it
        assert _Scan(state, job, ctx)._scan() == reference_scan(state, job, ctx), job.job_id
    indexed = [job for run in state.queue_index.runs() for job in run]
    assert sorted(j.job_id for j in indexed) == sorted(state.pending)  # each pending job once, no other
    assert all(state.pending[j.job_id] is j for j in indexed)


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("seed", range(12))
def test_the_merged_order_and_the_candidates_are_the_full_sorts(policy: str, seed: int) -> None:
    q = Queue(policy, seed)
    for i in range(400):
        q.step()
        if i % 17 == 0:
            check(q)
    check(q)
    # a snapshot keeps the order: the index is rebuilt exactly like the other derived fields
    loaded = q.core.load(q.core.dump(q.f.state))
    assert loaded is not None
    assert [j.job_id for j in order.ordered_queue(loaded)] == [j.job_id for j in order.ordered_queue(q.f.state)]
    assert order.candidates(loaded, 5)[0] == [loaded.pending[j.job_id] for j in order.candidates(q.f.state, 5)[0]]


@pytest.mark.parametrize("policy", list(POLICIES))
def test_a_change_of_policy_regroups_the_queue(policy: str) -> None:
    q = Queue("fcfs", 99)
    for _ in range(150):
        q.step()
    q.f.admin("policy", c.PolicyConfigured(policy=policy))
    assert q.f.state.queue_index.policy == policy
    check(q)


def test_a_submit_time_that_goes_back_starts_another_run_and_the_order_stays_exact() -> None:
    """Multifactor within one group: a job submitted 'earlier' than jobs accepted before it cannot join
    their run (equal priorities would then be tied by a smaller sequence behind a greater one)."""
    q = Queue("multifactor", 5)
    f = q.f
    for i, back in enumerate((0.0, 0.0, 100.0, 0.0, 2_000.0)):
        event = accepted(f"s{i}", account="a0", user="u0", gpus=1)
        f.evt("submission", c.JobAccepted(**{**{n: getattr(event, n) for n in event.__struct_fields__},
                                             "submitted_ts": f.time - back}), dt=1.0)
    runs = [list(run) for run in f.state.queue_index.runs()]
    assert len(runs) == 3  # s0 s1 s3 | s2 | s4 (s2 and s4 went back in time)
    check(q)
    f.evt("inventory", c.ClockTicked(now_ts=f.time + 10 * 86_400.0), dt=10 * 86_400.0)  # everyone's age is capped: ties by sequence
    check(q)


def test_a_partition_leaders_view_reads_its_own_groups_only() -> None:
    q = Queue("multifactor", 3)
    for _ in range(200):
        q.step()
    state = q.f.state
    everyone = state.pending
    mine = {"p1", ""}
    state.pending = {j: job for j, job in everyone.items() if job.spec.partition in mine}
    try:
        want = reference_candidates(state, 7)
        got = order.candidates(state, 7, partitions=mine)
        assert [j.job_id for j in got[0]] == [j.job_id for j in want[0]]
        assert [j.job_id for j in order.candidates(state, 7)[0]] == [j.job_id for j in want[0]]
    finally:
        state.pending = everyone


def test_runs_split_and_shrink_in_chunks() -> None:
    """Thousands of jobs in one group: the run's chunks split and merge, and every removal finds its job."""
    rng = random.Random(1)
    jobs = [Job(f"k{i}", accepted("x", account="a", user="u", gpus=1).spec, None, accepted_seq=i,  # type: ignore[arg-type]
                accepted_ts=float(i // 3)) for i in range(5_000)]
    index = QueueIndex("multifactor")
    for job in jobs:
        index.add(job)
    assert len(list(index.runs())) == 1 and len(index) == 5_000
    live = {j.job_id: j for j in jobs}
    for job in rng.sample(jobs, 4_000):
        index.remove(job)
        del live[job.job_id]
    for job in rng.sample(jobs, 300):  # some come back, with their old sequence
        index.add(job)
        live[job.job_id] = job
    ctx = order.Context(now=10_000.0)
    key = POLICIES["multifactor"]().key
    assert [j.job_id for j in merged(index, key, ctx, live)] == [
        j.job_id for j in sorted(live.values(), key=lambda j: key(j, ctx))]
    assert len(index) == len(live)


# ------------------------------------------------------------------ jobs a dependency can never satisfy


def reference_never(state: SchedulingState) -> dict[str, tuple[c.Dependency, str]]:
    """Step 2 of the scheduler's decide as it was: every gated job's dependencies asked every round."""
    out = {}
    for job_id in sorted(state.gated):
        job = state.pending[job_id]
        for dep in job.spec.dependencies:
            status, why = dependency_status(dep, state.jobs, state.to_requeue)
            if status == NEVER:
                out[job_id] = (dep, why)
                break
    return out


@pytest.mark.parametrize("seed", range(20))
def test_the_jobs_a_dependency_can_never_satisfy_are_kept_exactly(seed: int) -> None:
    """Workflows: jobs depending on jobs and arrays (submitted before or after them, or never), every
    kind of dependency, and the jobs they wait for start, succeed, fail (and are retried), are
    cancelled, rejected, checkpointed, preempted, held. After every record the set the fold keeps is
    what asking every waiting job finds; the decisions and a snapshot agree."""
    rng = random.Random(seed)
    core = SchedulingCore(max_candidates=10_000)
    f = Feed(core)
    ids = [f"w{i:03d}" for i in range(60)] + ["arr"]
    kinds = ("after", "after-ok", "after-not-ok", "after-any", "after-checkpoint")
    submitted: list[str] = []
    for step in range(500):
        state = f.state
        roll = rng.random()
        live = [j for j in submitted if j in state.jobs.jobs]
        if roll < 0.3 and len(submitted) < 60:
            job_id = ids[len(submitted)]
            submitted.append(job_id)
            deps = [c.Dependency(kind=rng.choice(kinds), job_id=rng.choice(ids + ["ghost"]))
                    for _ in range(rng.choice((0, 1, 1, 2, 3)))]
            kw = dict(dependencies=deps, restart_policy=rng.choice(("never", "on-failure")), max_retries=1)
            if rng.random() < 0.25:
                kw["array"] = "arr"
            if rng.random() < 0.05:
                f.evt("submission", c.JobRejected(job_id=job_id, tenant="acme", reason="no"))
            else:
                f.evt("submission", accepted(job_id, **kw))
        elif live:
            job = state.jobs.jobs[rng.choice(live)]
            j, a = job.job_id, job.attempt
            S = JobState
            if job.state is S.PENDING and roll < 0.55:
                f.evt("placement", c.JobScheduled(job_id=j, attempt=a + 1))
            elif job.state is S.PENDING and roll < 0.6:
                f.evt("submission", c.JobCancelled(job_id=j))
            elif job.state is S.PENDING and roll < 0.65:
                f.evt("submission", c.JobHeld(job_id=j))
            elif job.state is S.HELD:
                f.evt("submission", c.JobReleased(job_id=j))
            elif job.state is S.SCHEDULED:
                f.evt("agent", c.JobStarted(job_id=j, attempt=a, node="n1"))
            elif job.state is S.RUNNING:
                pick = rng.random()
                if pick < 0.3:
                    f.evt("agent", c.JobSucceeded(job_id=j, attempt=a))
                elif pick < 0.55:
                    f.evt("agent", c.JobFailed(job_id=j, attempt=a, reason="boom"))
                elif pick < 0.7:
                    f.evt("preemption", c.JobPreempted(job_id=j, attempt=a, checkpoint_ref=rng.choice((None, "ck"))))
                else:
                    f.evt("agent", c.JobCheckpointed(job_id=j, attempt=a, checkpoint_ref=f"ck{step}"))
            elif j in state.to_requeue:
                pick = rng.random()
                if pick < 0.25:  # a late checkpoint of the attempt that ended
                    f.evt("agent", c.JobCheckpointed(job_id=j, attempt=a, checkpoint_ref=f"late{step}"))
                elif pick < 0.5:  # a requeue of another attempt: the fold forgets the requeue all the same
                    f.evt("scheduling", c.JobRequeued(job_id=j, attempt=a + 3, reason="stale"))
                else:
                    f.evt("scheduling", c.JobRequeued(job_id=j, attempt=a, reason="retry"))
            elif roll < 0.7 and job.state in (S.FAILED, S.PREEMPTED):
                f.evt("scheduling", c.JobRequeued(job_id=j, attempt=a - 1, reason="stale"))  # changes nothing
        assert f.state.never == reference_never(f.state), step
        if step % 50 == 49:
            out = core.decide(f.state)
            never = [e.job_id for e in out if isinstance(e, c.JobDependencyNeverSatisfied)]
            assert never == sorted(reference_never(f.state))
            if never and rng.random() < 0.5:  # the decisions come back through the log
                for event in out:
                    if isinstance(event, c.JobDependencyNeverSatisfied):
                        f.evt("scheduling", event)
                assert f.state.never == reference_never(f.state)
            loaded = core.load(core.dump(f.state))
            assert loaded.never == reference_never(loaded) == f.state.never


# ------------------------------------------------------------------ dependency timeouts and deadlines


def reference_expired(state: SchedulingState) -> list[tuple[str, str]]:
    """Step 2b of decide as it was: every job of ``state.expiring`` asked every round."""
    out = []
    for job_id in sorted(state.expiring - set(reference_never(state))):
        job = state.pending[job_id]
        spec = job.spec
        if dependency_expired(job, state.jobs, state.to_requeue, state.now, state.datasets) is not None:
            out.append(("JobDependencyNeverSatisfied", job_id))
        elif spec.deadline_ts and state.now + spec.time_limit_s > spec.deadline_ts:
            out.append(("JobUnschedulable", job_id))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_only_the_jobs_whose_time_has_come_are_asked_and_the_answers_are_the_same(seed: int) -> None:
    """Jobs with dependency timeouts and deadlines (some at the very float where now + limit passes it),
    held and released, requeued, scheduled; the clock moves by ticks. A round's timeouts and deadlines
    are the ones asking every expiring job finds, and the heap does not keep the jobs that left."""
    rng = random.Random(seed)
    core = SchedulingCore(max_candidates=10_000)
    f = Feed(core)
    for step in range(300):
        state = f.state
        pending = sorted(state.pending)
        roll = rng.random()
        if roll < 0.4 or not pending:
            job_id = f"d{step:03d}"
            kw = dict(time_limit_s=rng.choice((60.0, 3_600.0, 0.1)))
            if rng.random() < 0.6:
                kw["deadline_ts"] = f.time + rng.choice((30.0, 3_700.0, 100_000.0)) + kw["time_limit_s"] * rng.random()
            if rng.random() < 0.5:
                kw["dependency_timeout_s"] = rng.choice((10.0, 500.0))
                kw["dependencies"] = [c.Dependency(kind="after-ok", job_id=rng.choice(pending + ["nobody"]))]
            f.evt("submission", accepted(job_id, **kw), dt=0.0)
        elif roll < 0.55:
            f.evt("placement", c.JobScheduled(job_id=rng.choice(pending), attempt=1), dt=0.0)
        elif roll < 0.65:
            job_id = rng.choice(pending)
            f.evt("submission", c.JobHeld(job_id=job_id))
            f.evt("submission", c.JobReleased(job_id=job_id), dt=rng.choice((0.0, 50.0)))
        elif roll < 0.8 and state.expiring:  # the log's time lands on a job's expiry, or the float before it
            t = never.expiry(state.pending[rng.choice(sorted(state.expiring))])
            t = rng.choice((t, math.nextafter(t, -math.inf)))
            if math.isfinite(t) and t > f.time:
                f.time = t
                f.evt("inventory", c.ClockTicked(now_ts=t), dt=0.0)
        else:
            dt = rng.choice((0.5, 20.0, 400.0, 3_000.0))
            f.evt("inventory", c.ClockTicked(now_ts=f.time + dt), dt=dt)
        state = f.state
        out = core.decide(state)
        got = [(type(e).__name__, e.job_id) for e in out
               if (isinstance(e, c.JobDependencyNeverSatisfied) and e.reason.startswith("timeout:"))
               or (isinstance(e, c.JobUnschedulable) and e.reason.startswith("deadline:"))]
        assert got == reference_expired(state), step
        assert len(state.expiry_heap) <= 2 * len(state.expiring) + 64
        if got and rng.random() < 0.5:
            for event in out:
                if isinstance(event, c.JobDependencyNeverSatisfied | c.JobUnschedulable):
                    f.evt("scheduling", event, dt=0.0)
    loaded = core.load(core.dump(f.state))
    assert sorted(set(loaded.expiry_heap)) == sorted({e for e in f.state.expiry_heap if e[1] in f.state.expiring})
