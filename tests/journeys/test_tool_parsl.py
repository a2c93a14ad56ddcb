"""Parsl drives `horizon up` through its own Slurm provider, unchanged (issue 34, the workflow tools as
acceptance).

A person with no Slurm of their own starts ``horizon up``, puts Horizon's Slurm commands on PATH
(``horizon slurm-shims``, docs/slurm.md) and ``HORIZON_NATS_URL`` in their shell, activates a venv with
Parsl from PyPI (``tests/journeys/tool_venv.py``) and runs their script: a ``HighThroughputExecutor``
whose blocks are ``SlurmProvider`` jobs, and 20 ``python_app`` calls.

What Parsl does with Slurm (parsl/providers/slurm/slurm.py): at start ``sacct -X`` (exit 0: it polls
with sacct, else squeue); a block is ``sbatch <script>`` of its template (``#SBATCH --job-name``,
``--output``/``--error``, ``--nodes=1``, ``--time=10`` in minutes, ``--ntasks-per-node=1``,
``--exclusive``), the number read with ``Submitted batch job (?P<id>\\S*)``; the job runs
``process_worker_pool.py`` from the venv (the job has the submitting shell's PATH, ``--export=ALL``),
whose workers connect back to Parsl's interchange and run the apps; Parsl polls ``sacct -X --noheader
--format=jobid,state%20 --job '<numbers>'`` (``--job``: getopt's prefix of ``--jobs``) and ends the
block with ``scancel <number>``. The script asks Parsl's provider for the block's state while it runs
(that poll), then cleans up. Then ``horizon audit`` passes over the log. The command lines alone:
tests/front/test_workflow_tool_commands.py.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.journeys.conftest import running
from tests.journeys.person import Person
from tests.journeys.tool_venv import tool_venv, with_the_shims

pytestmark = pytest.mark.timeout(600)

PARSL = "parsl==2026.10.26"

# The user's script, as Parsl's docs configure a Slurm cluster. It prints one JSON report.
SCRIPT = '''\
import json

import parsl
from parsl.config import Config
from parsl.executors import HighThroughputExecutor
from parsl.providers import SlurmProvider


@parsl.python_app
def square(x):
    import os
    return {"x": x, "square": x * x, "job": os.environ["SLURM_JOB_ID"]}


htex = HighThroughputExecutor(
    label="horizon",
    max_workers_per_node=2,
    provider=SlurmProvider(nodes_per_block=1, init_blocks=1, min_blocks=0, max_blocks=1, walltime="00:10:00"),
)
parsl.load(Config(executors=[htex]))

results = [future.result(timeout=300) for future in [square(i) for i in range(20)]]
blocks = list(htex.blocks_to_job_id.values())
states = [status.state.name for status in htex.provider.status(blocks)]  # Parsl's own poll, as it runs
report = {"results": results, "blocks": blocks, "states": states, "poll": htex.provider._cmd}
parsl.dfk().cleanup()  # scancel of the block
print(json.dumps(report))
'''


def test_parsl_runs_20_apps_on_horizon(someone: Person) -> None:
    venv = tool_venv(PARSL)
    with running(someone, "horizon up --port 0", at="work") as up:
        with_the_shims(someone, up.url, venv, "sacctmgr", "sshare")
        (someone.cwd / "squares.py").write_text(SCRIPT)
        began = time.monotonic()
        done = someone.run("python squares.py", timeout=400)
        took = time.monotonic() - began
        report = json.loads(done.out.strip().splitlines()[-1])

        # one block, one Slurm job: its number is what sbatch printed, and every app ran in it
        assert len(report["blocks"]) == 1 and report["blocks"][0].isdigit(), report
        number = report["blocks"][0]
        assert report["results"] == [{"x": i, "square": i * i, "job": number} for i in range(20)], report
        # Parsl polled with sacct (its `sacct -X` answered), and the poll found the block running
        assert report["poll"].startswith("sacct -X --noheader --format=jobid,state%20 --job"), report
        assert report["states"] == ["RUNNING"], report
        # its cleanup's scancel ended the block; Horizon's records say so
        someone.until(f"sacct -X -P -n -o JobID,State,JobName -j {number}",
                      lambda r: r.out.startswith(f"{number}|CANCELLED|parsl.horizon.block-0."), timeout=60)
        audit = someone.run("horizon audit")
        assert audit.out.strip().splitlines()[-1].startswith("OK: all "), audit
    print(f"Parsl's script took {took:.1f} s")
