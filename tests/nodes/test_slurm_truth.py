"""The Slurm backend tells Slurm's truth (issue 33, item 6), each finding against a real Slurm cluster
(``tests/slurm_cluster.py``) under ``horizon up --backend slurm``:

* work submitted straight to Slurm is *used* capacity on its node, never smaller totals: a Horizon
  job that needs the whole node waits for it, and is not refused as one that could never fit;
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from events import catalogue as c
from tests.nodes.test_slurm_backend import FINAL, SlurmUp, _check_against_slurm, _node_rows, needs_slurm
from tests.slurm_cluster import SlurmCluster, SlurmNode


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SlurmCluster]:
    nodes = [SlurmNode("s1"), SlurmNode("s2"), SlurmNode("s3", gpus=0, features=("solo",))]
    with SlurmCluster(tmp_path / "slurm", nodes) as running:
        yield running


def _sbatch(cluster: SlurmCluster, *args: str) -> str:
    """A job submitted straight to Slurm, outside Horizon."""
    return cluster.run("sbatch", "--parsable", "--output=/dev/null", *args, "--wrap", "sleep 300").strip()


@needs_slurm
@pytest.mark.timeout(120)
def test_slurm_s_own_work_is_used_capacity_not_smaller_nodes(tmp_path: Path, cluster: SlurmCluster) -> None:
    up = SlurmUp(tmp_path / "data", cluster)
    up.start()
    try:
        # Slurm's own jobs take all of s3 (4 CPUs, 4 GiB) and both GPUs of s1
        whole = _sbatch(cluster, "--nodelist=s3", "--cpus-per-task=4", "--mem=4096")
        gpus = _sbatch(cluster, "--nodelist=s1", "--gres=gpu:2", "--mem=10")
        rows = up.until(lambda: (r := _node_rows(up))["s3"]["cpus_used_milli"] == 4000
                        and r["s1"]["gpus_used"] == 2 and r)
        # the totals are Slurm's totals; the use is used, and a busy GPU is not an unhealthy one
        assert (rows["s3"]["cpus_milli"], rows["s3"]["memory_bytes"]) == (4000, 4096 << 20)
        assert rows["s3"]["memory_used_bytes"] == 4096 << 20 and rows["s3"]["state"] != "idle"
        assert (rows["s1"]["gpus"], rows["s1"]["gpus_used"], rows["s1"]["unhealthy"]) == (2, 2, {})
        # a job that needs all of s3 waits for Slurm's job, rather than being refused as never fitting;
        # one that needs two GPUs goes to s2, whose GPUs Slurm's job does not hold
        job = up.submit("--node-selector", "slurm.feature/solo=true", "--cpus", "4", "--", "true")
        two = up.submit("--gpus", "2", "--", "true")
        up.until(lambda: up.jobs()[two]["state"] == "SUCCEEDED")
        time.sleep(2)
        assert up.jobs()[job]["state"] == "PENDING", up.jobs()[job]
        [placed] = [e for e in up.log_events() if isinstance(e, c.JobScheduled) and e.job_id == two]
        assert [a.node for a in placed.allocations] == ["s2"]
        cluster.run("scancel", whole, gpus)
        up.until(lambda: all(j["state"] in FINAL for j in up.jobs().values()))
        assert {j["state"] for j in up.jobs().values()} == {"SUCCEEDED"}
        rows = up.until(lambda: (r := _node_rows(up))["s3"]["cpus_used_milli"] == 0 and r)
        assert rows["s3"]["state"] == "idle" and rows["s1"]["gpus_used"] == 0
        _check_against_slurm(up, up.jobs())
        done = up.cli("check")
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        up.stop()
