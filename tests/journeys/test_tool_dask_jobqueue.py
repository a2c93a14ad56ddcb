"""dask-jobqueue's ``SLURMCluster`` starts its Dask workers as jobs of `horizon up`, unchanged (issue 34,
the workflow tools as acceptance).

A person with no Slurm of their own starts ``horizon up``, puts Horizon's Slurm commands on PATH
(``horizon slurm-shims``, docs/slurm.md) and ``HORIZON_NATS_URL`` in their shell, activates a venv
with dask-jobqueue from PyPI (``tests/journeys/tool_venv.py``) and runs their script. For each worker
dask-jobqueue writes a batch script to a temporary file (``#SBATCH -J dask-worker``, ``-e``/``-o
dask-logs/dask-worker-%J.err|out``, ``-n 1``, ``--cpus-per-task=1``, ``--mem=489M``, ``-t 00:10:00``,
then the venv's ``python -m distributed.cli.dask_worker tcp://...``), runs ``sbatch FILE``, reads the
number with ``(?P<job_id>\\d+)`` and deletes the file at once (the job runs sbatch's copy); at close it
runs ``scancel N`` for each.

The script: ``cluster.scale(2)``, a ``Client`` waits for both workers, computes a sum of squares over
them, asks each worker which job it is (``SLURM_JOB_ID``), and closes. Then the workers' jobs are
cancelled in Horizon's records, their logs are where ``%J`` put them, and ``horizon audit`` passes.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.journeys.conftest import running
from tests.journeys.person import Person
from tests.journeys.tool_venv import tool_venv, with_the_shims

pytestmark = pytest.mark.timeout(600)

# dask and distributed pinned with it: a newer one may change what a worker's command line is
DASK_JOBQUEUE = ("dask-jobqueue==0.9.0", "dask==2026.8.0", "distributed==2026.8.0")

# The user's script, as dask-jobqueue's docs write one (small workers: this machine has 2 CPUs).
SCRIPT = '''\
import json
import os

from dask.distributed import Client
from dask_jobqueue import SLURMCluster

cluster = SLURMCluster(cores=1, processes=1, memory="512MB", walltime="00:10:00", log_directory="dask-logs")
cluster.scale(2)
client = Client(cluster)
client.wait_for_workers(2, timeout=120)
squares = client.map(lambda x: x * x, range(100))
total = client.submit(sum, squares).result()
jobs = sorted(client.run(lambda: os.environ["SLURM_JOB_ID"]).values())
client.close()
cluster.close()
print(json.dumps({"sum": total, "jobs": jobs}))
'''


def test_dask_jobqueue_scales_computes_and_closes_on_horizon(someone: Person) -> None:
    venv = tool_venv(*DASK_JOBQUEUE)
    with running(someone, "horizon up --port 0", at="work") as up:
        with_the_shims(someone, up.url, venv)
        (someone.cwd / "squares.py").write_text(SCRIPT)
        began = time.monotonic()
        done = someone.run("python squares.py", timeout=300)
        took = time.monotonic() - began
        report = json.loads(done.out.strip().splitlines()[-1])

        assert report["sum"] == sum(x * x for x in range(100)), report
        jobs = report["jobs"]
        assert len(jobs) == 2 and all(job.isdigit() for job in jobs) and jobs[0] != jobs[1], report
        # each worker a job of Horizon's, ended by dask-jobqueue's scancel at close
        states = someone.until(f"sacct -X -P -n -o JobID,JobName,State -j {jobs[0]} -j {jobs[1]}",
                               lambda r: r.out.count("|CANCELLED") == 2, timeout=60).out.split()
        assert states == [f"{job}|dask-worker|CANCELLED" for job in jobs], states
        # -o dask-logs/dask-worker-%J.out: %J of a batch script is its number, as in Slurm
        logs = sorted(p.name for p in (someone.cwd / "dask-logs").iterdir())
        assert logs == sorted(f"dask-worker-{job}.{kind}" for job in jobs for kind in ("err", "out")), logs
        audit = someone.run("horizon audit")
        assert audit.out.strip().splitlines()[-1].startswith("OK: all "), audit
    print(f"dask-jobqueue's script took {took:.1f} s")
