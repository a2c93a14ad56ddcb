"""A heterogeneous job at submission (services/submission/components.py): each component judged as the
job with its shape, problems named by the component, one partition, no arrays or elastic gangs of them,
limits over all components; and the numbers it takes (one per component, consecutive)."""

from __future__ import annotations

import pytest

from events import catalogue as c
from events.vocabulary import Limits
from services.runtime.replay import replay_decisions
from services.submission.core import SubmissionCore
from services.submission.normalise import Rejection
from tests.helpers import Feed, node
from tests.services.test_submission_slurm_shapes import accept, partitions, submitted

GIB = 1 << 30
NODES = tuple(node(f"n{i}", gpus=0, cpus=8, memory=32 * GIB) for i in (1, 2, 3))


def part(**kw) -> c.ComponentRequest:
    return c.ComponentRequest(**kw)


def test_each_component_is_normalised_with_its_own_shape_and_the_jobs_other_fields():
    sub = submitted(resources=c.ResourceRequest(cpus=1, memory="16g"), time_limit_s=600,
                    components=[part(resources=c.ResourceRequest(cpus="500m", memory="1g"), nodes=2,
                                     tasks_per_node=2)])
    spec = accept(sub, nodes=NODES)
    assert (spec.cpus_milli, spec.memory_bytes, spec.nodes, spec.tasks_per_node) == (1000, 16 * GIB, 1, 1)
    assert spec.components == (c.Component(cpus_milli=500, memory_bytes=GIB, nodes=2, tasks_per_node=2),)
    assert spec.time_limit_s == 600


def test_a_components_problem_is_named_by_the_component():
    sub = submitted(components=[part(), part(resources=c.ResourceRequest(memory="lots"))])
    with pytest.raises(Rejection) as err:
        accept(sub, nodes=NODES)
    assert err.value.field == "components[1].resources.memory"
    # what no node could ever hold, judged per component as for any job
    sub = submitted(components=[part(resources=c.ResourceRequest(cpus=64))])
    with pytest.raises(Rejection) as err:
        accept(sub, nodes=NODES)
    assert err.value.field.startswith("components[0].") and "64" in err.value.reason


def test_tasks_without_nodes_are_spread_in_a_component_too():
    """-n 12 without -N in component 1 (sbatch's spread_tasks): on 8-CPU nodes, 2 nodes of 6."""
    sub = submitted(components=[part(ntasks=12, spread_tasks=True)])
    spec = accept(sub, nodes=NODES)
    [one] = spec.components
    assert (one.nodes, one.tasks_per_node, one.ntasks) == (2, 6, 0)


def test_components_run_in_the_jobs_partition():
    parts = partitions(c.PartitionConfigured(name="cpu", nodes=["ALL"], default=True),
                       c.PartitionConfigured(name="big", nodes=["ALL"]), nodes=NODES)
    spec = accept(submitted(partitions=["cpu"], components=[part(partitions=["cpu"])]), parts, nodes=NODES)
    assert spec.partition == "cpu" and len(spec.components) == 1
    with pytest.raises(Rejection) as err:
        accept(submitted(partitions=["cpu"], components=[part(partitions=["big"])]), parts, nodes=NODES)
    assert err.value.field == "components[0].partitions" and "one partition" in err.value.reason


def test_more_nodes_over_all_components_than_the_partition_has_is_refused():
    """Each component has nodes of its own: 1 + 3 nodes on a cluster of three never starts."""
    with pytest.raises(Rejection, match="4 nodes over all components .* the cluster has 3 registered"):
        accept(submitted(components=[part(nodes=3)]), nodes=NODES)
    assert accept(submitted(components=[part(nodes=2)]), nodes=NODES).components[0].nodes == 2


def test_no_arrays_elastic_gangs_or_too_many_components():
    with pytest.raises(Rejection, match="array cannot be heterogeneous"):
        accept(submitted(array="0-3", components=[part()]), nodes=NODES)
    with pytest.raises(Rejection, match="rigid"):
        accept(submitted(nodes=2, min_nodes=1, components=[part()]), nodes=NODES)
    with pytest.raises(Rejection, match="at most 3"):
        accept(submitted(components=[part(), part(), part()]), nodes=NODES, limits=Limits(max_components=3))
    with pytest.raises(Rejection, match="GPUs over all components"):
        accept(submitted(resources=c.ResourceRequest(gpus=2),
                         components=[part(resources=c.ResourceRequest(gpus=2))]),
               nodes=(node("g1", gpus=8), node("g2", gpus=8)), limits=Limits(max_gpus_per_job=3))


def test_a_heterogeneous_job_takes_a_number_per_component_and_replay_agrees():
    """Slurm gives each component a job id (SLURM_JOB_ID_HET_GROUP_k): here 1 and 2 for the two
    components of the first job, so the next job is 3."""
    f = Feed(SubmissionCore())
    for n in NODES:
        f.evt("agent", n)
    f.input("acme", "submit", submitted(components=[part()]))
    f.input("acme", "submit", c.JobSubmitted(job_id="next", tenant="acme", command=["true"]))
    got = [(e.job_id, e.spec.number, len(e.spec.components)) for e in f.settle() if isinstance(e, c.JobAccepted)]
    assert got == [("j", 1, 1), ("next", 3, 0)]
    report = replay_decisions(SubmissionCore(), f.records)
    assert report.decisions and report.reproduced == report.decisions and not report.mismatches
