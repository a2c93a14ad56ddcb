"""The environment a job sees on its node: its own variables, where it runs (Slurm-like names alongside
Horizon's), its array task, and the checkpoint an earlier attempt left. Pure.

Every backend gives its jobs this environment (the process executor whole; the Slurm backend the
``HORIZON_*`` part, Slurm setting its own), and the job steps give each task its share of it
(``services/domain/steps.py``). It goes over what the job starts from: the submitting shell's
environment as sbatch's ``--export`` took it (``spec.submit_env``: over the node's PATH and locale and
the running user's identity, ``identity.submitted_environment``), else the node agent's own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from events import catalogue as c
from events.subjects import tenant_view
from services.domain.hetjob import by_component, component_count, component_specs
from services.domain.hostlist import compress
from services.domain.steps import counts_text, task_layout

__all__ = ["job_environment", "het_environment", "visible_devices", "CLUSTER_NAME"]

CLUSTER_NAME = "horizon"  # SLURM_CLUSTER_NAME (and sbatch --parsable's ID;cluster)


def visible_devices(device_ids: Sequence[str], devices: Mapping[str, c.GpuDevice] | None = None) -> list[str]:
    """What ``CUDA_VISIBLE_DEVICES`` names for these devices of a node: the UUID where the node knows
    it (a real GPU: CUDA's own numbering need not be the driver's), else the index (a simulated node)."""
    devices = devices or {}
    visible = []
    for device_id in device_ids:
        known = devices.get(device_id)
        if known is not None and known.uuid:
            visible.append(known.uuid)
        else:
            visible.append(device_id.rsplit("gpu", 1)[-1] if "gpu" in device_id else device_id)
    return visible


def job_environment(
    job_id: str, attempt: int, spec: c.JobSpec, alloc: c.NodeAllocation, checkpoint_ref: str | None = None,
    devices: Mapping[str, c.GpuDevice] | None = None, allocations: Sequence[c.NodeAllocation] = (),
) -> dict[str, str]:
    """The variables a job sees: its own ``env``, plus where it runs (Slurm-like names alongside ours),
    its array task, and the checkpoint an earlier attempt left (``HORIZON_CHECKPOINT_REF``), if any.

    ``CUDA_VISIBLE_DEVICES`` names the allocated GPUs (``visible_devices``). ``allocations``: the
    job's whole allocation (default: ``alloc`` alone), for Slurm's view of it: ``SLURM_JOB_NODELIST``
    (compressed, ``node-[00-01]``), ``SLURM_JOB_NUM_NODES``, ``SLURM_NTASKS``,
    ``SLURM_TASKS_PER_NODE`` (``4(x2)``), ``SLURM_JOB_CPUS_PER_NODE``, ``SLURM_GPUS_ON_NODE``, ...
    The batch script is task 0 on node 0, as in Slurm. A heterogeneous job's batch script sees component 0
    as the job, and each component k in the ``*_HET_GROUP_k`` variables (``het_environment``)."""
    visible = visible_devices(alloc.device_ids, devices)
    held = list(allocations) or [alloc]
    whole = held
    if spec.components:  # a heterogeneous job's batch script sees component 0 as the job, as Slurm's leader
        held = by_component(spec, held)[0] or held
    nodelist = compress([a.node for a in held])
    tasks = task_layout([max(1, a.tasks) for a in held], spec.ntasks)  # -n fewer than the slots: Slurm's layout
    cpus = [max(1, -(-a.cpus_milli // 1000)) for a in held]
    # The job sees itself by the id its tenant gave it (``eval-7``, not the log's key ``acme:eval-7``),
    # and Slurm's variables by its number (SLURM_JOB_ID=4213; services/domain/job_numbers.py), as the
    # tools that drive Slurm read them; a job from before numbers by its id.
    job_id = tenant_view(spec.tenant, job_id)
    array_id = tenant_view(spec.tenant, spec.array) if spec.array is not None else None
    slurm_job = str(spec.number) if spec.number else job_id
    slurm_array = str(spec.array_number) if spec.array_number else array_id
    env = {
        "HORIZON_JOB_ID": job_id,
        "HORIZON_ATTEMPT": str(attempt),
        "HORIZON_NODE": alloc.node,
        "HORIZON_GPU_IDS": ",".join(alloc.device_ids),
        "HORIZON_CPUS": f"{alloc.cpus_milli / 1000:g}",
        "CUDA_VISIBLE_DEVICES": ",".join(visible),
        "SLURM_JOB_ID": slurm_job,
        "SLURM_JOB_NAME": spec.name,
        "SLURMD_NODENAME": alloc.node,
        "SLURM_JOBID": slurm_job,
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_JOB_NUM_NODES": str(len(held)),
        "SLURM_NNODES": str(len(held)),
        "HORIZON_WORLD_SIZE": str(len(held)),  # nodes now (an elastic job's change: services/nodes/backends/process/resize.py)
        "SLURM_NTASKS": str(sum(tasks)),
        "SLURM_NPROCS": str(sum(tasks)),
        "SLURM_TASKS_PER_NODE": counts_text(tasks),
        "SLURM_JOB_CPUS_PER_NODE": counts_text(cpus),
        "SLURM_CPUS_ON_NODE": str(max(1, -(-alloc.cpus_milli // 1000))),
        "SLURM_NODEID": "0",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_TOPOLOGY_ADDR": alloc.node,
        "SLURM_CLUSTER_NAME": CLUSTER_NAME,
    }
    if alloc.memory_bytes:
        env["SLURM_MEM_PER_NODE"] = str(alloc.memory_bytes >> 20)  # Slurm counts MiB
    if spec.account:
        env["SLURM_JOB_ACCOUNT"] = spec.account
    if spec.user:
        env["SLURM_JOB_USER"] = spec.user
    if spec.partition:  # the partition it got (of those it named, or the default one)
        env["SLURM_JOB_PARTITION"] = spec.partition
    if spec.cwd:
        env["SLURM_SUBMIT_DIR"] = spec.cwd
    if array_id is not None and spec.array_index is not None:
        env.update(HORIZON_ARRAY_ID=array_id, HORIZON_ARRAY_INDEX=str(spec.array_index),
                   SLURM_ARRAY_JOB_ID=slurm_array or array_id, SLURM_ARRAY_TASK_ID=str(spec.array_index))
    if checkpoint_ref is not None:
        env["HORIZON_CHECKPOINT_REF"] = checkpoint_ref
    if spec.elastic:  # --nodes MIN-MAX: its world size may change while it runs
        env.update(HORIZON_MIN_NODES=str(spec.min_nodes), HORIZON_MAX_NODES=str(spec.nodes),
                   SLURM_JOB_MIN_NODES=str(spec.min_nodes), SLURM_JOB_MAX_NODES=str(spec.nodes))
    if spec.components:
        env.update(het_environment(spec, whole, slurm_job))
    env.update(spec.env)
    if alloc.device_ids:  # what the node holds, after env: an --exclusive job holds all its GPUs, which it sees
        env["SLURM_GPUS_ON_NODE"] = str(len(alloc.device_ids))
    return env


def het_environment(spec: c.JobSpec, allocations: Sequence[c.NodeAllocation], slurm_job: str) -> dict[str, str]:
    """A heterogeneous job's variables, as Slurm sets them in its batch script: ``SLURM_HET_SIZE`` (and
    the old ``SLURM_PACK_SIZE``) and, for each component k, its job id (``SLURM_JOB_ID_HET_GROUP_k``:
    the job's number + k, the number each component has), name, account, partition, nodes
    (``SLURM_JOB_NODELIST_HET_GROUP_k``, ``SLURM_JOB_NUM_NODES_HET_GROUP_k``), CPUs and tasks per node
    and memory per node (MiB)."""
    count = component_count(spec)
    env = {"SLURM_HET_SIZE": str(count), "SLURM_PACK_SIZE": str(count)}
    for k, (shape, held) in enumerate(zip(component_specs(spec), by_component(spec, allocations))):
        tasks = task_layout([max(1, a.tasks) for a in held], shape.ntasks)
        one = {
            "SLURM_JOB_ID": str(int(slurm_job) + k) if slurm_job.isdigit() else f"{slurm_job}+{k}",
            "SLURM_JOB_NAME": spec.name,
            "SLURM_JOB_NODELIST": compress([a.node for a in held]),
            "SLURM_JOB_NUM_NODES": str(len(held)),
            "SLURM_JOB_CPUS_PER_NODE": counts_text([max(1, -(-a.cpus_milli // 1000)) for a in held]),
            "SLURM_TASKS_PER_NODE": counts_text(tasks),
            "SLURM_NTASKS": str(sum(tasks)),
        }
        if spec.account:
            one["SLURM_JOB_ACCOUNT"] = spec.account
        if spec.partition:
            one["SLURM_JOB_PARTITION"] = spec.partition
        if held and held[0].memory_bytes:
            one["SLURM_MEM_PER_NODE"] = str(held[0].memory_bytes >> 20)
        env.update({f"{name}_HET_GROUP_{k}": value for name, value in one.items()})
    return env
