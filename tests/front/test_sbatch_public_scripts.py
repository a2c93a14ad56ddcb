"""The #SBATCH headers of public scripts that Horizon refused or ran otherwise than Slurm (issue 34,
"30 fresh #SBATCH scripts from public repositories"), each read as sbatch reads it: the script's own
directive lines, what the job asks for, and what Horizon says about it. Pure: ``parse_sbatch``.

What submission then makes of a job (the partition's MaxTime for no limit, the nodes tasks spread
over) is tested in tests/services/test_submission_slurm_shapes.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from services.front.slurm.sbatch import SbatchDefaults, parse_sbatch
from services.front.slurm.sbatch_options import SbatchError

NOW = datetime(2026, 11, 28, 9, 0, tzinfo=timezone(timedelta(hours=1)))
DEFAULTS = SbatchDefaults(user="ann", workdir="/home/ann/run", script_path="/home/ann/run/job.sh", now=NOW)


def read(script: str) -> tuple[dict[str, Any], list[str]]:
    """The JobSubmitted fields of a whole script, and the warnings sbatch prints."""
    warnings: list[str] = []
    fields, _ = parse_sbatch(script.lstrip(), defaults=DEFAULTS, warnings=warnings)
    return fields, warnings


# ----------------------------------------------------------------------------- --time=0, whole minutes


def test_a_gpu_training_script_with_no_time_limit():
    fields, warnings = read("""
#!/bin/bash
#SBATCH --job-name=llama-ft
#SBATCH --nodes=1
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=32
#SBATCH --time=0
#SBATCH --output=logs/%x-%j.out
python train.py --config configs/ft.yaml
""")
    assert fields["time_limit_s"] == 0  # no limit: submission gives the partition's MaxTime
    assert warnings == ["line 6: --time: =0: no time limit: the job gets its partition's MaxTime, else the "
                        "cluster's longest limit (every Horizon job has one; backfill plans with it)"]


def test_unlimited_is_no_limit_too():
    fields, warnings = read("""
#!/bin/bash
#SBATCH -p long
#SBATCH -t UNLIMITED
#SBATCH --mem=16G
./simulate
""")
    assert fields["time_limit_s"] == 0 and fields["partitions"] == ["long"]
    assert "no time limit" in warnings[0]


def test_a_limit_in_seconds_is_whole_minutes_rounded_up():
    # minutes:seconds, as Slurm reads it: 0:05 is five seconds, which Slurm makes one minute
    fields, _ = read("""
#!/bin/bash
#SBATCH --time=0:05
#SBATCH --ntasks=1
hostname
""")
    assert fields["time_limit_s"] == 60
    fields, _ = read("#!/bin/bash\n#SBATCH --time=00:10:30\necho\n")  # hours:minutes:seconds
    assert fields["time_limit_s"] == 11 * 60


# ----------------------------------------------------------------------------- partition names with dots


def test_a_partition_named_with_a_dot():
    fields, warnings = read("""
#!/bin/bash
#SBATCH -N 1
#SBATCH -p test.q
#SBATCH -t 00:30:00
#SBATCH -J bwa-index
bwa index ref.fa
""")
    assert fields["partitions"] == ["test.q"] and warnings == []
    fields, _ = read("#!/bin/bash\n#SBATCH --partition=gpu.q,cpu.q\nhostname\n")
    assert fields["partitions"] == ["gpu.q", "cpu.q"]


# ----------------------------------------------------------------------------- tasks over nodes (-n, -N)


def shape(fields: dict[str, Any]) -> tuple[Any, ...]:
    return (fields["nodes"], fields["tasks_per_node"], fields.get("ntasks"), fields.get("spread_tasks", False))


def test_an_mpi_script_of_128_tasks_and_no_nodes_is_spread_by_submission():
    fields, warnings = read("""
#!/bin/bash
#SBATCH --job-name=lammps
#SBATCH -n 128
#SBATCH --mem-per-cpu=2G
#SBATCH -t 12:00:00
#SBATCH -o out.%j
module load lammps
srun lmp -in in.lj
""")
    # submission chooses the nodes (tests/services/test_submission_slurm_shapes.py): 3 of 43 on 48-CPU nodes
    assert shape(fields) == (1, 1, 128, True) and warnings == []
    assert fields["resources"].memory == 2 * 2**30  # per CPU, so per task: no node count needed
    assert fields["env"]["SLURM_NTASKS"] == "128" and "SLURM_NNODES" not in fields["env"]  # the agent's to say


def test_mem_with_spread_tasks_is_each_nodes():
    fields, _ = read("#!/bin/bash\n#SBATCH --ntasks=64\n#SBATCH --mem=100G\nsrun ./a.out\n")
    assert shape(fields) == (1, 1, 64, True)
    assert fields["memory_per_node"] == 100 * 2**30 and fields["resources"].memory is None


def test_ntasks_over_nodes_that_do_not_divide_them_as_slurm_lays_them_out():
    # Slurm 22.05 (the test cluster's) on idle 4-CPU nodes: -N 2 -n 5 ran 4 and 1; -N 3 -n 7 4, 2, 1.
    # One gang shape holds ceil(ntasks / nodes) a node: 3 and 2; 3, 3 and 1 (services/domain/steps.py).
    assert shape(read("#!/bin/bash\n#SBATCH -N 2\n#SBATCH -n 5\nsrun hostname\n")[0]) == (2, 3, 5, False)
    assert shape(read("#!/bin/bash\n#SBATCH -N 3\n#SBATCH -n 7\nsrun hostname\n")[0]) == (3, 3, 7, False)
    # --ntasks-per-node is a maximum with -n: as few nodes as it allows (Slurm: 3 nodes, 2, 2, 1)
    fields, _ = read("#!/bin/bash\n#SBATCH -n 5\n#SBATCH --ntasks-per-node=2\nsrun hostname\n")
    assert shape(fields) == (3, 2, 5, False) and fields["env"]["SLURM_NTASKS"] == "5"
    assert fields["env"]["SLURM_NTASKS_PER_NODE"] == "2" and fields["env"]["SLURM_NNODES"] == "3"
    # what divides is every slot, as before
    assert shape(read("#!/bin/bash\n#SBATCH -N 2\n#SBATCH -n 8\nsrun hostname\n")[0]) == (2, 4, None, False)


def test_fewer_tasks_than_nodes_is_fewer_nodes_with_slurms_warning():
    fields, warnings = read("#!/bin/bash\n#SBATCH -N 3\n#SBATCH -n 2\nsrun hostname\n")
    assert shape(fields) == (2, 1, None, False)
    assert warnings == ["line 3: -n: can't run 2 processes on 3 nodes, setting nnodes to 2 (as Slurm's sbatch)"]


def test_a_per_job_gpu_count_keeps_the_tasks_on_one_node():
    # --gpus is a count for the whole job, which needs the node count now: one node, as before
    fields, _ = read("#!/bin/bash\n#SBATCH -n 4\n#SBATCH --gpus=4\npython ddp.py\n")
    assert shape(fields) == (1, 4, None, False) and fields["gpus_per_node"] == 4


# ----------------------------------------------------------------------------- --ntasks-per-gpu


def test_ntasks_per_gpu_counts_the_tasks_from_the_gpus():
    # Slurm: -N 2 --ntasks-per-gpu=2 --gres=gpu:1 ran 4 tasks, 2(x2), SLURM_GPUS_ON_NODE=1
    fields, warnings = read("""
#!/bin/bash
#SBATCH -N 2
#SBATCH --gres=gpu:1
#SBATCH --ntasks-per-gpu=2
srun python infer.py
""")
    assert shape(fields) == (2, 2, None, False) and fields["gpus_per_node"] == 1
    assert fields["env"]["SLURM_NTASKS"] == "4" and fields["env"]["SLURM_NTASKS_PER_GPU"] == "2"
    assert warnings == ["line 4: --ntasks-per-gpu: =2: Horizon does not bind each task to one GPU (Slurm's "
                        "--gpu-bind=single:2): a node's tasks share its GPUs, each seeing them all"]


def test_one_task_per_gpu_is_a_gpu_of_its_own():
    # the usual DDP header: 8 ranks, one per GPU, and Slurm's binding single:1 is each task's own GPU
    fields, warnings = read("""
#!/bin/bash
#SBATCH --nodes=1
#SBATCH --gres=gpu:8
#SBATCH --ntasks-per-gpu=1
#SBATCH --cpus-per-task=8
srun python train.py
""")
    assert shape(fields) == (1, 8, None, False) and warnings == []
    assert fields["resources"].gpus == 1 and "gpus_per_node" not in fields
    assert fields["env"]["SLURM_GPUS_PER_TASK"] == "1"


def test_ntasks_per_gpu_with_ntasks_counts_the_gpus():
    # Slurm: -n 4 --ntasks-per-gpu=2 ran 4 tasks on one node with 2 GPUs
    fields, _ = read("#!/bin/bash\n#SBATCH -n 4\n#SBATCH --ntasks-per-gpu=2\nsrun ./a.out\n")
    assert shape(fields) == (1, 4, None, False) and fields["gpus_per_node"] == 2
    # one task per GPU: a GPU each, spread over as many nodes as submission finds
    fields, _ = read("#!/bin/bash\n#SBATCH -n 16\n#SBATCH --ntasks-per-gpu=1\nsrun ./a.out\n")
    assert shape(fields) == (1, 1, 16, True) and fields["resources"].gpus == 1


def test_ntasks_per_gpu_refuses_what_slurm_refuses():
    for directives, words in (("--ntasks-per-gpu=2\n#SBATCH --gpus-per-task=1\n#SBATCH -n 2",
                               "and --gpus-per-task exclude each other"),
                              ("--ntasks-per-gpu=1\n#SBATCH --ntasks-per-node=4\n#SBATCH --gres=gpu:4",
                               "and --ntasks-per-node exclude each other"),
                              ("--ntasks-per-gpu=1\n#SBATCH -N 1-2\n#SBATCH --gres=gpu:1",
                               "not compatible with a range of nodes"),
                              ("--ntasks-per-gpu=1", "needs --ntasks, or the GPUs")):
        try:
            read(f"#!/bin/bash\n#SBATCH {directives}\nhostname\n")
        except SbatchError as exc:
            assert words in str(exc), (directives, str(exc))
        else:
            raise AssertionError(directives)


# ----------------------------------------------------------------------------- --exclusive and its GPUs


def test_an_exclusive_job_leaves_its_gpu_count_to_its_node():
    # SLURM_GPUS_ON_NODE is what the node gives the job (all its GPUs under --exclusive, as Slurm), set
    # by the agent (services/nodes/job_environment.py), not the count asked for at submission
    fields, _ = read("""
#!/bin/bash
#SBATCH --exclusive
#SBATCH --gres=gpu:4
#SBATCH --ntasks-per-node=4
torchrun --nproc_per_node=4 train.py
""")
    assert fields["exclusive"] is True and "SLURM_GPUS_ON_NODE" not in fields["env"]


def test_ntasks_per_gpu_with_tasks_and_a_nodes_gpus_fills_nodes_by_their_gpus():
    # -n 4 --ntasks-per-gpu=1 --gres=gpu:2: four GPUs, two a node, so two nodes of two tasks, a GPU each
    fields, _ = read("#!/bin/bash\n#SBATCH -n 4\n#SBATCH --gres=gpu:2\n#SBATCH --ntasks-per-gpu=1\nsrun ./a.out\n")
    assert shape(fields) == (2, 2, None, False) and fields["resources"].gpus == 1


def test_the_mpi_scripts_128_tasks_are_accepted_on_three_48_cpu_nodes():
    # the script's own lines through sbatch and submission (pure): what `horizon sbatch` would submit and
    # what the submission service accepts on a cluster of 48-CPU nodes
    from events import catalogue as c
    from services.submission.capacity import Capacity
    from services.submission.normalise import normalise
    from tests.helpers import node

    fields, _ = read("""
#!/bin/bash
#SBATCH --job-name=lammps
#SBATCH -n 128
#SBATCH --mem-per-cpu=2G
#SBATCH -t 12:00:00
srun lmp -in in.lj
""")
    capacity = Capacity()
    for i in range(4):
        capacity.apply(node(f"c{i}", gpus=0, cpus=48, memory=192 << 30))
    spec = normalise(c.JobSubmitted(job_id="lammps", tenant="acme", **fields), subject_tenant="acme",
                     gpu_models=set(), capacity=capacity)
    assert (spec.nodes, spec.tasks_per_node, spec.ntasks, spec.memory_bytes) == (3, 43, 128, 2 << 30)
    assert spec.time_limit_s == 12 * 3600
