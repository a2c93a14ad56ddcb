"""Elastic gangs (issue 19): --nodes MIN-MAX and minAvailable at submission, the largest size that fits
at placement, growth when room frees (JobResized), a shrink instead of a preemption, the assembly
timeout, the world size in the job's environment; pure cores (Feed), each with its arithmetic."""

from __future__ import annotations

import pytest

from events import catalogue as c
from services.nodes.agent.core import AgentCore
from services.nodes.job_environment import job_environment
from services.domain.jobs import JobState
from services.domain.protocol import Record
from services.placement.core import PlacementCore
from services.preemption.core import PreemptionCore
from services.scheduling.core import SchedulingCore
from services.submission.normalise import Rejection, normalise
from events.codec import encode
from services.front.host.check import check_log
from services.runtime.replay import replay_decisions
from tests.helpers import Feed, accepted, node, job_file

GIB = 1 << 30


def cycle(n: int, candidates: list[str]) -> c.SchedulingCycleCompleted:
    return c.SchedulingCycleCompleted(id=f"scheduling/SchedulingCycleCompleted/{n}", cycle=n, candidates=candidates,
                                      queued=len(candidates), correlation_id=str(n), source="scheduling", basis_seq=1)


def placement(*names: str, gpus: int = 8) -> Feed:
    f = Feed(PlacementCore())
    for name in names:
        f.evt("agent", node(name, gpus=gpus))
        f.evt("inventory", c.NodeReady(node=name, basis_seq=1))
    return f


def gpu_alloc(on: str, first: int, gpus: int) -> c.NodeAllocation:
    return c.NodeAllocation(node=on, device_ids=[f"gpu{first + k}" for k in range(gpus)], cpus_milli=1000,
                            memory_bytes=GIB)


def run(f: Feed, job_id: str, *allocs: c.NodeAllocation, **kw) -> None:
    f.evt("submission", accepted(job_id, **kw), dt=0.0)
    f.evt("placement", c.JobScheduled(job_id=job_id, attempt=1, allocations=list(allocs)), dt=0.0)
    f.evt("agent", c.JobStarted(job_id=job_id, attempt=1, node=allocs[0].node), dt=1.0)


# ------------------------------------------------------------------ submission


def submitted(**kw) -> c.JobSubmitted:
    return c.JobSubmitted(job_id="e", tenant="acme", command=["true"], **kw)


def test_a_node_range_and_min_available_become_the_least_nodes_of_the_spec():
    spec = normalise(submitted(nodes=4, min_nodes=2), subject_tenant="acme", gpu_models=set())
    assert (spec.nodes, spec.min_nodes, spec.elastic, spec.least_nodes) == (4, 2, True, 2)
    # minAvailable 5 tasks of 2 per node: ceil(5 / 2) = 3 nodes at least
    spec = normalise(submitted(nodes=4, tasks_per_node=2, min_available=5), subject_tenant="acme", gpu_models=set())
    assert (spec.nodes, spec.min_nodes) == (4, 3)
    # both: the larger least wins (min_nodes 2, minAvailable 7 tasks of 2 = 4 nodes -> 4 = the most: rigid)
    spec = normalise(submitted(nodes=4, tasks_per_node=2, min_nodes=2, min_available=7), subject_tenant="acme",
                     gpu_models=set())
    assert (spec.nodes, spec.min_nodes, spec.elastic) == (4, 0, False)
    # a range of one count is a rigid job, as before
    spec = normalise(submitted(nodes=3, min_nodes=3), subject_tenant="acme", gpu_models=set())
    assert (spec.min_nodes, spec.elastic, spec.least_nodes) == (0, False, 3)
    spec = normalise(submitted(nodes=3, assembly_timeout_s=60), subject_tenant="acme", gpu_models=set())
    assert spec.assembly_timeout_s == 60.0


def test_a_partitions_max_nodes_limits_an_elastic_gangs_least_and_cuts_its_most():
    from services.domain.partitions import Partitions

    parts = Partitions()
    assert parts.apply(c.PartitionConfigured(name="small", nodes=["ALL"], default=True, max_nodes=3),
                       "horizon.in._admin.partition") is None
    warnings: list[str] = []
    spec = normalise(submitted(nodes=6, min_nodes=2), subject_tenant="acme", gpu_models=set(), partitions=parts,
                     warnings=warnings)
    assert (spec.partition, spec.nodes, spec.min_nodes) == ("small", 3, 2)
    assert warnings == ["at most 3 nodes in partition 'small' (MaxNodes): the job grows to 3, not to 6"]
    with pytest.raises(Rejection) as info:  # its least must fit the limit, as a rigid job's nodes must
        normalise(submitted(nodes=6, min_nodes=4), subject_tenant="acme", gpu_models=set(), partitions=parts)
    assert info.value.reason.startswith("4 nodes is above partition 'small'")


@pytest.mark.parametrize("fields, field, words", [
    ({"nodes": 2, "min_nodes": 3}, "min_nodes", "cannot exceed the most"),
    ({"nodes": 2, "min_available": 3}, "min_available", "more than the gang's 2 x 1"),
    ({"nodes": 2, "min_nodes": 0}, "min_nodes", ""),
    ({"nodes": 2, "assembly_timeout_s": 0}, "assembly_timeout_s", "more than 0"),
    ({"nodes": 3, "min_nodes": 2, "nodelist": ["a", "b", "c"]}, "min_nodes", "cannot be elastic"),
])
def test_what_an_elastic_submission_may_not_say(fields, field, words):
    with pytest.raises(Rejection) as info:
        normalise(submitted(**fields), subject_tenant="acme", gpu_models=set())
    assert info.value.field == field and words in info.value.reason


def test_sbatch_node_ranges_make_elastic_jobs_whose_counts_the_agent_gives():
    from tests.front.test_sbatch import parse, problems

    fields = parse("-N 2-4\n--ntasks-per-node=2")
    assert (fields["nodes"], fields["min_nodes"], fields["tasks_per_node"]) == (4, 2, 2)
    # the counts change as it resizes: the agent's environment gives them, not the submission's
    assert not {"SLURM_NNODES", "SLURM_JOB_NUM_NODES", "SLURM_NTASKS"} & fields["env"].keys()
    assert parse("--nodes=3")["env"]["SLURM_NNODES"] == "3" and "min_nodes" not in parse("--nodes=3")
    assert "give --ntasks-per-node: an elastic job's tasks follow its nodes" in problems("-N 2-4\n-n 8")
    assert "the most nodes is fewer than the least" in problems("-N 4-2")


def test_sbatch_dry_run_of_a_script_with_a_node_range_directive(tmp_path):
    import json

    from tests.front.test_sbatch import _invoke

    script = tmp_path / "elastic.sh"
    script.write_text("#!/bin/bash\n#SBATCH --nodes=2-4 --ntasks-per-node=8 --gpus-per-node=8\n"
                      "torchrun --nnodes=$SLURM_JOB_MIN_NODES:$SLURM_JOB_MAX_NODES train.py\n")
    code, out, err = _invoke("sbatch", "--dry-run", "--job-id", "el", str(script))
    assert code == 0, err
    sub = json.loads(out)
    assert (sub["nodes"], sub["min_nodes"], sub["tasks_per_node"], sub["gpus_per_node"]) == (4, 2, 8, 8)
    assert "SLURM_NNODES" not in sub["env"]


def test_submit_reads_a_node_range():
    import click

    from services.front.cli.submit_options import parse_node_range

    assert parse_node_range("2-4") == (2, 4) and parse_node_range("3") == (None, 3)
    assert parse_node_range("3-3") == (None, 3)  # one count: rigid
    with pytest.raises(click.BadParameter):
        parse_node_range("4-2")
    with pytest.raises(click.BadParameter):
        parse_node_range("two")


# ------------------------------------------------------------------ placement: the largest size that fits


def test_an_elastic_gang_starts_on_as_many_nodes_as_fit_and_never_below_its_least():
    f = placement("a", "b", "c", "d")
    run(f, "busy", gpu_alloc("c", 0, 8), gpu_alloc("d", 0, 8), gpus=8, nodes=2)
    # 8 GPUs per node on 2 to 4 nodes: a and b are free, c and d full -> it starts on 2
    f.evt("submission", accepted("el", gpus=8, nodes=4, min_nodes=2))
    f.evt("scheduling", cycle(1, ["el"]))
    scheduled, done = f.settle()
    assert isinstance(scheduled, c.JobScheduled) and [a.node for a in scheduled.allocations] == ["a", "b"]
    assert done.scheduled == 1 and f.state.elastic == {"el"}  # below its most: it may grow


def test_an_elastic_gang_whose_least_does_not_fit_waits_and_says_its_least():
    f = placement("a", "b", "c")
    run(f, "busy", gpu_alloc("b", 0, 8), gpu_alloc("c", 0, 8), gpus=8, nodes=2)
    f.evt("submission", accepted("el", gpus=8, nodes=3, min_nodes=2))
    f.evt("scheduling", cycle(1, ["el"]))
    blocked, done = f.settle()
    assert isinstance(blocked, c.PlacementBlocked) and done.blocked == 1
    assert [r.reason for r in blocked.reasons if r.filter == "Gang"] == [
        "only 1 of the 2 nodes the gang needs at least fit"]


# ------------------------------------------------------------------ growth


def test_an_elastic_job_grows_into_room_no_candidate_wanted_keeping_its_first_node_first():
    f = placement("a", "b", "c", "d")
    f.evt("submission", accepted("busy", gpus=8, nodes=2))
    f.evt("scheduling", cycle(1, ["busy"]))
    assert [a.node for a in f.settle()[0].allocations] == ["a", "b"]
    f.evt("agent", c.JobStarted(job_id="busy", attempt=1, node="a"))
    f.evt("submission", accepted("el", gpus=8, nodes=4, min_nodes=2))
    f.evt("scheduling", cycle(2, ["el"]))
    assert [a.node for a in f.settle()[0].allocations] == ["c", "d"]
    # busy ends: a cycle with no candidates (the scheduler's, for a job below its most) grows el to 4
    f.evt("agent", c.JobSucceeded(job_id="busy", attempt=1))
    f.evt("scheduling", cycle(3, []))
    resized, done = f.settle()
    assert isinstance(resized, c.JobResized) and done.scheduled == 0
    assert [a.node for a in resized.allocations] == ["c", "d", "a", "b"]
    assert (resized.nodes, resized.previous_nodes, resized.for_job) == (4, 2, "")
    assert resized.reason == "grew from 2 to 4 of its 4 nodes: a, b free after cycle 3"
    assert f.state.cluster.nodes["a"].jobs.keys() == {"el"} and not f.state.elastic
    assert f.decide() == []  # at its most: it grows no more
    assert check_log(f.records).ok
    report = replay_decisions(PlacementCore(), f.records)
    assert report.decisions and report.reproduced == report.decisions and not report.mismatches


def test_growth_waits_while_a_candidate_is_blocked():
    f = placement("a", "b", "c")
    f.evt("submission", accepted("el", gpus=8, nodes=3, min_nodes=1))
    run(f, "busy", gpu_alloc("b", 0, 4), gpu_alloc("c", 0, 4), gpus=4, nodes=2)
    f.evt("scheduling", cycle(1, ["el"]))
    scheduled, _ = f.settle()
    assert [a.node for a in scheduled.allocations] == ["a"]  # b and c have 4 GPUs free, it needs 8 per node
    # a wide job waits for 2 whole nodes: when busy ends, wide is placed first, and el may not take b or c
    f.evt("submission", accepted("wide", gpus=8, nodes=2))
    f.evt("scheduling", cycle(2, ["wide"]))
    assert isinstance(f.settle()[0], c.PlacementBlocked)
    f.evt("agent", c.JobSucceeded(job_id="busy", attempt=1))
    f.evt("scheduling", cycle(3, ["wide"]))
    out = f.settle()
    assert [type(e).__name__ for e in out] == ["JobScheduled", "PlacementCycleCompleted"]
    assert [a.node for a in out[0].allocations] == ["b", "c"]


def test_a_growth_and_a_shrink_that_cross_in_the_log_apply_only_the_first_everywhere():
    """Placement grows el from [a, b] to [a, b, c] while preemption, on the same view, shrinks it to [a]:
    whichever lands first applies; the other was decided on an allocation that is gone and changes
    nothing, in every fold (so the ledger, the holds and the agents agree)."""
    from services.domain.jobs import JobTable

    grow = c.JobResized(job_id="el", attempt=1, allocations=[gpu_alloc(n, 0, 8) for n in "abc"], nodes=3,
                        previous_nodes=2)
    shrink = c.JobResized(job_id="el", attempt=1, allocations=[gpu_alloc("a", 0, 8)], nodes=1, previous_nodes=2,
                          for_job="vip")
    for first, second, after in ((grow, shrink, "abc"), (shrink, grow, "a")):
        table = JobTable()
        table.apply(accepted("el", gpus=8, nodes=3, min_nodes=1), 1, 0.0)
        table.apply(c.JobScheduled(job_id="el", attempt=1, allocations=[gpu_alloc(n, 0, 8) for n in "ab"]), 2, 0.0)
        assert table.resize_applies(first)
        table.apply(first, 3, 0.0)
        assert not table.resize_applies(second)
        table.apply(second, 4, 0.0)
        assert "".join(a.node for a in table.jobs["el"].allocations) == after
    # never off its first node, never a node twice, never another attempt
    table = JobTable()
    table.apply(accepted("el", gpus=8, nodes=3, min_nodes=1), 1, 0.0)
    table.apply(c.JobScheduled(job_id="el", attempt=1, allocations=[gpu_alloc(n, 0, 8) for n in "ab"]), 2, 0.0)
    for bad in (c.JobResized(job_id="el", attempt=1, allocations=[gpu_alloc("b", 0, 8)], nodes=1, previous_nodes=2),
                c.JobResized(job_id="el", attempt=1, allocations=[gpu_alloc(n, 0, 8) for n in "aba"], nodes=3,
                             previous_nodes=2),
                c.JobResized(job_id="el", attempt=2, allocations=[gpu_alloc(n, 0, 8) for n in "abc"], nodes=3,
                             previous_nodes=2)):
        assert not table.resize_applies(bad)


# ------------------------------------------------------------------ scheduling: cycles for growth, assembly


def test_the_scheduler_calls_a_cycle_for_an_elastic_job_below_its_most_when_room_frees():
    f = Feed(SchedulingCore())
    f.evt("agent", node("a"))
    f.evt("submission", accepted("el", gpus=8, nodes=2, min_nodes=1))
    (first,) = [e for e in f.settle() if isinstance(e, c.SchedulingCycleCompleted)]
    f.evt("placement", c.JobScheduled(job_id="el", attempt=1, allocations=[gpu_alloc("a", 0, 8)]))
    f.evt("placement", c.PlacementCycleCompleted(cycle=first.cycle, basis_seq=f.seq))
    assert f.state.growable == {"el"} and not f.state.pending
    assert f.core.load(f.core.dump(f.state)).growable == {"el"}  # rebuilt from a snapshot
    assert not [e for e in f.settle() if isinstance(e, c.SchedulingCycleCompleted)]  # nothing changed since
    f.evt("agent", node("b"))  # room: a new node
    (grow,) = [e for e in f.settle() if isinstance(e, c.SchedulingCycleCompleted)]
    assert grow.candidates == []
    billed = f.state.charges["el"].rate  # fair share bills the one node it holds: 8 GPUs + 1 core at 1/16
    assert billed == 8 + 1 / 16
    f.evt("placement", c.JobResized(job_id="el", attempt=1, allocations=[gpu_alloc("a", 0, 8), gpu_alloc("b", 0, 8)],
                                    nodes=2, previous_nodes=1))
    assert f.state.growable == set()
    assert f.state.charges["el"].rate == 2 * billed  # from now on, both nodes (quotas hold its most throughout)
    assert f.state.charges["el"].amount.gpus == 16


def tick(f: Feed, dt: float) -> None:
    f.evt("inventory", c.ClockTicked(now_ts=f.time + dt), dt=dt)


def test_a_gang_that_cannot_assemble_in_time_ends_with_the_assembly_reason():
    f = Feed(SchedulingCore())
    f.evt("agent", node("a"))
    f.evt("submission", accepted("gang", gpus=8, nodes=3, min_nodes=2, assembly_timeout_s=60.0,
                                 scheduling_timeout_s=600.0), dt=0.0)
    accepted_at = f.time
    f.settle()
    f.evt("placement", c.PlacementBlocked(job_id="gang", cycle=1, reasons=[c.BlockReason(
        reason="only 1 of the 2 nodes the gang needs at least fit", nodes=1, filter="Gang")]))
    f.evt("placement", c.PlacementCycleCompleted(cycle=1, blocked=1))
    tick(f, accepted_at + 59.0 - f.time)
    assert not [e for e in f.settle() if isinstance(e, c.JobUnschedulable)]
    tick(f, 1.0)  # 60 s after acceptance: the assembly timeout, not the 600 s one
    (ended,) = [e for e in f.settle() if isinstance(e, c.JobUnschedulable)]
    assert ended.reason.startswith("assembly timeout: the gang did not assemble at least 2 nodes within 60 s: ")
    assert "only 1 of the 2 nodes the gang needs at least fit" in ended.reason
    assert f.state.jobs.get("gang").state is JobState.UNSCHEDULABLE


def test_a_one_node_job_has_no_assembly_to_time_out():
    f = Feed(SchedulingCore())
    f.evt("submission", accepted("one", gpus=1, assembly_timeout_s=60.0))
    tick(f, 120.0)
    assert not [e for e in f.settle() if isinstance(e, c.JobUnschedulable)]


# ------------------------------------------------------------------ preemption: shrink instead


def preemption(*names: str) -> Feed:
    f = Feed(PreemptionCore())
    for name in names:
        f.evt("agent", node(name, gpus=8))
        f.evt("inventory", c.NodeReady(node=name, basis_seq=1))
    return f


def left_blocked(f: Feed, n: int, *job_ids: str) -> None:
    f.evt("scheduling", c.SchedulingCycleCompleted(cycle=n, candidates=list(job_ids), basis_seq=1))
    f.evt("placement", c.PlacementCycleCompleted(cycle=n, blocked=len(job_ids)))


def test_an_elastic_victim_is_shrunk_to_make_room_instead_of_preempted():
    f = preemption("a", "b", "c", "d")
    # el (low) runs on all 4 nodes, 2 at least; a critical 2-node gang needs 2 whole nodes
    run(f, "el", *(gpu_alloc(n, 0, 8) for n in "abcd"), gpus=8, nodes=4, min_nodes=2, priority_class="low")
    f.evt("submission", accepted("vip", gpus=8, nodes=2, priority_class="critical"))
    left_blocked(f, 1, "vip")
    from projections.scheduling import preempt_report  # horizon preempt vip --dry-run

    report = preempt_report(f.core, f.state, "vip")
    assert report["victims"] == [] and report["nodes"] == ["b", "c"]
    assert [(s["job_id"], s["nodes"], s["gives_back"]) for s in report["shrinks"]] == [
        ("el", ["a", "b", "c", "d"], ["b", "c"])]
    out = f.settle()
    assert [type(e).__name__ for e in out] == ["JobResized"]
    (shrink,) = out
    # node by node: a is its first node (kept); b and c give it the 2 nodes it needs; d stays
    assert [a.node for a in shrink.allocations] == ["a", "d"]
    assert (shrink.nodes, shrink.previous_nodes, shrink.for_job) == (2, 4, "vip")
    assert shrink.reason.startswith("shrunk from 4 to 2 nodes for vip (critical), giving back b, c: class low")
    assert f.state.held == {"b": frozenset({"vip"}), "c": frozenset({"vip"})}
    assert f.state.jobs.get("el").state is JobState.RUNNING
    assert f.decide() == []  # its round is over: no more until a cycle leaves vip blocked again
    assert check_log(f.records).ok
    report = replay_decisions(PreemptionCore(), f.records)
    assert report.decisions == report.reproduced == 1 and not report.mismatches


def test_a_shrink_that_cannot_make_the_room_leaves_it_to_preemption_whole():
    f = preemption("a", "b", "c")
    run(f, "el", *(gpu_alloc(n, 0, 8) for n in "abc"), gpus=8, nodes=3, min_nodes=2, priority_class="low")
    f.evt("submission", accepted("vip", gpus=8, nodes=2, priority_class="critical"))
    left_blocked(f, 1, "vip")
    # shrinking gives 1 node at most (3 - 2): not the 2 vip needs -> el is preempted whole
    (request,) = f.settle()
    assert isinstance(request, c.PreemptionRequested) and request.job_id == "el"


def test_an_elastic_preemptor_makes_room_for_its_least_only():
    f = preemption("a", "b")
    run(f, "low1", gpu_alloc("a", 0, 8), gpus=8, priority_class="low")
    run(f, "low2", gpu_alloc("b", 0, 8), gpus=8, priority_class="low")
    f.evt("submission", accepted("vip", gpus=8, nodes=2, min_nodes=1, priority_class="critical"))
    left_blocked(f, 1, "vip")
    requests = f.settle()
    assert [e.job_id for e in requests] == ["low2"]  # one node (its least), the youngest victim's


# ------------------------------------------------------------------ inventory: a lost node


def test_an_elastic_gang_that_loses_nodes_goes_on_without_them_when_it_can():
    """el (1 to 4 nodes) on a, b, c; b is lost: it goes on with a and c (JobResized by inventory). rigid
    (2 nodes) on d, e loses e: it fails as before. small (2 to 3) on f, g loses g: 1 left is below its
    least: it fails. first (2 to 3) on i, j, k loses i, its first node: it fails."""
    from services.inventory.core import InventoryCore

    f = Feed(InventoryCore())
    for name in "abcdefghijk":
        f.evt("agent", node(name))
    f.settle()

    def placed(job_id: str, on: str, **kw) -> None:
        f.evt("submission", accepted(job_id, gpus=8, **kw))
        f.evt("placement", c.JobScheduled(job_id=job_id, attempt=1, allocations=[gpu_alloc(n, 0, 8) for n in on]))
        f.evt("agent", c.JobStarted(job_id=job_id, attempt=1, node=on[0]))

    placed("el", "abc", nodes=4, min_nodes=1)
    placed("rigid", "de", nodes=2)
    placed("small", "fg", nodes=3, min_nodes=2)
    placed("first", "ijk", nodes=3, min_nodes=2)
    for lost in "begi":
        f.evt("inventory", c.NodeLost(node=lost, reason="no heartbeat"))
    out = f.settle()
    assert sorted((type(e).__name__, e.job_id) for e in out) == [
        ("JobFailed", "first"), ("JobFailed", "rigid"), ("JobFailed", "small"), ("JobResized", "el")]
    (resized,) = [e for e in out if isinstance(e, c.JobResized)]
    assert [a.node for a in resized.allocations] == ["a", "c"] and (resized.previous_nodes, resized.nodes) == (3, 2)
    assert resized.reason == "node b lost: shrunk from 3 to 2 nodes (at least 1)"
    assert f.state.jobs.get("el").state is JobState.RUNNING and f.state.cluster.nodes["b"].jobs == {}
    assert f.decide() == []
    assert check_log(f.records).ok
    report = replay_decisions(InventoryCore(), f.records)
    assert report.decisions == report.reproduced and not report.mismatches


def test_an_elastic_gang_gives_back_nodes_with_a_no_execute_taint_instead_of_being_evicted():
    """el (1 to 3 nodes) on a, b, c. b is tainted gpu=broken:NoExecute: el gives b back (JobResized, the
    eviction's 30 s of grace for its tasks there) and runs on. Then its first node a is tainted: it
    cannot go on without it, and is evicted whole as any job (PreemptionRequested)."""
    from services.inventory.core import InventoryCore

    f = Feed(InventoryCore())
    for name in "abc":
        f.evt("agent", node(name))
    f.settle()
    f.evt("submission", accepted("el", gpus=8, nodes=3, min_nodes=1))
    f.evt("placement", c.JobScheduled(job_id="el", attempt=1, allocations=[gpu_alloc(n, 0, 8) for n in "abc"]))
    f.evt("agent", c.JobStarted(job_id="el", attempt=1, node="a"))
    broken = c.Taint(key="gpu", value="broken", effect="NoExecute")
    f.admin("node", c.NodeCommandIssued(node="b", action="taint", taint=broken))
    (tainted,) = f.settle()  # the taint's answer, then what it means for the jobs there
    (resized,) = f.settle()
    assert isinstance(tainted, c.NodeTaintsChanged) and isinstance(resized, c.JobResized)
    assert [a.node for a in resized.allocations] == ["a", "c"] and resized.grace_period_s == 30.0
    assert resized.reason == "node b taint gpu=broken:NoExecute is not tolerated: shrunk from 3 to 2 nodes (at least 1)"
    assert f.decide() == []
    f.admin("node", c.NodeCommandIssued(node="a", action="taint", taint=broken))
    f.settle()
    (evicted,) = f.settle()
    assert isinstance(evicted, c.PreemptionRequested) and evicted.job_id == "el" and evicted.for_job == ""
    assert check_log(f.records).ok
    report = replay_decisions(InventoryCore(), f.records)
    assert report.decisions == report.reproduced and not report.mismatches


# ------------------------------------------------------------------ the agent and the job's environment


def test_the_world_size_is_in_the_environment_and_the_launching_agent_is_told_of_a_resize():
    spec = c.JobSpec(tenant="acme", gpus=8, nodes=4, min_nodes=2)
    allocs = [gpu_alloc("a", 0, 8), gpu_alloc("b", 0, 8)]
    env = job_environment("el", 1, spec, allocs[0], allocations=allocs)
    assert {k: env[k] for k in ("HORIZON_WORLD_SIZE", "SLURM_NNODES", "SLURM_JOB_NUM_NODES", "SLURM_JOB_NODELIST",
                                "HORIZON_MIN_NODES", "HORIZON_MAX_NODES")} == {
        "HORIZON_WORLD_SIZE": "2", "SLURM_NNODES": "2", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "a,b",
        "HORIZON_MIN_NODES": "2", "HORIZON_MAX_NODES": "4"}
    rigid = job_environment("r", 1, c.JobSpec(tenant="acme"), allocs[0])
    assert rigid["HORIZON_WORLD_SIZE"] == "1" and "HORIZON_MIN_NODES" not in rigid

    seq = 0

    def record(event: c.Event) -> tuple[Record, c.Event]:
        nonlocal seq
        seq += 1
        return Record(seq, "x", encode(event), 1000.0 + seq, {}), event

    first, other = AgentCore(["a"]), AgentCore(["c"])
    log = [record(accepted("el", gpus=8, nodes=4, min_nodes=2)),
           record(c.JobScheduled(job_id="el", attempt=1, allocations=allocs)),
           record(c.JobStarted(job_id="el", attempt=1, node="a")),
           record(c.JobResized(job_id="el", attempt=1, allocations=[*allocs, gpu_alloc("c", 0, 8)], nodes=3,
                               previous_nodes=2))]
    assert [a.kind for a in first.fold(log)] == ["start", "resized"]
    assert other.fold(log) == []  # not its job to launch or tell
    assert [a.node for a in other.jobs.get("el").allocations] == ["a", "b", "c"]  # its steps may use c now


def test_scontrol_show_job_gives_an_elastic_gangs_range_waiting_and_its_nodes_running():
    from services.front.slurm.scontrol_show import show_job_text

    row = {"job_id": "el", "state": "PENDING", "nodes": 4, "tasks_per_node": 2, "cpus_milli": 1000}
    fields = dict(item.split("=", 1) for item in show_job_text(row, {"min_nodes": 2}, now=0.0).split())
    assert (fields["NumNodes"], fields["NumTasks"]) == ("2-4", "8")
    running = {**row, "state": "RUNNING", "started_ts": 1.0,
               "allocation": [{"node": n, "cpus_milli": 2000, "tasks": 2} for n in ("n1", "n2", "n3")]}
    fields = dict(item.split("=", 1) for item in show_job_text(running, {"min_nodes": 2}, now=2.0).split())
    assert (fields["NumNodes"], fields["NumTasks"], fields["NodeList"]) == ("3", "6", "n[1-3]")


def test_squeue_and_sacct_count_the_nodes_an_elastic_job_holds():
    from services.front.slurm.sacct_format import SACCT_FIELDS
    from services.front.slurm.squeue_format import SQUEUE_FIELDS

    row = {"job_id": "el", "state": "RUNNING", "nodes": 4, "allocation": [{"node": "n1"}, {"node": "n2"}]}
    assert SQUEUE_FIELDS["D"][1](row, 0.0, None) == "2" and SACCT_FIELDS["NNodes"](row, 0.0) == "2"
    waiting = {"job_id": "el", "state": "PENDING", "nodes": 4}
    assert SQUEUE_FIELDS["D"][1](waiting, 0.0, None) == "4"


def test_the_resize_file_is_sourceable_and_says_what_the_job_was_told(tmp_path):
    import subprocess

    from services.nodes.backends.process.resize import read_resize_file, told, write_resize_file

    start = {"HORIZON_WORLD_SIZE": "2", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "n[1-2]", "PATH": "/bin"}
    path = tmp_path / "resize"
    assert told(start, path) == ({"HORIZON_WORLD_SIZE": "2", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "n[1-2]"}, 0)
    world = {"HORIZON_WORLD_SIZE": "3", "SLURM_NNODES": "3", "SLURM_JOB_NODELIST": "n[1-2],gpu 7"}
    write_resize_file(path, world, 1)
    assert read_resize_file(path) == (world, 1) and told(start, path) == (world, 1)
    shell = subprocess.run(["sh", "-c", '. "$1"; echo "$HORIZON_WORLD_SIZE|$SLURM_JOB_NODELIST|$HORIZON_RESIZE_COUNT"',
                            "sh", str(path)], capture_output=True, text=True, check=True)
    assert shell.stdout == "3|n[1-2],gpu 7|1\n"  # quoted: a value with a space stays whole
    assert [p.name for p in tmp_path.iterdir()] == ["resize"]  # no temporary file left


async def test_a_process_is_told_each_resize_once_also_by_an_agent_that_restarted(tmp_path):
    """The process executor: a resize rewrites the file and signals the job (its trap prints the new size);
    a new executor on the same directory (a restarted agent) adopts the attempt, does not tell it again
    what it was told, and counts on from the file when it tells it a new size."""
    import asyncio

    from services.nodes.backends.process.executors import ProcessExecutor
    from services.nodes.backends.process.resize import world_of

    spec = c.JobSpec(tenant="acme", nodes=3, min_nodes=1, command=["sh", "-c", ELASTIC_JOB])
    allocs = [c.NodeAllocation(node=f"n{i}", cpus_milli=1000, memory_bytes=1 << 30) for i in (1, 2, 3)]
    first = ProcessExecutor(tmp_path)
    execution = await first.start("el", 1, spec, allocs[0], allocations=allocs[:1])
    out = job_file(tmp_path, "el", 1, "stdout")

    async def lines(n: int) -> list[str]:
        for _ in range(100):
            if out.exists() and len(out.read_text().splitlines()) >= n:
                break
            await asyncio.sleep(0.05)
        return out.read_text().splitlines()

    assert (await lines(1))[0] == "start 1 1 1 3 n1"

    def world(n: int) -> dict[str, str]:
        return world_of(job_environment("el", 1, spec, allocs[0], allocations=allocs[:n]))

    assert execution.resized(world(3))
    assert (await lines(2))[1] == "resized 1 3 3 n[1-3]"
    assert not execution.resized(world(3))  # told already
    del first, execution  # the agent restarts
    adopted = ProcessExecutor(tmp_path).adopt("el", 1, allocs[0])
    assert adopted is not None and not adopted.resized(world(3))
    assert adopted.resized(world(2))
    assert (await lines(3))[2] == "resized 2 2 2 n[1-2]"
    await adopted.stop(1.0)


# ------------------------------------------------------------------ over NATS, with real processes

ELASTIC_JOB = r"""
trap '. "$HORIZON_RESIZE_FILE"; echo "resized $HORIZON_RESIZE_COUNT $HORIZON_WORLD_SIZE $SLURM_NNODES $SLURM_JOB_NODELIST"' WINCH
echo "start $HORIZON_WORLD_SIZE $SLURM_NNODES $HORIZON_MIN_NODES $HORIZON_MAX_NODES $SLURM_JOB_NODELIST"
while :; do sleep 0.1; done
"""


async def test_the_real_services_start_grow_and_shrink_an_elastic_gang_and_time_out_an_assembly(
        running_horizon, tmp_path):
    """Three nodes of 4 GPUs. "busy" holds node-00; "el" (--nodes 2-3, 4 GPUs a node) starts on node-01 and
    node-02 and says so from its environment; busy is cancelled, el grows to 3 (JobResized by placement)
    and its trap reads the resize file on SIGWINCH; a critical one-node job then shrinks el back to 2
    (JobResized by preemption, nobody preempted: el gives back node-00, not its first node) and starts
    on node-00; a 3-node gang with
    --assembly-timeout 2s cannot assemble and ends UNSCHEDULABLE saying why. The log checks and every
    decision replays."""
    import asyncio
    import json

    from services.nodes.spec import local_nodes
    from services.front.host.check import check_log
    from tests.e2e import assert_replays, events_of, horizon, wait_until

    h = await running_horizon(nodes=local_nodes(3, gpus_per_node=4), executor="process")
    url, tally = h.url, h.tally
    out_file = job_file(tmp_path / "jobs", "el", 1, "stdout")

    def said(text: str) -> bool:
        return out_file.exists() and text in out_file.read_text()

    code, out, err = await horizon(url, "submit", "--tenant", "acme", "--job-id", "busy", "--gpus", "4",
                                   "--", "sleep", "600")
    assert code == 0, err
    await wait_until(lambda: tally.has("JobStarted", "busy"), 20, "busy to start")
    assert tally.last[("JobStarted", "busy")]["node"] == "node-00"  # the first of equals, by name
    code, out, err = await horizon(url, "submit", "--tenant", "acme", "--job-id", "el", "--gpus", "4",
                                   "--nodes", "2-3", "--", "sh", "-c", ELASTIC_JOB)
    assert code == 0, err
    await wait_until(lambda: said("start"), 20, "el to start")
    assert out_file.read_text().splitlines()[0] == "start 2 2 2 3 node-[01-02]"

    code, out, err = await horizon(url, "cancel", "--tenant", "acme", "busy")
    assert code == 0, err
    await wait_until(lambda: said("resized 1"), 20, "el to grow")
    assert out_file.read_text().splitlines()[1] == "resized 1 3 3 node-[00-02]"
    assert tally.last[("JobResized", "el")]["source"] == "placement"

    async def el_nodes() -> list[str]:
        code, out, err = await horizon(url, "jobs", "--json")
        assert code == 0, err
        (row,) = [r for r in json.loads(out) if r["job_id"] == "el"]
        return [a["node"] for a in row["allocation"]]

    for _ in range(50):  # the jobs view follows the log a moment behind our subscription
        if len(await el_nodes()) == 3:
            break
        await asyncio.sleep(0.2)
    assert await el_nodes() == ["node-01", "node-02", "node-00"]

    code, out, err = await horizon(url, "submit", "--tenant", "acme", "--job-id", "vip", "--gpus", "4",
                                   "--priority-class", "critical", "--", "sleep", "600")
    assert code == 0, err
    await wait_until(lambda: said("resized 2") and tally.has("JobStarted", "vip"), 30, "el to shrink for vip")
    assert out_file.read_text().splitlines()[2] == "resized 2 2 2 node-[01-02]"
    assert tally.last[("JobStarted", "vip")]["node"] == "node-00"  # the node el gained last
    assert not tally.has("PreemptionRequested", "el")

    code, out, err = await horizon(url, "submit", "--tenant", "acme", "--job-id", "gang", "--gpus", "4",
                                   "--nodes", "3", "--assembly-timeout", "2s", "--", "true")
    assert code == 0, err
    await wait_until(lambda: tally.has("JobUnschedulable", "gang"), 30, "the gang's assembly to time out")
    assert tally.last[("JobUnschedulable", "gang")]["reason"].startswith(
        "assembly timeout: the gang did not assemble 3 nodes within 2 s: ")
    for job_id in ("el", "vip"):
        code, out, err = await horizon(url, "cancel", "--tenant", "acme", job_id)
        assert code == 0, err
    await wait_until(lambda: tally.has("JobCancelled", "el") and tally.has("JobCancelled", "vip"), 20,
                     "el and vip to end")
    await h.stop()
    records = await h.records()
    report = check_log(records)
    assert report.ok, report.problems[:3]
    resized = [e for e in events_of(records) if isinstance(e, c.JobResized)]
    assert [(e.source, e.previous_nodes, e.nodes, e.for_job) for e in resized] == [
        ("placement", 2, 3, ""), ("preemption", 3, 2, "vip")]
    assert_replays(records)


# ------------------------------------------------------------------ the simulator: the same cores at virtual time


def test_in_the_simulator_an_elastic_gang_grows_when_room_frees_and_shrinks_for_a_critical_job():
    """Two nodes of 8 GPUs. busy (1 node) runs 0-100 s; el (1 to 2 nodes of 8 GPUs, 1000 s) starts at 10 s on
    the free node, grows to 2 when busy ends at 100 s, is shrunk back to 1 at 200 s for vip (critical, 1 node,
    50 s), which starts at once, and grows again when vip ends at 250 s. Nobody is preempted; the log checks."""
    from services.front.host.check import check_log
    from services.front.sim.traces import SimJob
    from tests.services.test_preemption import _sim

    jobs = [SimJob("busy", 0.0, 100.0, 100.0, gpus=8),
            SimJob("el", 10.0, 1000.0, 1000.0, gpus=16, nodes=2, min_nodes=1),
            SimJob("vip", 200.0, 50.0, 50.0, gpus=8, priority_class="critical")]
    run, events, records = _sim(jobs)
    resized = [e for e in events if isinstance(e, c.JobResized)]
    assert [(e.source, e.previous_nodes, e.nodes, e.for_job) for e in resized] == [
        ("placement", 1, 2, ""), ("preemption", 2, 1, "vip"), ("placement", 1, 2, "")]
    assert [e.ts - records[0].time for e in resized][0] >= 100.0
    assert run.results["vip"].start_s == 200.0 and run.results["el"].start_s == 10.0
    assert not [e for e in events if isinstance(e, c.PreemptionRequested)]
    assert all(r.state == "SUCCEEDED" for r in run.results.values())
    report = check_log(records)
    assert report.ok, report.problems[:3]
