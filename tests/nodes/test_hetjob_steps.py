"""A heterogeneous job for real (issue 34 item 3): `horizon up` on a development cluster of three nodes,
`horizon sbatch` of a script with `#SBATCH hetjob`, the agent running its batch script on component 0's
node and its steps on the components `srun --het-group` names, then `horizon audit` of the log.

Component 0 is one task with 3 GiB; component 1 two nodes of one task each. Placement gives component 0
the first node and component 1 the two others (each component on nodes of its own)."""

from __future__ import annotations

import json

import pytest

from tests.nodes.test_real_nodes import Up

pytestmark = pytest.mark.timeout(240)

SCRIPT = r"""#!/bin/bash
#SBATCH -J coupled -t 5 -o het-%j.out
#SBATCH -n1 --mem=3g
#SBATCH hetjob
#SBATCH -N2 --ntasks-per-node=1 --mem=512m
echo "SIZE $SLURM_HET_SIZE $SLURM_JOB_NODELIST_HET_GROUP_0 $SLURM_JOB_NODELIST_HET_GROUP_1 $SLURM_JOB_ID_HET_GROUP_0 $SLURM_JOB_ID_HET_GROUP_1"
echo "BATCH $SLURMD_NODENAME $SLURM_JOB_ID $SLURM_JOB_NODELIST $SLURM_NTASKS $SLURM_MEM_PER_NODE_HET_GROUP_0 $SLURM_NTASKS_HET_GROUP_1"
srun --het-group=1 bash -c 'echo ONE $SLURM_PROCID $SLURMD_NODENAME $SLURM_NTASKS $SLURM_JOB_NODELIST'
srun bash -c 'echo ZERO $SLURM_PROCID $SLURMD_NODENAME $SLURM_NTASKS'
srun --het-group=0,1 bash -c 'echo BOTH $SLURM_PROCID $SLURMD_NODENAME $SLURM_NTASKS'
srun --het-group=2 true; echo "NOGROUP $?"
"""


def test_a_heterogeneous_job_runs_its_steps_on_the_components_srun_names(tmp_path):
    up = Up(tmp_path / "h", "--nodes", "3", "--cpus-per-node", "4", "--memory-per-node", "8Gi", "--executor",
            "process")
    work = tmp_path / "project"
    work.mkdir()
    script = work / "coupled.sh"
    script.write_text(SCRIPT)
    up.start()
    try:
        done = up.cli("sbatch", "--parsable", str(script), cwd=work)
        assert done.returncode == 0, done.stderr
        number = done.stdout.strip()
        assert number.isdigit(), done.stdout
        row = up.wait_state(number, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=120)
        out = (work / f"het-{number}.out").read_text()
        assert row["state"] == "SUCCEEDED", (row, out)
        lines = out.splitlines()
        n = int(number)
        assert f"SIZE 2 node-00 node-[01-02] {n} {n + 1}" in lines, out
        assert f"BATCH node-00 {n} node-00 1 3072 2" in lines, out
        assert sorted(line for line in lines if line.startswith("ONE")) == [
            "ONE 0 node-01 2 node-[01-02]", "ONE 1 node-02 2 node-[01-02]"], out
        assert [line for line in lines if line.startswith("ZERO")] == ["ZERO 0 node-00 1"], out
        assert sorted(line for line in lines if line.startswith("BOTH")) == [
            "BOTH 0 node-00 3", "BOTH 1 node-01 3", "BOTH 2 node-02 3"], out
        assert "NOGROUP 1" in lines and any("--het-group: component 2 asked for, but the job has 2 components" in line
                                            for line in lines), out
        shown = json.loads(up.cli("show", "--json", number).stdout)["job"]["job"]
        # component 0's node, then component 1's two: 3 GiB and one task, then 512 MiB and one task each
        assert [(a["node"], a["memory_bytes"] >> 20, a["tasks"]) for a in shown["allocation"]] == [
            ("node-00", 3072, 1), ("node-01", 512, 1), ("node-02", 512, 1)], shown["allocation"]
        audit = up.cli("audit")
        assert audit.returncode == 0, audit.stdout + audit.stderr
    finally:
        assert up.stop() == 0
