"""Heterogeneous jobs at the Slurm face, pure: ``#SBATCH hetjob``/``packjob`` and the ``:`` command-line
form read into JobSubmitted.components (services/front/slurm/sbatch_hetjob.py); srun's --het-group;
the batch script's HET variables (services/nodes/job_environment.py); a step's slots per component
(services/domain/hetjob.py). The real run: tests/nodes/test_hetjob_steps.py."""

from __future__ import annotations

from typing import Any

import pytest

from events import catalogue as c
from services.domain.hetjob import HetGroupError, het_group_text, parse_het_groups, step_slots
from services.domain.steps import Slots
from services.front.slurm.sbatch import SbatchDefaults
from services.front.slurm.sbatch_hetjob import parse_het_sbatch, script_components, split_het_command_line
from services.front.slurm.sbatch_options import SbatchError
from services.front.slurm.srun_options import SrunError, parse_srun
from services.nodes.job_environment import job_environment

GiB, MiB = 1 << 30, 1 << 20
DEFAULTS = SbatchDefaults(user="ann", workdir="/home/ann", script_path="/home/ann/het.sh")
SCRIPT = """#!/bin/bash
#SBATCH --job-name=coupled --time=10
#SBATCH -n1 --mem=16g
#SBATCH hetjob
#SBATCH -N1 --ntasks-per-node=2 --mem-per-cpu=500m -c2
srun --het-group=1 hostname
"""


def het(text: str = SCRIPT, *segments: list[str], warnings: list[str] | None = None) -> dict[str, Any]:
    fields, _ = parse_het_sbatch(text, defaults=DEFAULTS, segments=list(segments) or [[]], warnings=warnings)
    return fields


def test_hetjob_lines_separate_the_components_of_a_script():
    warnings: list[str] = []
    fields = het(warnings=warnings)
    assert (fields["name"], fields["time_limit_s"], fields["nodes"], fields["tasks_per_node"]) == ("coupled", 600, 1, 1)
    assert fields["resources"].memory == 16 * GiB
    [one] = fields["components"]
    assert (one.nodes, one.tasks_per_node, one.resources.cpus, one.resources.memory) == (1, 2, "2", 1000 * MiB)
    assert warnings == []  # component 1 gives nothing of the job's: it takes the job's name and time
    # the older spelling, any case
    assert het(SCRIPT.replace("hetjob", "PACKJOB"))["components"] == fields["components"]


def test_the_job_runs_the_script_as_written_and_the_body_is_its_commands():
    fields, body = parse_het_sbatch(SCRIPT, defaults=DEFAULTS, segments=[[]])
    assert body == "srun --het-group=1 hostname"
    assert SCRIPT in fields["command"] or all("#SBATCH -N1" not in part for part in fields["command"])


def test_script_components_keep_line_numbers_and_stop_at_the_first_command():
    parts, problems = script_components(SCRIPT + "#SBATCH hetjob\n")  # after the first command: a comment
    assert problems == [] and len(parts) == 2
    assert [len(p.split("\n")) for p in parts] == [len(SCRIPT.split("\n")) + 1] * 2
    assert "#SBATCH -N1" not in parts[0] and "#SBATCH -n1 --mem=16g" not in parts[1]
    _, problems = script_components("#!/bin/sh\n#SBATCH hetjob -n2\n")
    assert problems == ["line 2: #SBATCH hetjob -n2: a hetjob line separates components and holds no options"]


def test_a_lone_colon_separates_the_components_on_the_command_line():
    ours, segments, script, args = split_het_command_line(
        ["--dry-run", "-n1", "--mem=16g", ":", "-n", "4", "-N", "2", "job.sh", "a", ":", "b"])
    assert ours == {"dry-run": True} and script == ["job.sh"] and args == ["a", ":", "b"]
    assert segments == [["--ntasks=1", "--mem=16g"], ["--ntasks=4", "--nodes=2"]]
    fields = het("#!/bin/sh\ntrue\n", *segments)
    [one] = fields["components"]
    assert (fields["nodes"], one.nodes, one.tasks_per_node) == (1, 2, 2)


def test_options_on_the_command_line_without_a_colon_apply_to_every_component():
    fields = het(SCRIPT, ["--cpus-per-task=3"])  # Slurm's sbatch applies them to each component
    assert fields["resources"].cpus == "3" and fields["components"][0].resources.cpus == "3"


def test_a_later_components_own_job_options_are_warnings_and_its_nodelist_a_problem():
    warnings: list[str] = []
    het(SCRIPT.replace("-N1 --ntasks-per-node=2", "-N1 --time=30 --ntasks-per-node=2"), warnings=warnings)
    assert warnings == ["component 1: --time: a heterogeneous job's components share the job's --time in Horizon; "
                        "component 0's counts (600.0, not 1800.0)"]
    with pytest.raises(SbatchError, match="only the first component"):
        het(SCRIPT.replace("-N1 --ntasks", "-N1 -w n3 --ntasks"))
    with pytest.raises(SbatchError) as err:
        het(SCRIPT.replace("-N1 --ntasks-per-node=2", "-N1 --ntasks-per-node=two"))
    assert "line 5" in str(err.value)


def test_srun_het_group():
    assert parse_srun(["--het-group=0,1", "hostname"], {}).request["het_group"] == [0, 1]
    assert parse_srun(["--pack-group", "1-2", "hostname"], {}).request["het_group"] == [1, 2]
    with pytest.raises(SrunError, match="--het-group"):
        parse_srun(["--het-group=x", "hostname"], {})
    with pytest.raises(SrunError, match="':' form"):
        parse_srun(["-n2", "hostname", ":", "-n1", "date"], {})
    assert parse_het_groups("1,3-5") == (1, 3, 4, 5) and het_group_text((0, 1, 2, 4)) == "0-2,4"
    with pytest.raises(HetGroupError, match="2 components"):
        parse_het_groups("2", count=2)


def _job() -> tuple[c.JobSpec, list[c.NodeAllocation]]:
    spec = c.JobSpec(tenant="acme", name="coupled", number=41, memory_bytes=16 * GiB, partition="cpu",
                     components=(c.Component(nodes=2, tasks_per_node=2, cpus_milli=2000, memory_bytes=500 * MiB),))
    allocs = [c.NodeAllocation(node="n1", cpus_milli=1000, memory_bytes=16 * GiB, tasks=1),
              c.NodeAllocation(node="n2", cpus_milli=4000, memory_bytes=GiB, tasks=2),
              c.NodeAllocation(node="n3", cpus_milli=4000, memory_bytes=GiB, tasks=2)]
    return spec, allocs


def test_the_batch_script_sees_component_0_as_the_job_and_each_component_by_its_het_group():
    spec, allocs = _job()
    env = job_environment("coupled", 1, spec, allocs[0], allocations=allocs)
    assert (env["SLURM_JOB_ID"], env["SLURM_JOB_NODELIST"], env["SLURM_NTASKS"], env["SLURM_JOB_NUM_NODES"]) == \
        ("41", "n1", "1", "1")
    assert (env["SLURM_HET_SIZE"], env["SLURM_PACK_SIZE"]) == ("2", "2")
    assert {k: v for k, v in env.items() if k.endswith("_HET_GROUP_1")} == {
        "SLURM_JOB_ID_HET_GROUP_1": "42", "SLURM_JOB_NAME_HET_GROUP_1": "coupled",
        "SLURM_JOB_NODELIST_HET_GROUP_1": "n[2-3]", "SLURM_JOB_NUM_NODES_HET_GROUP_1": "2",
        "SLURM_JOB_CPUS_PER_NODE_HET_GROUP_1": "4(x2)", "SLURM_TASKS_PER_NODE_HET_GROUP_1": "2(x2)",
        "SLURM_NTASKS_HET_GROUP_1": "4", "SLURM_JOB_ACCOUNT_HET_GROUP_1": "default",
        "SLURM_JOB_PARTITION_HET_GROUP_1": "cpu", "SLURM_MEM_PER_NODE_HET_GROUP_1": "1024"}
    assert env["SLURM_JOB_NODELIST_HET_GROUP_0"] == "n1" and env["SLURM_MEM_PER_NODE_HET_GROUP_0"] == "16384"
    # a job of one shape has none of them
    plain = job_environment("p", 1, c.JobSpec(tenant="acme", number=3), allocs[0])
    assert not any("HET" in k or "PACK" in k for k in plain)


def test_a_steps_slots_are_its_het_groups():
    spec, allocs = _job()
    slots, held = step_slots(spec, allocs)  # srun without --het-group: component 0, as Slurm's
    assert slots == [Slots("n1", 1, 1000, ())] and [a.node for a in held] == ["n1"]
    slots, held = step_slots(spec, allocs, [1])
    assert [(s.node, s.tasks) for s in slots] == [("n2", 2), ("n3", 2)]
    slots, _ = step_slots(spec, allocs, [0, 1])
    assert sum(s.tasks for s in slots) == 5
    with pytest.raises(HetGroupError, match="2 components"):
        step_slots(spec, allocs, [2])
    plain = c.JobSpec(tenant="acme", nodes=2, tasks_per_node=3)
    two = [c.NodeAllocation(node="a", tasks=3), c.NodeAllocation(node="b", tasks=3)]
    assert [s.tasks for s in step_slots(plain, two)[0]] == [3, 3]  # a job of one shape: all of it
    with pytest.raises(HetGroupError, match="one component"):
        step_slots(plain, two, [1])
