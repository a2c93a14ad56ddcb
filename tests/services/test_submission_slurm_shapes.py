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
