"""Submission's part of Slurm's meaning (issue 34 item 3), pure: no time limit, tasks spread over as
many nodes as they need, partition names with dots. ``normalise`` and ``admission`` are called
directly with the partitions and registered nodes a core would have folded."""

from __future__ import annotations

import pytest

from events import catalogue as c
from events.vocabulary import Limits
from services.domain.partitions import Partitions
from services.submission.capacity import Capacity
from services.submission.normalise import Rejection, normalise
from tests.helpers import node

ADMIN = "horizon.in._admin.partition"
DAY = 86400.0


def partitions(*configs: c.PartitionConfigured, nodes: tuple[c.NodeRegistered, ...] = ()) -> Partitions:
    p = Partitions()
    for n in nodes:
        p.apply(n, f"horizon.evt.agent.NodeRegistered.{n.node}")
    for cfg in configs:
        assert p.apply(cfg, ADMIN) is None, cfg
    return p


def capacity(*nodes: c.NodeRegistered) -> Capacity:
    out = Capacity()
    for n in nodes:
        out.apply(n)
    return out


def submitted(**kw) -> c.JobSubmitted:
    return c.JobSubmitted(job_id="j", tenant="acme", command=["true"], **kw)


def accept(sub: c.JobSubmitted, parts: Partitions | None = None, nodes: tuple[c.NodeRegistered, ...] = (),
           warnings: list[str] | None = None, limits: Limits = Limits()) -> c.JobSpec:
    cap = capacity(*nodes)
    return normalise(sub, subject_tenant="acme", gpu_models={("a100", None)}, partitions=parts, capacity=cap,
                     capacity_of=(lambda name: cap.subset(parts.members(name))) if parts is not None else None,
                     warnings=warnings, limits=limits)


# ----------------------------------------------------------------------------- no time limit (--time=0)


def test_no_time_limit_is_the_partitions_max_time():
    # #SBATCH --time=0 in a partition of MaxTime 2 days: the most it allows
    parts = partitions(c.PartitionConfigured(name="gpu", nodes=["ALL"], max_time_s=2 * DAY, default_time_s=3600,
                                             default=True))
    spec = accept(submitted(time_limit_s=0), parts)
    assert spec.time_limit_s == 2 * DAY and spec.partition == "gpu"


def test_no_time_limit_without_a_max_time_is_the_clusters_longest():
    limits = Limits()
    parts = partitions(c.PartitionConfigured(name="open", nodes=["ALL"], default=True))
    assert accept(submitted(time_limit_s=0), parts).time_limit_s == limits.max_time_limit_s
    assert accept(submitted(time_limit_s=0)).time_limit_s == limits.max_time_limit_s  # no partitions at all
    # a MaxTime above the cluster's most: the cluster's most (a limit above it is refused)
    long = partitions(c.PartitionConfigured(name="long", nodes=["ALL"], max_time_s=90 * DAY, default=True))
    assert accept(submitted(time_limit_s=0), long).time_limit_s == limits.max_time_limit_s


def test_no_time_limit_takes_the_first_named_partition_and_its_max_time():
    parts = partitions(c.PartitionConfigured(name="short", nodes=["ALL"], max_time_s=3600, default=True),
                       c.PartitionConfigured(name="long", nodes=["ALL"], max_time_s=7 * DAY))
    assert accept(submitted(time_limit_s=0, partitions=["long", "short"]), parts).time_limit_s == 7 * DAY
    assert accept(submitted(time_limit_s=0, partitions=["short"]), parts).time_limit_s == 3600


def test_a_negative_time_limit_is_still_refused():
    with pytest.raises(Rejection, match="time_limit_s"):
        accept(submitted(time_limit_s=-1))


# ----------------------------------------------------------------------------- partition names with dots


def test_a_partition_named_with_a_dot_is_configured_and_used():
    # #SBATCH -p test.q, as Slurm sites name queues
    parts = partitions(c.PartitionConfigured(name="test.q", nodes=["ALL"], max_time_s=3600),
                       c.PartitionConfigured(name="batch", nodes=["ALL"], default=True))
    spec = accept(submitted(partitions=["test.q"], time_limit_s=600), parts)
    assert spec.partition == "test.q" and parts.names() == ["batch", "test.q"]


def test_a_partition_name_goes_into_a_leaders_token_safely():
    from events.subjects import leader_token, partition_token, valid_token
    from services.front.registry import leader_cores

    token = partition_token("test.q")
    assert valid_token(token) and token.startswith("test_q_") and "." not in token
    assert token != partition_token("test_q") == "test_q"  # a partition test_q is another leader
    assert partition_token("gpu") == "gpu"  # a name that is a token is itself: old logs' leaders unchanged
    owner = leader_token("scheduling", ["test.q", "gpu"])
    assert owner == f"scheduling-gpu-{token}" and valid_token(owner)
    # the audit finds the leader's partitions from its token and the names the log configured
    cores = leader_cores({owner, leader_token("placement", ["test.q"])}, {"test.q", "gpu", "test_q"})
    assert sorted((core.name, core.partitions) for core in cores) == [
        (f"placement-{token}", ("test.q",)), (owner, ("gpu", "test.q"))]


# ----------------------------------------------------------------------------- tasks spread over nodes (-n)


def cpu_node(name: str, cpus: int, memory_gib: int = 192) -> c.NodeRegistered:
    return node(name, gpus=0, cpus=cpus, memory=memory_gib * 2**30)


def spread(ntasks: int, **kw) -> c.JobSubmitted:
    return submitted(ntasks=ntasks, spread_tasks=True, **kw)


def test_128_tasks_go_on_as_few_48_cpu_nodes_as_hold_them():
    # #SBATCH -n 128 with no -N, on 48-CPU nodes: 1 node of 128 and 2 of 64 fit none; 3 of 43 do
    nodes = tuple(cpu_node(f"c{i}", 48) for i in range(4))
    spec = accept(spread(128, resources=c.ResourceRequest(cpus="1", memory="1Gi")), nodes=nodes)
    assert (spec.nodes, spec.tasks_per_node, spec.ntasks) == (3, 43, 128)  # 43, 43 and 42 tasks: 129 slots


def test_tasks_that_fit_one_node_stay_on_one():
    nodes = tuple(cpu_node(f"c{i}", 64) for i in range(2))
    spec = accept(spread(32, resources=c.ResourceRequest(cpus="2", memory="1Gi")), nodes=nodes)
    assert (spec.nodes, spec.tasks_per_node, spec.ntasks) == (1, 32, 0)  # every slot a task: no ntasks


def test_an_even_spread_is_every_slot():
    nodes = tuple(cpu_node(f"c{i}", 4) for i in range(3))
    spec = accept(spread(8, resources=c.ResourceRequest(cpus="1", memory="1Gi")), nodes=nodes)
    assert (spec.nodes, spec.tasks_per_node, spec.ntasks) == (2, 4, 0)


def test_memory_per_node_is_shared_by_the_tasks_submission_puts_there():
    # #SBATCH -n 10 --mem=8G on 4-CPU nodes: 3 nodes of 4 slots, each task 8G / 4 = 2G
    nodes = tuple(cpu_node(f"c{i}", 4, memory_gib=16) for i in range(3))
    spec = accept(spread(10, memory_per_node=8 * 2**30, resources=c.ResourceRequest(cpus="1", memory=None)),
                  nodes=nodes)
    assert (spec.nodes, spec.tasks_per_node, spec.ntasks, spec.memory_bytes) == (3, 4, 10, 2 * 2**30)


def test_the_spread_is_the_partitions_own():
    # the small partition has 8-CPU nodes, the big one 64-CPU nodes: -n 32 -p small,big
    small = tuple(cpu_node(f"s{i}", 8) for i in range(2))
    big = (cpu_node("b0", 64),)
    parts = partitions(c.PartitionConfigured(name="small", nodes=["s[0-1]"], default=True),
                       c.PartitionConfigured(name="big", nodes=["b0"]), nodes=small + big)
    sub = spread(32, resources=c.ResourceRequest(cpus="1", memory="1Gi"))
    spec = accept(msgspec_replace(sub, partitions=["small", "big"]), parts, nodes=small + big)
    assert (spec.partition, spec.nodes, spec.tasks_per_node) == ("big", 1, 32)  # small: 2 x 8 cannot hold 32
    spec = accept(msgspec_replace(sub, ntasks=12, partitions=["small", "big"]), parts, nodes=small + big)
    assert (spec.partition, spec.nodes, spec.tasks_per_node, spec.ntasks) == ("small", 2, 6, 0)


def test_tasks_no_nodes_could_hold_are_refused_naming_what_is_missing():
    nodes = tuple(cpu_node(f"c{i}", 48) for i in range(2))
    with pytest.raises(Rejection) as info:  # 128 tasks need 3 nodes of 48 CPUs; there are 2
        accept(spread(128, resources=c.ResourceRequest(cpus="1", memory="1Gi")), nodes=nodes)
    assert info.value.field == "nodes" and "only 2 registered nodes could hold one" in info.value.reason
    with pytest.raises(Rejection) as info:  # one task of 64 CPUs fits no node at all
        accept(spread(4, resources=c.ResourceRequest(cpus="64", memory="1Gi")), nodes=nodes)
    assert info.value.field == "resources.cpus"


def test_with_no_node_registered_the_tasks_go_on_one_node():
    spec = accept(spread(128, resources=c.ResourceRequest(cpus="1", memory="1Gi")))
    assert (spec.nodes, spec.tasks_per_node, spec.ntasks) == (1, 128, 0)


def test_fewer_tasks_than_slots_on_a_fixed_shape():
    # #SBATCH -N 3 -n 7: the front sends 3 nodes of 3 slots and ntasks 7 (3, 3 and 1 tasks)
    spec = accept(submitted(nodes=3, tasks_per_node=3, ntasks=7))
    assert (spec.nodes, spec.tasks_per_node, spec.ntasks) == (3, 3, 7)
    assert accept(submitted(nodes=2, tasks_per_node=2, ntasks=4)).ntasks == 0
    for kw, words in ((dict(nodes=2, tasks_per_node=2, ntasks=5), "more than the gang's 2 x 2"),
                      (dict(nodes=3, tasks_per_node=1, ntasks=2), "cannot use 3 nodes"),
                      (dict(nodes=4, min_nodes=2, tasks_per_node=2, ntasks=6), "an elastic job"),
                      (dict(spread_tasks=True), "needs the tasks to spread"),
                      (dict(ntasks=4, spread_tasks=True, nodelist=["n1"]), "names its nodes"),
                      (dict(memory_per_node=2**30), "goes with spread_tasks")):
        with pytest.raises(Rejection, match=words):
            accept(submitted(**kw))


def msgspec_replace(sub: c.JobSubmitted, **kw) -> c.JobSubmitted:
    import msgspec

    return msgspec.structs.replace(sub, **kw)
