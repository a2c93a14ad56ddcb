"""Slurm's directives as the services honour them (issue 18): the pure cores of placement, scheduling and
submission, given the specs ``horizon sbatch`` makes (tests/front/test_sbatch.py reads the scripts).

--exclusive, --mem=0, GPUs shared by a node's tasks, --constraint (node features, matching OR),
--nodelist/--exclude, --time-min (backfill's shorter limit, replayed), --dependency=singleton,
--no-requeue, --hold, and submission's verdicts on them.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from events import catalogue as c
from services.domain.features import parse_constraint
from services.placement.core import PlacementCore
from services.runtime.replay import replay_decisions
from services.scheduling.core import SchedulingCore
from services.submission.normalise import Rejection, admit
from tests.helpers import Feed, accepted, node

GiB = 1 << 30


def cycle(n: int, candidates: list[str]) -> c.SchedulingCycleCompleted:
    return c.SchedulingCycleCompleted(id=f"scheduling/SchedulingCycleCompleted/{n}", cycle=n, candidates=candidates,
                                      queued=len(candidates), correlation_id=str(n), source="scheduling", basis_seq=1)


def cluster(*nodes: c.NodeRegistered) -> Feed:
    f = Feed(PlacementCore())
    for n in nodes:
        f.evt("agent", n)
        f.evt("inventory", c.NodeReady(node=n.node, basis_seq=1))
    return f


def labelled(name: str, labels: dict[str, str], **kw: Any) -> c.NodeRegistered:
    return msgspec.structs.replace(node(name, **kw), labels=labels)


def placed(out: list[c.Event]) -> dict[str, c.JobScheduled]:
    return {e.job_id: e for e in out if isinstance(e, c.JobScheduled)}


def blocked(out: list[c.Event]) -> dict[str, c.PlacementBlocked]:
    return {e.job_id: e for e in out if isinstance(e, c.PlacementBlocked)}


def assert_replays(f: Feed) -> None:
    report = replay_decisions(f.core.__class__(), f.records)
    assert report.mismatches == [] and report.reproduced == report.decisions > 0


# ------------------------------------------------------------------------------------------- placement


def test_exclusive_takes_an_empty_node_whole_and_nothing_joins_it():
    f = cluster(node("a"), node("b"))
    f.evt("submission", accepted("small", gpus=1))
    f.evt("submission", accepted("whole", gpus=1, cpus_milli=4000, exclusive=True))
    f.evt("scheduling", cycle(1, ["small", "whole"]))
    out = placed(f.settle())
    assert out["small"].allocations[0].node == "a"
    # Slurm gives an exclusive job all the CPUs and GPUs of its node (memory as asked)
    [whole] = out["whole"].allocations
    assert whole.node == "b" and whole.cpus_milli == 64000 and whole.memory_bytes == GiB
    assert whole.device_ids == [f"gpu{i}" for i in range(8)]
    # nothing else fits beside it: the next job goes to a, a second exclusive job waits for an empty node
    f.evt("submission", accepted("next", gpus=1))
    f.evt("submission", accepted("whole2", gpus=0, exclusive=True))
    f.evt("scheduling", cycle(2, ["next", "whole2"]))
    out2 = f.settle()
    assert placed(out2)["next"].allocations[0].node == "a"
    [reason] = [r for r in blocked(out2)["whole2"].reasons if r.filter == "Exclusive"]
    assert reason.nodes == 2 and "other jobs run there" in reason.reason  # a runs two jobs, b the exclusive one
    assert_replays(f)


def test_mem_0_takes_all_of_each_node_memory_and_waits_while_any_is_in_use():
    f = cluster(node("a", memory=256 * GiB), node("b", memory=512 * GiB))
    f.evt("submission", accepted("some", gpus=1, memory_bytes=10 * GiB))
    f.evt("submission", accepted("all", gpus=1, memory_bytes=0, whole_node_memory=True, nodes=1))
    f.evt("scheduling", cycle(1, ["some", "all"]))
    out = placed(f.settle())
    some_node = out["some"].allocations[0].node
    [whole] = out["all"].allocations
    assert whole.node != some_node
    assert whole.memory_bytes == (256 if whole.node == "a" else 512) * GiB
    f.evt("submission", accepted("more", gpus=0, memory_bytes=0, whole_node_memory=True))
    f.evt("scheduling", cycle(2, ["more"]))
    [why] = [r for r in blocked(f.settle())["more"].reasons if r.filter == "MemoryFree"]
    assert why.nodes == 2 and "memory in use by other jobs (--mem=0 needs all of it)" in why.reason


def test_tasks_share_the_gpus_of_their_node():
    f = cluster(node("a", gpus=2))
    f.evt("submission", accepted("four-on-one", gpus=0, gpus_per_node=1, tasks_per_node=4, cpus_milli=2000))
    f.evt("submission", accepted("eight-on-one", gpus=0, gpus_per_node=1, tasks_per_node=8))
    f.evt("submission", accepted("third", gpus=1))
    f.evt("scheduling", cycle(1, ["four-on-one", "eight-on-one", "third"]))
    out = f.settle()
    [a] = placed(out)["four-on-one"].allocations
    assert (a.device_ids, a.tasks, a.cpus_milli) == (["gpu0"], 4, 8000)  # one GPU for the node's four tasks
    [b] = placed(out)["eight-on-one"].allocations
    assert b.device_ids == ["gpu1"] and b.tasks == 8
    assert "third" in blocked(out)  # both GPUs are held


def test_constraint_picks_nodes_by_gpu_model_and_features():
    f = cluster(labelled("a1", {"features": "ib,skylake"}), labelled("a2", {}),
                labelled("v1", {"nvme": "true"}, gpu_type="v100"), labelled("h1", {}, gpu_type="h100", variant="80gb"))
    f.evt("submission", accepted("any-of", gpus=1, constraint="v100|h100-80gb"))
    f.evt("submission", accepted("ib", gpus=1, constraint="a100&ib"))
    f.evt("submission", accepted("nvme", gpus=0, constraint="nvme"))
    f.evt("submission", accepted("none", gpus=1, constraint="tpu"))
    f.evt("scheduling", cycle(1, ["any-of", "ib", "nvme", "none"]))
    out = f.settle()
    on = {job: e.allocations[0].node for job, e in placed(out).items()}
    assert on["any-of"] in ("v1", "h1") and on["ib"] == "a1" and on["nvme"] == "v1"
    why = blocked(out)["none"]
    assert why.fits_nowhere and why.reasons[0].filter == "Constraint" and why.reasons[0].nodes == 4
    assert "does not have the features tpu (--constraint)" in why.reasons[0].reason


def test_a_bracketed_constraint_gives_all_nodes_of_a_gang_one_alternative():
    nodes = [labelled("r1-a", {"features": "rack1"}), labelled("r1-b", {"features": "rack1"}),
             labelled("r2-a", {"features": "rack2"}), labelled("r2-b", {"features": "rack2"})]
    f = cluster(*nodes)
    # one GPU left on r1-b: three nodes of one rack are not free now, two of rack2 are
    f.evt("submission", accepted("filler", gpus=8, nodelist=("r1-b",)))
    f.evt("submission", accepted("gang", gpus=4, nodes=2, constraint="[rack1|rack2]"))
    f.evt("submission", accepted("plain", gpus=4, nodes=2, constraint="rack1|rack2"))
    f.evt("scheduling", cycle(1, ["filler", "gang", "plain"]))
    out = placed(f.settle())
    assert {a.node for a in out["gang"].allocations} == {"r2-a", "r2-b"}  # rack1 has one free node only
    # without brackets, any mix will do: the free halves of r2-a, r2-b and the empty r1-a
    assert len(out["plain"].allocations) == 2
    assert parse_constraint("[rack1|rack2]").matching and not parse_constraint("rack1|rack2").matching
    assert_replays(f)


def test_nodelist_and_exclude_name_the_nodes():
    f = cluster(*(node(f"n{i}") for i in range(1, 5)))
    f.evt("submission", accepted("listed", gpus=1, nodes=2, nodelist=("n2", "n4")))
    f.evt("submission", accepted("not-first", gpus=8, exclude_nodes=("n1", "n2", "n4")))
    f.evt("submission", accepted("nowhere", gpus=8, exclude_nodes=("n1", "n2", "n3", "n4")))
    f.evt("scheduling", cycle(1, ["listed", "not-first", "nowhere"]))
    out = f.settle()
    assert sorted(a.node for a in placed(out)["listed"].allocations) == ["n2", "n4"]
    assert placed(out)["not-first"].allocations[0].node == "n3"
    why = blocked(out)["nowhere"]
    assert why.fits_nowhere and why.reasons[0].filter == "NodeName" and "excluded (--exclude)" in why.reasons[0].reason


# ------------------------------------------------------------------------------------------- backfill


def test_time_min_lets_backfill_start_a_job_with_a_shorter_limit_recorded_and_replayed():
    """A node of 8 GPUs: 4 held by a running job until t+3600. The head needs all 8 (reserved at t+3600);
    a 2-hour job of 4 GPUs would delay it, but with --time-min=30 it starts now with the time left
    before the reservation as its limit; the same job without --time-min waits."""
    f = cluster(node("a", gpus=8))
    f.evt("submission", accepted("running", gpus=4, time_limit_s=3600.0))
    f.evt("scheduling", cycle(1, ["running"]))
    f.settle()
    start = f.state.jobs.get("running").scheduled_ts  # its limit runs out at start + 3600
    f.evt("agent", c.JobStarted(job_id="running", attempt=1, node="a"), dt=100.0)
    f.evt("submission", accepted("head", gpus=8, time_limit_s=600.0))
    f.evt("submission", accepted("rigid", gpus=4, time_limit_s=7200.0))
    f.evt("submission", accepted("flexible", gpus=4, time_limit_s=7200.0, time_min_s=1800.0))
    f.evt("scheduling", cycle(2, ["head", "rigid", "flexible"]))
    out = f.settle()
    head = blocked(out)["head"]
    assert head.earliest_start_ts == start + 3600.0
    flexible = placed(out)["flexible"]
    now = flexible.ts
    assert flexible.backfilled and flexible.time_limit_s == float(int(start + 3600.0 - now))
    assert 1800.0 <= flexible.time_limit_s < 7200.0
    [why] = blocked(out)["rigid"].reasons
    assert why.filter == "Backfill" and "would delay the reservation of head" in why.reason
    # the job table keeps the attempt's own limit (what the agent enforces, what reservations count)
    assert f.state.jobs.get("flexible").limit_s == flexible.time_limit_s
    assert f.state.jobs.get("running").limit_s == 3600.0
    assert_replays(f)


def test_time_min_is_not_used_when_the_full_limit_delays_nothing_nor_below_its_floor():
    f = cluster(node("a", gpus=8))
    f.evt("submission", accepted("running", gpus=4, time_limit_s=3600.0))
    f.evt("scheduling", cycle(1, ["running"]))
    f.settle()
    f.evt("submission", accepted("head", gpus=8))
    f.evt("submission", accepted("short", gpus=4, time_limit_s=600.0, time_min_s=60.0))
    f.evt("submission", accepted("floor", gpus=4, time_limit_s=7200.0, time_min_s=3599.0))
    f.evt("scheduling", cycle(2, ["head", "short", "floor"]))
    out = f.settle()
    assert placed(out)["short"].time_limit_s == 600.0  # ends before the reservation: its own limit
    assert "floor" in blocked(out)  # less than 3599 s are left before the reservation


# ------------------------------------------------------------------------------------------- scheduling


def _sched() -> Feed:
    f = Feed(SchedulingCore())
    f.evt("agent", node("n1"))
    return f


def _next_cycle(f: Feed, n: int) -> list[str]:
    out = f.settle()
    cycles = [e for e in out if isinstance(e, c.SchedulingCycleCompleted)]
    f.evt("placement", c.PlacementCycleCompleted(cycle=n, scheduled=0))
    return cycles[0].candidates if cycles else []


def _run(f: Feed, job_id: str) -> None:
    f.evt("placement", c.JobScheduled(job_id=job_id, attempt=1, allocations=[c.NodeAllocation(node="n1")]))
    f.evt("agent", c.JobStarted(job_id=job_id, attempt=1, node="n1"))


def test_singleton_runs_one_job_of_a_name_and_user_at_a_time():
    f = _sched()
    f.evt("submission", accepted("nightly-1", name="nightly", user="ann", singleton=True))
    f.evt("submission", accepted("nightly-2", name="nightly", user="ann", singleton=True))
    f.evt("submission", accepted("bob-nightly", name="nightly", user="bob", singleton=True))
    f.evt("submission", accepted("other", name="train", user="ann", singleton=True))
    assert _next_cycle(f, 1) == ["nightly-1", "bob-nightly", "other"]  # the second waits behind the first
    _run(f, "nightly-1")
    f.evt("submission", accepted("plain", name="nightly", user="ann"))  # no singleton itself: not held back
    assert _next_cycle(f, 2) == ["bob-nightly", "other", "plain"]
    job = f.state.jobs.get("nightly-2")
    assert f.core.why_waiting(f.state, job) == "singleton: nightly-1, of the same name and user, runs"
    f.evt("agent", c.JobSucceeded(job_id="nightly-1", attempt=1, node="n1"))
    # "plain" waits too, but it was submitted after nightly-2: it does not hold nightly-2 back
    assert "nightly-2" in _next_cycle(f, 3)


def test_singleton_waits_for_an_earlier_pending_job_of_its_name_singleton_or_not():
    f = _sched()
    f.evt("submission", accepted("first", name="etl", user="ann"))
    f.evt("submission", accepted("second", name="etl", user="ann", singleton=True))
    assert _next_cycle(f, 1) == ["first"]
    f.evt("agent", c.JobCancelled(job_id="first", reason="cancelled"))
    assert _next_cycle(f, 2) == ["second"]


def test_singleton_survives_a_snapshot():
    f = _sched()
    f.evt("submission", accepted("a", name="n", user="u", singleton=True))
    f.evt("submission", accepted("b", name="n", user="u", singleton=True))
    _next_cycle(f, 1)
    _run(f, "a")
    loaded = f.core.load(f.core.dump(f.state))
    assert loaded is not None and loaded.singletons.blocker(loaded.jobs.get("b")).job_id == "a"


@pytest.mark.parametrize("how", ["preempted", "node-lost"])
def test_no_requeue_ends_the_job_where_requeue_would_run_it_again(how):
    f = _sched()
    f.evt("submission", accepted("again", requeue=True))
    f.evt("submission", accepted("once", requeue=False))
    _next_cycle(f, 1)
    for job_id in ("again", "once"):
        _run(f, job_id)
        if how == "preempted":
            f.evt("agent", c.JobPreempted(job_id=job_id, attempt=1, for_job="vip"))
        else:
            f.evt("inventory", c.JobFailed(job_id=job_id, attempt=1, node_lost=True, reason="node n1 lost",
                                           basis_seq=1))
    requeued = [e.job_id for e in f.settle() if isinstance(e, c.JobRequeued)]
    assert requeued == ["again"]
    assert f.state.jobs.get("once").state.value == ("PREEMPTED" if how == "preempted" else "FAILED")


def test_a_job_submitted_held_waits_for_its_release():
    f = _sched()
    f.evt("submission", accepted("held", hold=True, scheduling_timeout_s=60.0))
    f.evt("submission", accepted("free"))
    assert _next_cycle(f, 1) == ["free"]
    assert f.state.jobs.get("held").state.value == "HELD"
    f.evt("submission", c.JobReleased(job_id="held"))
    assert _next_cycle(f, 2) == ["held", "free"]
    assert f.state.deadlines["held"] == pytest.approx(f.time + 60.0, abs=2.0)  # the timeout runs from the release


def test_a_job_with_a_begin_time_waits_for_it():
    f = _sched()
    f.evt("submission", accepted("later", begin_ts=f.time + 30.0))
    f.evt("submission", accepted("now"))
    assert _next_cycle(f, 1) == ["now"]
    assert f.core.why_waiting(f.state, f.state.jobs.get("later")).endswith("(--begin)")
    f.evt("clock", c.ClockTicked(now_ts=0.0), dt=31.0)  # the live ticker moves the log's time
    assert _next_cycle(f, 2) == ["later", "now"]


# ------------------------------------------------------------------------------------------- submission


def _admit(registered: list[c.NodeRegistered] | None = None, **fields: Any) -> c.JobSpec:
    from services.domain.features import node_features

    features = {n.node: node_features(n.labels, [(d.type, d.variant) for d in n.gpus]) for n in registered or []}
    models = {(d.type, d.variant) for n in registered or [] for d in n.gpus} or {("a100", None)}
    sub = c.JobSubmitted(job_id="j", tenant="acme", command=["true"], **fields)
    [(_, spec)] = admit(sub, subject_tenant="acme", gpu_models=models, features=features)
    return spec


def test_submission_normalises_the_directives():
    spec = _admit(gpus_per_node=1, tasks_per_node=4, resources=c.ResourceRequest(gpu_type="a100"),
                  constraint=" A100 | v100 ", nodelist=["n[1-2]"], nodes=2, exclude_nodes=["n9"], requeue=False,
                  time_limit_s=7200.0, time_min_s=1800.0, singleton=True, hold=True, exclusive=True,
                  whole_node_memory=True, limit_signal=c.LimitSignal(signal="SIGUSR1", before_s=120, batch_only=True),
                  begin_ts=2e9)
    assert (spec.gpus, spec.gpus_per_node, spec.gpus_on_node, spec.total_gpus) == (0, 1, 1, 2)
    assert spec.constraint == "a100|v100" and spec.nodelist == ("n1", "n2") and spec.exclude_nodes == ("n9",)
    assert (spec.requeue, spec.time_min_s, spec.singleton, spec.hold, spec.exclusive) == (False, 1800.0, True, True, True)
    assert spec.whole_node_memory and spec.memory_bytes == 0
    assert spec.limit_signal == c.LimitSignal(signal="USR1", before_s=120.0, batch_only=True)
    assert spec.begin_ts == 2e9
    # a submission without them means what it always meant
    plain = _admit()
    assert (plain.gpus_per_node, plain.requeue, plain.time_min_s, plain.limit_signal, plain.hold) == (
        0, True, 0.0, None, False)


@pytest.mark.parametrize("fields, field, why", [
    (dict(gpus_per_node=2, resources=c.ResourceRequest(gpus=1)), "gpus_per_node", "exclude each other"),
    (dict(constraint="a*2"), "constraint", "node counts"),
    (dict(constraint="v100"), "constraint", "no registered node has the features v100; the nodes have: a100"),
    (dict(nodelist=["n[1-3]"], nodes=2), "nodelist", "names 3 node(s) and the job has 2"),
    (dict(nodelist=["n1"], exclude_nodes=["n1"]), "exclude_nodes", "n1 both listed and excluded"),
    (dict(nodelist=["n2"]), "nodelist", "n2: no such node is registered (the cluster has 1)"),
    (dict(time_limit_s=600.0, time_min_s=1200.0), "time_min_s", "at most the time limit"),
    (dict(limit_signal=c.LimitSignal(signal="BOGUS")), "limit_signal.signal", "is not a signal"),
    (dict(limit_signal=c.LimitSignal(signal="USR1", before_s=-1)), "limit_signal.before_s", "must be 0 to 65535"),
])
def test_submission_refuses_directives_it_cannot_honour(fields, field, why):
    with pytest.raises(Rejection) as info:
        _admit([node("n1")], **fields)
    assert info.value.field == field and why in info.value.reason
