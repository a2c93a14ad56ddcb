"""submitit (Meta's launcher for PyTorch jobs) drives `horizon up` through its own Slurm backend, unchanged
(issue 34, the workflow tools as acceptance).

A person with no Slurm of their own starts ``horizon up``, puts Horizon's Slurm commands on PATH
(``horizon slurm-shims``, docs/slurm.md) and ``HORIZON_NATS_URL`` in their shell, activates a venv
with submitit from PyPI (``tests/journeys/tool_venv.py``) and runs their script. submitit writes its
batch script (``#SBATCH --output=logs/%j/%j_0_log.out``, ``--signal=USR2@90``, ``--open-mode=append``,
``--wckey``, ...), runs ``sbatch`` and reads the number with ``job (?P<id>[0-9]+)``, makes
``logs/<number>/`` and moves its pickle there; the job runs ``srun --output logs/%j/%j_%t_log.out ...
python -u -m submitit.core._submit`` (the venv's python: the job has the submitting shell's PATH,
``--export=ALL``), which reads ``SLURM_JOB_ID``, ``SLURM_ARRAY_JOB_ID``/``SLURM_ARRAY_TASK_ID``,
``SLURM_PROCID``/``SLURM_NTASKS`` and writes each task's result pickle; submitit polls
``sacct -o JobID,State,NodeList --parsable2 -j N`` and cancels with ``scancel N``.

The script: a function with a result (``AutoExecutor``), a job array (``map_array``), a 2-task job
(each task's result), a job that raises (the exception comes back from ``job.result()``), and a cancel
(``SlurmExecutor``: ``job.cancel()``, then its state). Then ``horizon audit`` passes over the log.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.journeys.conftest import running
from tests.journeys.person import Person
from tests.journeys.tool_venv import tool_venv, with_the_shims

pytestmark = pytest.mark.timeout(600)

SUBMITIT = "submitit==1.5.4"

# The user's script, as submitit's docs write one. It prints one JSON report.
SCRIPT = '''\
import json
import os
import time

import submitit


def add(a, b):
    return a + b


def square(x):
    return x * x


def whoami():
    env = submitit.JobEnvironment()
    return {"rank": env.global_rank, "tasks": env.num_tasks, "job": env.job_id,
            "procid": os.environ["SLURM_PROCID"], "ntasks": os.environ["SLURM_NTASKS"]}


def fails():
    raise ValueError("learning rate 0.5 is too high")


def forever():
    time.sleep(600)


report = {}
executor = submitit.AutoExecutor(folder="logs/%j", cluster="slurm")
executor.update_parameters(timeout_min=5, cpus_per_task=1, slurm_mem="200M")

job = executor.submit(add, 2, 3)
report["add"] = {"job": job.job_id, "result": job.result()}

jobs = executor.map_array(square, [1, 2, 3, 4])
report["array"] = {"jobs": [j.job_id for j in jobs], "results": [j.result() for j in jobs]}

executor.update_parameters(tasks_per_node=2)
job = executor.submit(whoami)
report["tasks"] = {"job": job.job_id, "results": job.results()}

executor.update_parameters(tasks_per_node=1)
job = executor.submit(fails)
try:
    job.result()
except Exception as error:
    report["raised"] = {"job": job.job_id, "type": type(error).__name__, "message": str(error)}

slurm = submitit.SlurmExecutor(folder="logs/%j")
slurm.update_parameters(time=5, cpus_per_task=1, mem="200M")
job = slurm.submit(forever)
deadline = time.time() + 60
while job.state != "RUNNING" and time.time() < deadline:
    time.sleep(0.5)
report["before cancel"] = job.state
job.cancel()
job.wait()
report["cancelled"] = {"job": job.job_id, "state": job.state}

print(json.dumps(report))
'''


def test_submitit_runs_its_jobs_on_horizon(someone: Person) -> None:
    venv = tool_venv(SUBMITIT)
    with running(someone, "horizon up --port 0", at="work") as up:
        with_the_shims(someone, up.url, venv)
        (someone.cwd / "train.py").write_text(SCRIPT)
        began = time.monotonic()
        done = someone.run("python train.py", timeout=300)
        took = time.monotonic() - began
        report = json.loads(done.out.strip().splitlines()[-1])

        assert report["add"]["result"] == 5 and report["add"]["job"].isdigit(), report
        # an array of four: <number>_<index>, each its own result
        array = report["array"]["jobs"]
        assert [j.split("_")[1] for j in array] == ["0", "1", "2", "3"] and len({j.split("_")[0] for j in array}) == 1
        assert report["array"]["results"] == [1, 4, 9, 16], report
        # two tasks of one job (srun), each its own rank and result
        number = report["tasks"]["job"]
        assert report["tasks"]["results"] == [
            {"rank": 0, "tasks": 2, "job": number, "procid": "0", "ntasks": "2"},
            {"rank": 1, "tasks": 2, "job": number, "procid": "1", "ntasks": "2"}], report
        # the job's exception, with its traceback, from job.result()
        raised = report["raised"]
        assert raised["type"] == "FailedJobError", raised
        assert "ValueError: learning rate 0.5 is too high" in raised["message"], raised
        assert report["before cancel"] == "RUNNING" and report["cancelled"]["state"] == "CANCELLED", report

        # Horizon's own records say the same (the numbers submitit read are Horizon's jobs)
        sacct = someone.run(f"sacct -X -P -n -o JobID,State -j {report['add']['job']} -j {raised['job']} "
                            f"-j {report['cancelled']['job']}").out.split()
        assert sacct == [f"{report['add']['job']}|COMPLETED", f"{raised['job']}|FAILED",
                         f"{report['cancelled']['job']}|CANCELLED"], sacct
        audit = someone.run("horizon audit")
        assert audit.out.strip().splitlines()[-1].startswith("OK: all "), audit
    print(f"submitit's script took {took:.1f} s")
