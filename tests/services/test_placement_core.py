"""Placement's pure core: best fit, exact devices, NUMA, gangs, explanations, no blocking, room held for preemptors."""

from __future__ import annotations

from events import catalogue as c
from services.placement.core import PlacementCore
from services.front.host.check import check_log
from tests.helpers import Feed, accepted, node


def cycle(n: int, candidates: list[str]) -> c.SchedulingCycleCompleted:
    return c.SchedulingCycleCompleted(id=f"scheduling/SchedulingCycleCompleted/{n}", cycle=n, candidates=candidates,
                                      queued=len(candidates), correlation_id=str(n), source="scheduling", basis_seq=1)


def ready(f: Feed, *names: str) -> None:
    for name in names:
        f.evt("inventory", c.NodeReady(node=name, basis_seq=1))


def test_best_fit_takes_the_fullest_node_that_fits_with_exact_devices():
    f = Feed(PlacementCore())
    f.evt("agent", node("a", gpus=8))
    f.evt("agent", node("b", gpus=8))
    ready(f, "a", "b")
    f.evt("submission", accepted("first", gpus=5))
    f.evt("submission", accepted("second", gpus=2))
    f.evt("scheduling", cycle(1, ["first", "second"]))
    out = f.settle()
    s1, s2, done = out
    assert s1.allocations == [c.NodeAllocation(node="a", device_ids=["gpu0", "gpu1", "gpu2", "gpu3", "gpu4"],
                                               cpus_milli=1000, memory_bytes=2**30)]
    # "a" has 3 free GPUs left, "b" 8: best fit puts the 2-GPU job on "a", on one NUMA node (gpu5, gpu6)
    assert s2.allocations[0].node == "a" and s2.allocations[0].device_ids == ["gpu5", "gpu6"]
    assert isinstance(done, c.PlacementCycleCompleted) and (done.scheduled, done.blocked) == (2, 0)
    assert s1.basis_seq == s2.basis_seq == done.basis_seq == 7
    assert f.decide() == []


def test_numa_local_devices_when_one_numa_node_has_room():
    f = Feed(PlacementCore())
    f.evt("agent", node("a", gpus=8))
    ready(f, "a")
    f.evt("submission", accepted("one", gpus=1))
    f.evt("submission", accepted("four", gpus=4))
    f.evt("scheduling", cycle(1, ["one", "four"]))
    one, four, _ = f.settle()
    assert one.allocations[0].device_ids == ["gpu0"]
    assert four.allocations[0].device_ids == ["gpu4", "gpu5", "gpu6", "gpu7"]  # all on NUMA 1


def test_a_job_that_does_not_fit_never_blocks_the_ones_behind_it():
    f = Feed(PlacementCore())
    for i in range(4):
        f.evt("agent", node(f"n{i}", gpus=8))
    ready(f, "n0", "n1", "n2", "n3")
    f.evt("submission", accepted("huge", gpus=16, priority_class="critical"))
    small = [f"s{i:03d}" for i in range(100)]
    for job_id in small:
        f.evt("submission", accepted(job_id, gpus=1))
    f.evt("scheduling", cycle(1, ["huge", *small]))
    out = f.settle()
    blocked = [e for e in out if isinstance(e, c.PlacementBlocked)]
    scheduled = [e for e in out if isinstance(e, c.JobScheduled)]
    assert [e.job_id for e in blocked][0] == "huge"
    assert blocked[0].reasons == [c.BlockReason(reason="has 8 GPUs, needs 16", nodes=4, filter="GpuCapacity")]
    assert [e.job_id for e in scheduled] == small[:32]  # every free GPU used, in order
    assert check_log(f.records).ok
    # the next cycle repeats no unchanged explanation for "huge"
    f.evt("scheduling", cycle(2, ["huge", *small[32:]]))
    out2 = f.settle()
    assert not any(isinstance(e, c.PlacementBlocked) and e.job_id == "huge" for e in out2)


def test_a_gang_is_placed_whole_or_not_at_all():
    f = Feed(PlacementCore())
    for i in range(3):
        f.evt("agent", node(f"n{i}", gpus=8))
    ready(f, "n0", "n1", "n2")
    f.evt("submission", accepted("gang4", gpus=8, nodes=4))
    f.evt("submission", accepted("gang3", gpus=8, nodes=3))
    f.evt("scheduling", cycle(1, ["gang4", "gang3"]))
    blocked, placed, _ = f.settle()
    assert isinstance(blocked, c.PlacementBlocked) and blocked.reasons[-1].filter == "Gang"
    assert isinstance(placed, c.JobScheduled) and sorted(a.node for a in placed.allocations) == ["n0", "n1", "n2"]


def test_unready_cordoned_and_lost_nodes_are_not_offered():
    f = Feed(PlacementCore())
    for name in ("fresh", "cordoned", "lost", "ok"):
        f.evt("agent", node(name, gpus=8))
    ready(f, "cordoned", "lost", "ok")
    f.evt("inventory", c.NodeCordoned(node="cordoned"))
    f.evt("inventory", c.NodeLost(node="lost"))
    f.evt("submission", accepted("j", gpus=8))
    f.evt("submission", accepted("k", gpus=8))
    f.evt("scheduling", cycle(1, ["j", "k"]))
    placed, blocked, _ = f.settle()
    assert placed.allocations[0].node == "ok"
    reasons = {r.reason: r.nodes for r in blocked.reasons}
    assert reasons == {"node cordoned": 1, "node lost": 1, "node registered": 1, "too few free GPUs (needs 8)": 1}


def _cycle(f: Feed, n: int, candidates: list[str]) -> list[c.Event]:
    f.evt("scheduling", cycle(n, candidates))
    return f.settle()


def _room_held_for_vip() -> Feed:
    """``v`` (8 GPUs on n0) was preempted for ``vip`` (4 GPUs) and has stopped: n0 is empty, held
    for vip. ``other`` (4 GPUs) waits too; n1 is full."""
    f = Feed(PlacementCore())
    for name in ("n0", "n1"):
        f.evt("agent", node(name, gpus=8))
    ready(f, "n0", "n1")
    for job_id, on in (("v", "n0"), ("w", "n1")):
        f.evt("submission", accepted(job_id, gpus=8, priority_class="low"))
        f.evt("placement", c.JobScheduled(job_id=job_id, attempt=1, allocations=[c.NodeAllocation(
            node=on, device_ids=[f"gpu{k}" for k in range(8)], cpus_milli=1000, memory_bytes=2**30)]))
        f.evt("agent", c.JobStarted(job_id=job_id, attempt=1, node=on))
    f.evt("submission", accepted("vip", gpus=4, priority_class="critical"))
    f.evt("submission", accepted("other", gpus=4))
    f.evt("preemption", c.PreemptionRequested(job_id="v", attempt=1, for_job="vip", grace_period_s=30.0, basis_seq=1))
    f.evt("agent", c.JobPreempted(job_id="v", attempt=1, for_job="vip"))
    assert f.state.held == {"n0": frozenset({"vip"})}
    # n0's room is free, and it is not other's (n1 is simply full)
    blocked, _ = _cycle(f, 1, ["other"])
    assert isinstance(blocked, c.PlacementBlocked) and blocked.job_id == "other"
    assert {(r.filter, r.reason, r.nodes) for r in blocked.reasons} == {
        ("Preemption", "held for vip, which preempted jobs there", 1), ("GpuFree", "too few free GPUs (needs 4)", 1)}
    return f


def test_room_held_for_a_preemptor_is_refused_to_others_until_it_starts():
    f = _room_held_for_vip()
    vip, _ = _cycle(f, 2, ["vip"])
    assert isinstance(vip, c.JobScheduled) and vip.allocations[0].node == "n0"
    assert f.state.held == {}  # it started: what was held for it is released
    other, _ = _cycle(f, 3, ["other"])
    assert isinstance(other, c.JobScheduled) and other.allocations[0].node == "n0"  # the 4 GPUs vip left over


def test_room_held_for_a_preemptor_is_released_when_it_stops_waiting():
    f = _room_held_for_vip()
    f.evt("submission", c.JobCancelled(job_id="vip", reason="the user gave up"))
    assert f.state.held == {}
    other, _ = _cycle(f, 2, ["other"])
    assert isinstance(other, c.JobScheduled) and other.allocations[0].node == "n0"
