"""Dependencies and singletons across partitions under partition leaders (docs/scaling.md): a leader
skips other partitions' records but keeps their jobs' outcomes (services/domain/foreign.py), so its
jobs' dependencies on them and its singleton jobs decide as one scheduler's would.

1. Pure cores: leader a's job depending on partition b's job (afterok, afternotok, afterany, after,
   a requeue in between, a whole array) and a singleton across partitions, at every step equal to a
   leader folding every record; the skip path and ``evolve`` on decoded events (audit) keep the same
   state; a snapshot restored at any point continues to the same state as the whole fold.
2. Against a real nats-server, two leader pairs: a's jobs start once b's job succeeds or fails as their
   dependency asks, a singleton of a waits for b's job of its name, and ``horizon audit`` reproduces
   every decision.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgspec
import nats
import pytest

from events import catalogue as c
from services.runtime.consume import decode_record
from services.domain.dependencies import dependency_status
from services.domain.foreign import ForeignJobs
from services.domain.protocol import fold_event
from services.runtime.service import fold_record
from services.scheduling.partitioned import PartitionedSchedulingCore
from tests.e2e import events_of, read_log
from tests.helpers import Feed, accepted
from tests.services.test_partition_leaders import FoldsEverything, audit_json, cluster, job, two_pairs

pytestmark = pytest.mark.timeout(90)


def dep(kind: str, job_id: str) -> tuple[c.Dependency, ...]:
    return (c.Dependency(kind=kind, job_id=job_id),)


class Shared:
    """One log; leader a as the live runner folds it (skipping b's records), a leader a folding every
    record, and leader a folding decoded events (as audit does): each step, all three decide alike."""

    def __init__(self) -> None:
        self.log = Feed(PartitionedSchedulingCore(partitions=("z",)))  # only writes the log
        cluster(self.log)
        self.skip = PartitionedSchedulingCore(partitions=("a",))
        self.all = FoldsEverything(partitions=("a",))
        self.states = [self.skip.initial(), self.all.initial(), self.skip.initial()]
        self.seen = 0

    def evt(self, service: str, event: c.Event, dt: float = 1.0) -> None:
        self.log.evt(service, event, dt)

    def catch_up(self) -> list[c.Event]:
        for r in self.log.records[self.seen:]:
            self.states[0] = fold_record(self.skip, self.states[0], r)[0]
            self.states[1] = fold_record(self.all, self.states[1], r)[0]
            self.states[2] = fold_event(self.skip, self.states[2], r, decode_record(r))
        self.seen = len(self.log.records)
        out = self.skip.decide(self.states[0])
        assert out == self.all.decide(self.states[1]) == self.skip.decide(self.states[2])
        assert self.skip.dump(self.states[0]) == self.skip.dump(self.states[2])  # skip path == evolve
        return out

    def settle(self) -> list[c.Event]:
        """Leader a decides and its decisions land in the log."""
        out = self.catch_up()
        for e in out:
            self.evt("scheduling-a", e, dt=0.001)
        return out

    def why(self, job_id: str) -> str:
        st = self.states[0]
        job = st.pending[job_id]
        said = self.skip.why_waiting(st, job)
        assert said == self.all.why_waiting(self.states[1], self.states[1].pending[job_id])
        return said

    def candidates(self) -> list[str]:
        """Leader a's next cycle's candidates (its placement partner then completes it, placing nothing)."""
        cycles = [e for e in self.settle() if isinstance(e, c.SchedulingCycleCompleted)]
        for e in cycles:
            self.evt("placement-a", c.PlacementCycleCompleted(cycle=e.cycle, basis_seq=self.log.seq))
        return [j for e in cycles for j in e.candidates]

    def place(self, job_id: str, service: str, attempt: int = 1) -> None:
        node = "a1" if service.endswith("-a") else "b1"
        self.evt(service, c.JobScheduled(job_id=job_id, attempt=attempt, basis_seq=self.log.seq,
                                         allocations=[c.NodeAllocation(node=node, device_ids=["gpu0"])]))

    def run_b(self, job_id: str, attempt: int = 1) -> None:
        self.place(job_id, "placement-b", attempt)
        self.evt("agent", c.JobStarted(job_id=job_id, attempt=attempt, node="b1"))

    def placed_a(self, out: list[c.Event]) -> None:
        """a's placement partner completes the cycle among ``out`` (placing nothing)."""
        for e in out:
            if isinstance(e, c.SchedulingCycleCompleted):
                self.evt("placement-a", c.PlacementCycleCompleted(cycle=e.cycle, basis_seq=self.log.seq))


def ended(events: list[c.Event]) -> dict[str, str]:
    return {e.job_id: e.reason for e in events if isinstance(e, c.JobDependencyNeverSatisfied)}


# ------------------------------------------------------------------------------ 1. pure cores


def test_an_afterok_on_another_partitions_job_starts_when_it_succeeds():
    s = Shared()
    s.evt("submission", accepted("jb", gpus=1, partition="b"))
    s.evt("submission", accepted("ja", gpus=1, partition="a", dependencies=dep("after-ok", "jb")))
    assert s.candidates() == [] and s.why("ja") == "waiting for jb (after-ok)"
    assert "jb" not in s.states[0].jobs.jobs and "jb" in s.states[0].foreign.codes  # skipped, outcome kept
    s.run_b("jb")
    assert s.candidates() == [] and s.why("ja") == "waiting for jb (after-ok)"
    s.evt("agent", c.JobSucceeded(job_id="jb", attempt=1))
    assert s.candidates() == ["ja"]


def test_the_dependant_may_come_first_and_waits_for_a_job_not_submitted_yet():
    s = Shared()
    s.evt("submission", accepted("ja", gpus=1, partition="a", dependencies=dep("after-ok", "jb")))
    assert s.candidates() == [] and s.why("ja") == "waiting for jb: not submitted yet"
    s.evt("submission", accepted("jb", gpus=1, partition="b"))
    s.run_b("jb")
    s.evt("agent", c.JobSucceeded(job_id="jb", attempt=1))
    assert s.candidates() == ["ja"]


def test_afternotok_afterany_and_after_on_another_partitions_jobs():
    s = Shared()
    for j in ("ok", "bad"):
        s.evt("submission", accepted(j, gpus=1, partition="b"))
    s.evt("submission", accepted("on-fail", gpus=1, partition="a", dependencies=dep("after-not-ok", "bad")))
    s.evt("submission", accepted("never", gpus=1, partition="a", dependencies=dep("after-not-ok", "ok")))
    s.evt("submission", accepted("any", gpus=1, partition="a", dependencies=dep("after-any", "bad")))
    s.evt("submission", accepted("started", gpus=1, partition="a", dependencies=dep("after", "ok")))
    assert s.candidates() == []
    s.run_b("ok")
    assert s.candidates() == ["started"]  # after: ok has started
    s.run_b("bad")
    s.evt("agent", c.JobSucceeded(job_id="ok", attempt=1))
    out = s.settle()
    assert ended(out) == {"never": "ok SUCCEEDED (after-not-ok)"}
    s.placed_a(out)
    s.evt("agent", c.JobFailed(job_id="bad", attempt=1, exit_code=1))
    assert sorted(s.candidates()) == ["any", "on-fail", "started"]


def test_a_failure_the_restart_policy_requeues_has_not_ended_yet():
    """b's job fails once and its on-failure policy requeues it: an afterok on it keeps waiting (it has
    not ended for good) and starts when the second attempt succeeds."""
    s = Shared()
    s.evt("submission", accepted("jb", gpus=1, partition="b", restart_policy="on-failure", max_retries=1))
    s.evt("submission", accepted("ja", gpus=1, partition="a", dependencies=dep("after-ok", "jb")))
    s.evt("submission", accepted("jn", gpus=1, partition="a", dependencies=dep("after-not-ok", "jb")))
    s.catch_up()
    s.run_b("jb")
    s.evt("agent", c.JobFailed(job_id="jb", attempt=1, exit_code=1))
    assert s.candidates() == [] and ended(s.settle()) == {}
    assert s.why("ja") == "waiting for jb (after-ok)"
    s.evt("scheduling-b", c.JobRequeued(job_id="jb", attempt=1, reason="attempt 1 failed"))
    s.run_b("jb", attempt=2)
    s.evt("agent", c.JobSucceeded(job_id="jb", attempt=2))
    out = s.settle()
    assert ended(out) == {"jn": "jb SUCCEEDED (after-not-ok)"}
    assert [j for e in out if isinstance(e, c.SchedulingCycleCompleted) for j in e.candidates] == ["ja"]


def test_a_stale_attempts_end_moves_nothing_and_a_lost_node_requeues():
    s = Shared()
    s.evt("submission", accepted("jb", gpus=1, partition="b"))  # restart policy never, requeue on a lost node
    s.evt("submission", accepted("ja", gpus=1, partition="a", dependencies=dep("after-ok", "jb")))
    s.run_b("jb")
    s.evt("agent", c.JobSucceeded(job_id="jb", attempt=7))  # not its attempt
    assert s.candidates() == []
    s.evt("inventory", c.JobFailed(job_id="jb", attempt=1, node_lost=True, reason="node lost"))
    assert s.candidates() == [] and ended(s.settle()) == {}  # requeued: not ended for good
    s.evt("scheduling-b", c.JobRequeued(job_id="jb", attempt=1))
    s.run_b("jb", attempt=2)
    s.evt("agent", c.JobFailed(job_id="jb", attempt=2, exit_code=3))
    assert ended(s.settle()) == {"ja": "jb ended FAILED, not SUCCEEDED (after-ok)"}


def test_an_afterok_on_another_partitions_array():
    s = Shared()
    for i in range(2):
        s.evt("submission", accepted(f"arr_{i}", gpus=1, partition="b", array="arr", array_index=i))
    s.evt("submission", accepted("ja", gpus=1, partition="a", dependencies=dep("after-ok", "arr")))
    for i in range(2):
        s.run_b(f"arr_{i}")
    s.evt("agent", c.JobSucceeded(job_id="arr_0", attempt=1))
    assert s.candidates() == [] and s.why("ja") == "waiting for arr: 1 of 2 tasks not ended (after-ok)"
    s.evt("agent", c.JobSucceeded(job_id="arr_1", attempt=1))
    assert s.candidates() == ["ja"]


def test_a_checkpoint_of_another_partitions_job_frees_an_aftercheckpoint():
    s = Shared()
    s.evt("submission", accepted("jb", gpus=1, partition="b"))
    s.evt("submission", accepted("ja", gpus=1, partition="a", dependencies=dep("after-checkpoint", "jb")))
    s.run_b("jb")
    assert s.candidates() == []
    s.evt("agent", c.JobCheckpointed(job_id="jb", attempt=1, checkpoint_ref="s3://ck/1"))
    assert s.candidates() == ["ja"]


def test_a_singleton_waits_for_another_partitions_job_of_its_name():
    s = Shared()
    s.evt("submission", accepted("jb", gpus=1, partition="b", user="ann", name="train"))
    s.evt("submission", accepted("other", gpus=1, partition="b", user="bob", name="train"))  # another user
    s.evt("submission", accepted("ja", gpus=1, partition="a", user="ann", name="train", singleton=True))
    assert s.candidates() == [] and s.why("ja") == "singleton: jb, of the same name and user, waits ahead of it"
    s.run_b("jb")
    assert s.candidates() == [] and s.why("ja") == "singleton: jb, of the same name and user, runs"
    # a job of its name accepted after it, in b, does not wait ahead of it ...
    s.evt("submission", accepted("jb2", gpus=1, partition="b", user="ann", name="train"))
    s.evt("agent", c.JobSucceeded(job_id="jb", attempt=1))
    assert s.candidates() == ["ja"]
    # ... but blocks it once it runs (ja was not placed)
    s.run_b("jb2")
    s.catch_up()
    assert s.why("ja") == "singleton: jb2, of the same name and user, runs"
    s.evt("agent", c.JobSucceeded(job_id="jb2", attempt=1))
    assert s.candidates() == ["ja"]


def members(state: Any) -> list[tuple[Any, ...]]:
    """A singleton watcher's members, own and foreign, as comparable rows."""
    return sorted((key, j.job_id, j.state.value, j.accepted_seq) for key, live in state.singletons.live.items()
                  for j in live.values())


def test_a_snapshot_restored_at_any_point_continues_as_the_whole_fold():
    """Dump leader a's state after every record; each restored state equals the folded one, and the
    snapshot format is refused by another (the fingerprint names the foreign jobs' part)."""
    s = Shared()
    s.evt("submission", accepted("jb", gpus=1, partition="b", user="ann", name="train",
                                 restart_policy="on-failure", max_retries=2))
    s.evt("submission", accepted("arr_0", gpus=1, partition="b", array="arr", array_index=0))
    s.evt("submission", accepted("ja", gpus=1, partition="a", user="ann", name="train", singleton=True,
                                 dependencies=dep("after-ok", "jb")))
    s.evt("submission", accepted("jc", gpus=1, partition="a", dependencies=dep("after-any", "arr")))
    s.run_b("jb")
    s.evt("agent", c.JobFailed(job_id="jb", attempt=1, exit_code=1))
    s.run_b("arr_0")
    s.evt("scheduling-b", c.JobRequeued(job_id="jb", attempt=1))
    s.run_b("jb", attempt=2)
    s.evt("agent", c.JobSucceeded(job_id="jb", attempt=2))
    core = s.skip
    state = core.initial()
    for r in s.log.records:
        state = fold_record(core, state, r)[0]
        data = core.dump(state)
        again = core.load(data)
        assert again is not None and core.dump(again) == data
        assert again.never == state.never and core.decide(again) == core.decide(state)
        assert members(again) == members(state)
    for cut in range(0, len(s.log.records), 3):  # restored at a point, then folding the rest: the same state
        restored = core.initial()
        for r in s.log.records[:cut]:
            restored = fold_record(core, restored, r)[0]
        restored = core.load(core.dump(restored))
        for r in s.log.records[cut:]:
            restored = fold_record(core, restored, r)[0]
        assert core.dump(restored) == core.dump(state) and members(restored) == members(state)
    assert state.foreign.get("jb").state.value == "SUCCEEDED" and "jb" not in state.foreign.live
    assert ForeignJobs.from_data(msgspec.msgpack.decode(msgspec.msgpack.encode(state.foreign.data()))).data() \
        == state.foreign.data()
    assert core.fingerprint().endswith("/partitioned/2")


# ------------------------------------------------------------------------------ 2. live


async def test_dependencies_and_a_singleton_across_two_partition_pairs_and_the_audit(nats_server, tmp_path):
    stack = await two_pairs(nats_server.url, tmp_path)
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()

    async def submit(job_id: str, p: str, **kw: Any) -> None:
        await js.publish("horizon.in.acme.submit", job(job_id, p, **kw), headers={"Nats-Msg-Id": job_id})

    try:
        # b's jobs run a while; a's depend on them (and one is a singleton of b's running job's name)
        await submit("b-ok", "b", sim_runtime_s=1.0)
        await submit("b-bad", "b", sim_runtime_s=1.0, sim_exit_code=1)
        await submit("b-name", "b", sim_runtime_s=1.5, user="ann", name="nightly")
        await submit("a-ok", "a", dependencies=[{"kind": "after-ok", "job_id": "b-ok"}])
        await submit("a-notok", "a", dependencies=[{"kind": "after-not-ok", "job_id": "b-bad"}])
        await submit("a-any", "a", dependencies=[{"kind": "after-any", "job_id": "b-bad"}])
        await submit("a-never", "a", dependencies=[{"kind": "after-ok", "job_id": "b-bad"}])
        await submit("a-single", "a", singleton=True, user="ann", name="nightly")
        want = {"b-ok", "b-name", "a-ok", "a-notok", "a-any", "a-single"}
        seen: dict[str, c.Event] = {}
        for _ in range(300):
            for e in events_of(await read_log(nats_server.url)):
                if isinstance(e, c.JobSucceeded | c.JobDependencyNeverSatisfied | c.JobStarted | c.JobFailed):
                    seen.setdefault(f"{type(e).__name__}:{e.job_id}", e)
            if all(f"JobSucceeded:{j}" in seen for j in want) and "JobDependencyNeverSatisfied:a-never" in seen:
                break
            await asyncio.sleep(0.1)
        missing = [j for j in want if f"JobSucceeded:{j}" not in seen]
        assert not missing and "JobDependencyNeverSatisfied:a-never" in seen, (missing, sorted(seen))
    finally:
        await nc.close()
        await stack.stop()
    records = await read_log(nats_server.url)
    at = {}
    for r in records:
        if r.subject.startswith("horizon.evt."):
            body = msgspec.json.decode(r.data)
            if body.get("type") in ("JobStarted", "JobSucceeded", "JobFailed", "JobDependencyNeverSatisfied"):
                at.setdefault((body["type"], body["job_id"]), r.seq)
    # each dependant started after what it waited for ended, the singleton after b's job of its name
    assert at[("JobStarted", "a-ok")] > at[("JobSucceeded", "b-ok")]
    assert at[("JobStarted", "a-notok")] > at[("JobFailed", "b-bad")]
    assert at[("JobStarted", "a-any")] > at[("JobFailed", "b-bad")]
    assert at[("JobStarted", "a-single")] > at[("JobSucceeded", "b-name")]
    assert at[("JobDependencyNeverSatisfied", "a-never")] > at[("JobFailed", "b-bad")]
    never = [msgspec.json.decode(r.data) for r in records if ".JobDependencyNeverSatisfied." in r.subject]
    assert [(e["job_id"], e["source"]) for e in never] == [("a-never", "scheduling-a")], never
    code, body = await audit_json(nats_server.url)
    assert code == 0 and body["mismatches"] == [], json.dumps(body["mismatches"][:2], indent=1)
    assert body["reproduced"] == body["decisions"] > 0 and "scheduling-a" in body["services"]


KINDS = ("after", "after-ok", "after-not-ok", "after-any", "after-checkpoint")


def random_foreign_log(seed: int) -> Feed:
    """Three jobs of partition b with random restart rules, and events about them in a random order, stale
    attempts among them; jobs of a depending on each (every kind), on b's array, and singletons of b's names."""
    import random

    rnd = random.Random(seed)
    f = Feed(PartitionedSchedulingCore(partitions=("z",)))
    cluster(f)
    ids = ["b0", "b1", "arr_0", "arr_1"]
    for j in ids:
        extra = {"array": "arr", "array_index": int(j[-1])} if j.startswith("arr") else {}
        f.evt("submission", accepted(j, gpus=1, partition="b", user="ann", name=rnd.choice(("x", "y")),
                                     restart_policy=rnd.choice(("never", "on-failure", "always")),
                                     max_retries=rnd.choice((0, 1, 2)), requeue=rnd.random() < 0.7,
                                     hold=rnd.random() < 0.2, **extra))
        if rnd.random() < 0.5:  # some dependants and singletons come before the jobs they wait on end
            own(f, rnd, len(f.records))
    attempt = dict.fromkeys(ids, 0)
    for _ in range(60):
        j = rnd.choice(ids)
        a = max(1, attempt[j] + rnd.choice((0, 0, 0, 1, -1)))
        kind = rnd.choices(("sched", "start", "ok", "fail", "lost", "oom", "preempt", "ckpt", "requeue", "cancel",
                            "hold", "release", "unsched", "never"),
                           (6, 6, 2, 2, 1, 1, 1, 2, 4, 0.5, 1, 2, 0.3, 0.3))[0]
        if kind == "sched":
            attempt[j] += 1
            f.evt("placement-b", c.JobScheduled(job_id=j, attempt=attempt[j], basis_seq=f.seq,
                                                allocations=[c.NodeAllocation(node="b1", device_ids=["gpu0"])]))
            continue
        event: c.Event = {
            "start": c.JobStarted(job_id=j, attempt=a, node="b1"),
            "ok": c.JobSucceeded(job_id=j, attempt=a),
            "fail": c.JobFailed(job_id=j, attempt=a, exit_code=1),
            "lost": c.JobFailed(job_id=j, attempt=a, node_lost=True),
            "oom": c.JobFailed(job_id=j, attempt=a, out_of_memory=True),
            "preempt": c.JobPreempted(job_id=j, attempt=a, checkpoint_ref=rnd.choice((None, "ck"))),
            "ckpt": c.JobCheckpointed(job_id=j, attempt=a, checkpoint_ref="ck"),
            "requeue": c.JobRequeued(job_id=j, attempt=a),
            "cancel": c.JobCancelled(job_id=j, attempt=a),
            "hold": c.JobHeld(job_id=j), "release": c.JobReleased(job_id=j),
            "unsched": c.JobUnschedulable(job_id=j, reason="x"),
            "never": c.JobDependencyNeverSatisfied(job_id=j, dependency=c.Dependency(job_id="q"), reason="x"),
        }[kind]
        f.evt("agent", event)
        if rnd.random() < 0.1:
            own(f, rnd, len(f.records))
    return f


def own(f: Feed, rnd: Any, n: int) -> None:
    for target in ("b0", "b1", "arr"):
        kind = rnd.choice(KINDS)
        f.evt("submission", accepted(f"a{n}-{target}-{kind}", gpus=1, partition="a", dependencies=dep(kind, target)))
    f.evt("submission", accepted(f"a{n}-single", gpus=1, partition="a", user="ann", name=rnd.choice(("x", "y")),
                                 singleton=True))


@pytest.mark.parametrize("seed", range(40))
def test_random_logs_of_another_partitions_jobs_give_the_same_answers_as_the_whole_fold(seed):
    """After every record, for every job of a: the same dependency answers and reasons, the same singleton
    blocker, the same jobs that can never start, and the same decisions, as a leader folding every record;
    the evolve path and a snapshot restored there agree too."""
    log = random_foreign_log(seed)
    skip, whole = PartitionedSchedulingCore(partitions=("a",)), FoldsEverything(partitions=("a",))
    st, all_, dec = skip.initial(), whole.initial(), skip.initial()
    for r in log.records:
        st = fold_record(skip, st, r)[0]
        all_ = fold_record(whole, all_, r)[0]
        dec = fold_event(skip, dec, r, decode_record(r))
        assert st.never == all_.never, r.subject
        for job_id, job in st.pending.items():
            other = all_.pending[job_id]
            for d in job.spec.dependencies:
                assert dependency_status(d, st.jobs, st.to_requeue, st.foreign) == \
                    dependency_status(d, all_.jobs, all_.to_requeue), (r.subject, job_id)
            said, expected_why = skip.waiting(st, job), whole.waiting(all_, other)
            if "dependency" in (said.kind, expected_why.kind):  # (the rest names the whole queue's head)
                assert said == expected_why, (r.subject, job_id)
            blocker, expected = st.singletons.blocker(job), all_.singletons.blocker(other)
            assert (blocker and blocker.job_id) == (expected and expected.job_id), (r.subject, job_id)
        assert skip.decide(st) == whole.decide(all_), r.subject
        assert skip.dump(st) == skip.dump(dec)
    restored = skip.load(skip.dump(st))
    assert restored is not None and restored.never == st.never and members(restored) == members(st)
