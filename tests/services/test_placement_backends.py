"""One queue over several backends (docs/backends.md, "One queue over several backends"): placement's
rules for nodes of different backends, on the pure core.

A gang's nodes are of one backend (``services/placement/place.py``), chosen deterministically: the
backend that holds the most of them, then the best summed score, then the name; a gang that fits only
across backends waits and says so, and one no backend alone could ever hold is ``fits_nowhere``; an
elastic gang starts and grows within one backend; a backfill reservation counts a gang's nodes per
backend. Every node carries ``horizon.io/backend``, so a node selector pins a job to a backend. On a
cluster of one backend, whatever its name, decisions are what they were.
"""

from __future__ import annotations

import msgspec

from events import catalogue as c
from services.domain.cluster import BACKEND_LABEL, Request
from services.domain.fit.cycle import Overlay
from services.front.host.check import check_log
from services.placement.core import PlacementCore
from services.placement.place import place_job
from services.runtime.replay import replay_decisions
from tests.helpers import Feed, accepted, node, placement_cycle, ready

GIB = 1 << 30


def on(backend: str, name: str, cpus: int = 4, gpus: int = 0) -> c.NodeRegistered:
    """A node as ``backend`` registers it ("": Horizon's own agent)."""
    return msgspec.structs.replace(node(name, gpus=gpus, cpus=cpus, memory=16 * GIB), backend=backend)


def mixed() -> Feed:
    """One agent node, two Slurm nodes and one Kubernetes node, all idle and ready."""
    f = Feed(PlacementCore())
    ready(f, on("", "a1"), on("slurm", "s1"), on("slurm", "s2"), on("kubernetes", "k1"))
    return f


def cpus(count: int, nodes: int = 1, **kw: object) -> Request:
    return Request(count * 1000, GIB, 0, None, None, 0, nodes, 1, **kw)  # type: ignore[arg-type]


def nodes_of(placed: list[c.NodeAllocation] | None) -> list[str]:
    assert placed is not None
    return [a.node for a in placed]


def test_every_node_is_labelled_with_its_backend() -> None:
    f = mixed()
    labels = {name: n.labels[BACKEND_LABEL] for name, n in f.state.cluster.nodes.items()}
    assert labels == {"a1": "agent", "s1": "slurm", "s2": "slurm", "k1": "kubernetes"}
    # the fold says which backend, whatever the registration's labels claim
    f.evt("agent", msgspec.structs.replace(on("slurm", "s3"), labels={BACKEND_LABEL: "agent", "rack": "r1"}))
    assert f.state.cluster.nodes["s3"].labels == {BACKEND_LABEL: "slurm", "rack": "r1"}


def test_a_gang_takes_all_its_nodes_from_one_backend() -> None:
    cluster = mixed().state.cluster
    # 2 nodes: only Slurm has two (the agent's a1 and Kubernetes' k1 are one each)
    assert nodes_of(place_job(cluster, cpus(1, nodes=2), Overlay()).allocations) == ["s1", "s2"]
    # one node: the best anywhere, as ever (every node idle and alike: the first name)
    assert nodes_of(place_job(cluster, cpus(1), Overlay()).allocations) == ["a1"]


def test_a_gang_that_fits_only_across_backends_waits_and_says_so() -> None:
    """Issue 33, item 6: a -N 2 job was placed on one agent node and one Slurm node. Now, with s1 full,
    a1 and s2 fit but are of two backends: the gang waits, saying how many fit on each."""
    cluster = mixed().state.cluster
    overlay = Overlay()
    overlay.take(c.NodeAllocation(node="s1", cpus_milli=4000, memory_bytes=GIB))
    overlay.take(c.NodeAllocation(node="k1", cpus_milli=4000, memory_bytes=GIB))
    placed = place_job(cluster, cpus(1, nodes=2), overlay)
    assert placed.allocations is None and not placed.fits_nowhere  # s1 frees: it will run on s1 and s2
    [cpu, gang] = placed.reasons
    assert (cpu.filter, cpu.nodes) == ("CpuFree", 2)  # s1 and k1
    assert gang == c.BlockReason(reason="the gang needs 2 nodes of one backend and a gang never spans two: of the "
                                        "nodes that fit now, 1 on agent, 0 on kubernetes, 1 on slurm",
                                 nodes=2, filter="Gang")


def test_a_gang_no_backend_could_ever_hold_fits_nowhere() -> None:
    cluster = mixed().state.cluster
    placed = place_job(cluster, cpus(1, nodes=3), Overlay())  # 4 nodes, but at most 2 of one backend
    assert placed.allocations is None and placed.fits_nowhere
    assert [r.reason for r in placed.reasons] == [
        "the gang needs 3 nodes of one backend and a gang never spans two: of the nodes that fit now, "
        "1 on agent, 1 on kubernetes, 2 on slurm"]
    # busy, they say what could ever hold it
    overlay = Overlay()
    for name in ("a1", "s1"):
        overlay.take(c.NodeAllocation(node=name, cpus_milli=4000, memory_bytes=GIB))
    placed = place_job(cluster, cpus(1, nodes=3), overlay)
    assert placed.fits_nowhere and placed.reasons[-1].reason == (
        "the gang needs 3 nodes of one backend and a gang never spans two: of the nodes that could ever hold it, "
        "1 on agent, 1 on kubernetes, 2 on slurm")


def test_among_backends_that_hold_a_gang_the_best_summed_score_then_the_name() -> None:
    f = Feed(PlacementCore())
    ready(f, on("slurm", "s1"), on("slurm", "s2"), on("", "a1"), on("", "a2"), on("kubernetes", "k1"))
    cluster = f.state.cluster
    # every pair idle and alike: the same summed score, so the backend's name: agent before slurm
    assert nodes_of(place_job(cluster, cpus(1, nodes=2), Overlay()).allocations) == ["a1", "a2"]
    # half of s1 and s2 taken: binpacking (weight 10) scores the fuller Slurm pair better than the idle
    # agent pair, so the gang goes to Slurm, though "agent" comes first by name
    overlay = Overlay()
    for name in ("s1", "s2"):
        overlay.take(c.NodeAllocation(node=name, cpus_milli=2000, memory_bytes=GIB))
    assert nodes_of(place_job(cluster, cpus(1, nodes=2), overlay).allocations) == ["s1", "s2"]
    # and with the index (one evaluation per kind of node) it is the same answer
    from services.placement.index import NodeIndex

    assert nodes_of(place_job(cluster, cpus(1, nodes=2), overlay, NodeIndex(cluster, overlay)).allocations) == \
        ["s1", "s2"]


def test_a_node_selector_pins_a_job_to_a_backend() -> None:
    cluster = mixed().state.cluster
    pinned = [nodes_of(place_job(cluster, cpus(1, selector=((BACKEND_LABEL, b),)), Overlay()).allocations)
              for b in ("kubernetes", "slurm", "agent")]
    assert pinned == [["k1"], ["s1"], ["a1"]]
    none = place_job(cluster, cpus(1, selector=((BACKEND_LABEL, "lsf"),)), Overlay())
    assert none.fits_nowhere and [r.reason for r in none.reasons] == [
        f"labels do not match the node selector {BACKEND_LABEL}=lsf"]


def test_an_elastic_gang_starts_and_grows_within_one_backend() -> None:
    f = Feed(PlacementCore())
    ready(f, on("", "a1"), on("kubernetes", "k1"), on("slurm", "s1"), on("slurm", "s2"), on("slurm", "s3"))
    f.evt("submission", accepted("busy", gpus=0, cpus_milli=4000, nodelist=("s3",)))
    [scheduled, _] = placement_cycle(f, 1, ["busy"])
    assert nodes_of(scheduled.allocations) == ["s3"]
    f.evt("agent", c.JobStarted(job_id="busy", attempt=1, node="s3"))
    # 2 to 4 nodes: a1, k1 and s1, s2 fit (s3 is full): it starts on the two of Slurm, the most of one backend
    f.evt("submission", accepted("el", gpus=0, cpus_milli=1000, nodes=4, min_nodes=2))
    [scheduled, _] = placement_cycle(f, 2, ["el"])
    assert isinstance(scheduled, c.JobScheduled) and nodes_of(scheduled.allocations) == ["s1", "s2"]
    f.evt("agent", c.JobStarted(job_id="el", attempt=1, node="s1"))
    # a cycle with nothing pending: a1 and k1 are free, but not Slurm's, so it does not grow onto them
    assert [type(e).__name__ for e in placement_cycle(f, 3, [])] == ["PlacementCycleCompleted"]
    # s3 frees: it grows onto s3, and only s3
    f.evt("agent", c.JobSucceeded(job_id="busy", attempt=1))
    resized, _ = placement_cycle(f, 4, [])
    assert isinstance(resized, c.JobResized) and nodes_of(resized.allocations) == ["s1", "s2", "s3"]
    assert check_log(f.records).ok
    report = replay_decisions(PlacementCore(), f.records)
    assert report.decisions and report.reproduced == report.decisions and not report.mismatches


def test_a_gang_s_reservation_counts_its_nodes_per_backend() -> None:
    """EASY backfilling: the head, a 2-node gang, is reserved for when two nodes of one backend free, not
    for when one agent node and one Slurm node do (60 s from now), and on those two nodes."""
    f = Feed(PlacementCore())
    ready(f, on("", "a1"), on("slurm", "s1"), on("slurm", "s2"))
    for job, where, limit in (("short-a", "a1", 60), ("long-s1", "s1", 3600), ("short-s2", "s2", 60)):
        f.evt("submission", accepted(job, gpus=0, cpus_milli=4000, time_limit_s=limit))
        f.evt("placement", c.JobScheduled(job_id=job, attempt=1, allocations=[
            c.NodeAllocation(node=where, cpus_milli=4000, memory_bytes=GIB)]))
        f.evt("agent", c.JobStarted(job_id=job, attempt=1, node=where))
    f.evt("submission", accepted("gang", gpus=0, cpus_milli=4000, nodes=2, time_limit_s=600))
    blocked, _ = placement_cycle(f, 1, ["gang"])
    assert isinstance(blocked, c.PlacementBlocked)
    # a1 and s2 free within 60 s, but they are of two backends: the gang's time is long-s1's end
    assert blocked.earliest_start_ts == f.state.jobs.jobs["long-s1"].scheduled_ts + 3600
    assert sorted(blocked.reserved_nodes) == ["s1", "s2"]
    assert check_log(f.records).ok


def test_one_backend_decides_as_before_whatever_its_name() -> None:
    """Relabelled as one backend (the agent's, Slurm's, Kubernetes'), the same cluster and jobs give the
    same placements: the backend rule only ever chooses between backends."""
    answers = []
    for backend in ("", "slurm", "kubernetes"):
        f = Feed(PlacementCore())
        ready(f, *(on(backend, f"n{i}", cpus=4 + 4 * (i % 2), gpus=2 * (i % 3)) for i in range(6)))
        for j, (gpus, count) in enumerate([(1, 1), (0, 3), (2, 2), (0, 2), (1, 4)]):
            f.evt("submission", accepted(f"j{j}", gpus=gpus, cpus_milli=2000, nodes=count))
        out = placement_cycle(f, 1, [f"j{j}" for j in range(5)])
        answers.append([(type(e).__name__, [a.node for a in getattr(e, "allocations", [])],
                         [r.reason for r in getattr(e, "reasons", [])]) for e in out])
    assert answers[0] == answers[1] == answers[2]
    assert [kind for kind, _, _ in answers[0]].count("JobScheduled") >= 3


def test_a_gang_preemptor_makes_its_room_within_one_backend() -> None:
    """The preemption planner (services/domain/preemption/planner.py) keeps to the rule too: a critical
    2-node gang on a cluster of one agent node and two Slurm nodes, each full with a low job. The
    agent's job is the cheapest victim (it has just started), but the gang cannot use the agent node
    with a Slurm one: the victims are the two Slurm jobs, whose nodes it can use together."""
    from services.preemption.core import PreemptionCore
    from tests.services.test_preemption import _left_blocked, _running

    f = Feed(PreemptionCore())
    for backend, name in (("", "a1"), ("slurm", "s1"), ("slurm", "s2")):
        f.evt("agent", msgspec.structs.replace(node(name, gpus=8), backend=backend))
        f.evt("inventory", c.NodeReady(node=name, basis_seq=1))
    _running(f, "old-s1", "s1", 0, 8, priority_class="low", dt=1000.0)
    _running(f, "old-s2", "s2", 0, 8, priority_class="low", dt=1000.0)
    _running(f, "young-a1", "a1", 0, 8, priority_class="low", dt=10.0)
    f.evt("submission", accepted("pair", gpus=8, nodes=2, priority_class="critical"))
    f.evt("submission", accepted("one", gpus=8, priority_class="critical"))
    plan = f.core.plan(f.state, "pair")
    assert (plan.victims, plan.nodes) == (["old-s1", "old-s2"], ["s1", "s2"])
    assert f.core.plan(f.state, "one").victims == ["young-a1"]  # one node: the cheapest anywhere, as ever
    _left_blocked(f, 1, "pair")
    assert sorted(e.job_id for e in f.decide() if isinstance(e, c.PreemptionRequested)) == ["old-s1", "old-s2"]


def test_a_partition_of_one_backend_s_nodes() -> None:
    """``horizon partition set slurm --nodes ALL --label horizon.io/backend=slurm``: the partition's members
    are the Slurm nodes, so ``-p slurm`` (sbatch's way) pins a job there as the node selector does."""
    f = mixed()
    f.admin("partition", c.PartitionConfigured(name="slurm", nodes=["ALL"], node_labels={BACKEND_LABEL: "slurm"}))
    f.admin("partition", c.PartitionConfigured(name="main", nodes=["ALL"], default=True))
    parts = f.state.partitions
    assert parts.members("slurm") == ("s1", "s2") and parts.members("main") == ("a1", "k1", "s1", "s2")
    f.evt("submission", accepted("pinned", gpus=0, cpus_milli=1000, partition="slurm"))
    [scheduled, _] = placement_cycle(f, 1, ["pinned"])
    assert nodes_of(scheduled.allocations) == ["s1"]
