"""Fewer tasks than a gang's slots (Slurm's ``-N 3 -n 7``, and tasks spread by submission), and the GPUs
a node gives a job: what the batch script and ``srun`` see. Pure: ``task_layout``, ``slots_of``,
``plan_step`` and the agent's ``job_environment``."""

from __future__ import annotations

import pytest

from events import catalogue as c
from services.domain.steps import StepRequest, plan_step, slots_of, task_layout
from services.nodes.job_environment import job_environment


@pytest.mark.parametrize("held, ntasks, counts", [
    ([3, 3, 3], 7, [3, 3, 1]),        # -N 3 -n 7: the first nodes full, one left for each after them
    ([4, 4, 4], 10, [4, 4, 2]),       # -n 10 spread over 4-slot nodes: Slurm's own 4(x2),2
    ([2, 2, 2], 5, [2, 2, 1]),        # -n 5 --ntasks-per-node=2: Slurm's too
    ([3, 3], 5, [3, 2]),              # -N 2 -n 5 (Slurm on 4-CPU nodes: 4 and 1)
    ([43, 43, 43], 128, [43, 43, 42]),  # 128 tasks spread over 48-CPU nodes
    ([3, 3, 3], 3, [1, 1, 1]),
    ([2, 2], 0, [2, 2]),              # 0: every slot
    ([2, 2], 4, [2, 2]),
])
def test_the_tasks_fill_the_nodes_in_order_leaving_one_for_each_after(held, ntasks, counts):
    assert task_layout(held, ntasks) == counts
    assert sum(counts) == (ntasks or sum(held)) and min(counts) >= 1


def alloc(node: str, tasks: int, gpus: int = 0) -> c.NodeAllocation:
    return c.NodeAllocation(node=node, tasks=tasks, cpus_milli=tasks * 1000, memory_bytes=tasks << 30,
                            device_ids=[f"gpu{i}" for i in range(gpus)])


def test_srun_without_options_runs_the_jobs_tasks_not_its_slots():
    held = [alloc("n1", 3), alloc("n2", 3), alloc("n3", 3)]
    slots = slots_of(held, 3, 1000, ntasks=7)
    assert [(s.node, s.tasks, s.cpus_milli) for s in slots] == [("n1", 3, 3000), ("n2", 3, 3000), ("n3", 1, 3000)]
    layout = plan_step(StepRequest(), slots)
    assert layout.ntasks == 7 and layout.counts == [3, 3, 1]


def test_the_batch_script_sees_the_tasks_as_slurm_lays_them_out():
    spec = c.JobSpec(tenant="t", name="mpi", nodes=3, tasks_per_node=3, ntasks=7)
    held = [alloc("n1", 3), alloc("n2", 3), alloc("n3", 3)]
    env = job_environment("mpi-1", 1, spec, held[0], allocations=held)
    assert (env["SLURM_NTASKS"], env["SLURM_TASKS_PER_NODE"], env["SLURM_NNODES"]) == ("7", "3(x2),1", "3")


def test_an_exclusive_jobs_gpu_count_is_the_gpus_it_holds():
    # --exclusive --gres=gpu:4 on an 8-GPU node: the job holds all 8 (as Slurm), sees all 8, and says 8,
    # even where an older sbatch put the 4 it asked for into the job's env
    spec = c.JobSpec(tenant="t", name="train", gpus=4, exclusive=True, env={"SLURM_GPUS_ON_NODE": "4"})
    held = alloc("n1", 1, gpus=8)
    env = job_environment("train-1", 1, spec, held, allocations=[held])
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7" and env["SLURM_GPUS_ON_NODE"] == "8"
