"""What the workflow tools that drive Slurm do, line by line, that Horizon's Slurm face must take as Slurm
does (issue 34, item 4; the tools themselves run in tests/journeys/test_tool_submitit.py and
test_tool_dask_jobqueue.py). Each test uses the tool's own lines:

* dask-jobqueue writes its batch script to a temporary file, runs ``sbatch FILE`` and deletes the
  file at once: the job runs sbatch's copy (as Slurm runs its spool copy, ``slurm_script``);
* dask-jobqueue's ``#SBATCH -o dask-logs/dask-worker-%J.out``: ``%J`` of a batch script is the job's
  number alone (Slurm 22.05: ``dask-worker-1.out``; a step's is ``1.0``);
* submitit's ``#SBATCH --output=logs/%j/%j_0_log.out``: the folder ``logs/<number>`` is made by
  submitit once sbatch has printed the number, a moment after this agent may start the job; Slurm
  starts a job half a second and more after sbatch returns, so the agent waits for the folder;
* submitit's ``srun --output logs/%A_%a/%A_%a_%t_log.out`` in an array task: srun's ``%A`` and ``%a``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from events import catalogue as c
from services.domain.output import Names, expand
from services.front.slurm.sbatch import MAX_SCRIPT_BYTES, SbatchDefaults, parse_sbatch
from services.front.slurm.sbatch_options import SbatchError
from services.front.slurm.srun import SrunError, _expand, _open_files
from services.front.slurm.srun_options import parse_srun
from services.nodes.backends.process import attempt_supervisor
from tests.front.test_sbatch import _run_on_a_node

# dask-jobqueue 0.9.0's job script for SLURMCluster(cores=1, processes=1, memory="512MB",
# walltime="00:10:00", log_directory="dask-logs"), its worker's command line shortened to an echo
DASK_WORKER = """#!/usr/bin/env bash

#SBATCH -J dask-worker
#SBATCH -e dask-logs/dask-worker-%J.err
#SBATCH -o dask-logs/dask-worker-%J.out
#SBATCH -n 1
#SBATCH --cpus-per-task=1
#SBATCH --mem=489M
#SBATCH -t 00:10:00

echo "worker of job $SLURM_JOB_ID, from $0"
"""

# submitit 1.5.4's batch script for AutoExecutor(folder="logs/%j") with timeout_min=5, cpus_per_task=1,
# slurm_mem="200M" (its srun line as submitit writes it, the command a shell stand-in)
SUBMITIT = """#!/bin/bash

# Parameters
#SBATCH --cpus-per-task=1
#SBATCH --error={folder}/logs/%j/%j_0_log.err
#SBATCH --job-name=submitit
#SBATCH --mem=200M
#SBATCH --nodes=1
#SBATCH --open-mode=append
#SBATCH --output={folder}/logs/%j/%j_0_log.out
#SBATCH --signal=USR2@90
#SBATCH --time=5
#SBATCH --wckey=submitit

# command
export SUBMITIT_EXECUTOR=slurm
echo "job $SLURM_JOB_ID ran"
"""


async def test_the_job_runs_the_script_sbatch_read_though_the_file_is_gone(tmp_path):
    """dask-jobqueue: ``sbatch /tmp/tmpXXXX.sh``, then the file deleted; another script edited after
    sbatch: each job runs what sbatch read, from descriptor 9 (nothing left behind in $TMPDIR)."""
    (tmp_path / "dask-logs").mkdir()
    script = tmp_path / "tmpk3j9x0qz.sh"
    script.write_text(DASK_WORKER)
    fields, _ = parse_sbatch(script.read_text(), defaults=SbatchDefaults(
        user="ann", workdir=str(tmp_path), script_path=str(script)))
    script.unlink()  # dask-jobqueue's `with tmpfile(extension="sh")` ends as sbatch returns
    assert fields["command"][-1] == DASK_WORKER  # the copy goes with the job
    outcome = await _run_on_a_node(tmp_path, {**fields, "env": {**fields["env"], "TMPDIR": str(tmp_path)}}, "w1")
    assert outcome.exit_code == 0, outcome
    assert (tmp_path / "dask-logs" / "dask-worker-w1.out").read_text() == "worker of job w1, from /dev/fd/9\n"
    assert not list(tmp_path.glob("slurm_script.*"))  # the private copy was removed at once

    edited = tmp_path / "edited.sh"
    edited.write_text("#!/bin/sh\n#SBATCH -o edited.out\necho as submitted\n")
    fields, _ = parse_sbatch(edited.read_text(), defaults=SbatchDefaults(
        user="ann", workdir=str(tmp_path), script_path=str(edited), script_args=("a b",)))
    edited.write_text("#!/bin/sh\necho edited after sbatch\n")
    assert (await _run_on_a_node(tmp_path, fields, "e1")).exit_code == 0
    assert (tmp_path / "edited.out").read_text() == "as submitted\n"


def test_a_script_that_cannot_go_with_its_job_is_refused():
    defaults = SbatchDefaults(user="ann", workdir="/w", script_path="/w/job.sh")
    with pytest.raises(SbatchError, match="the batch script contains a NUL character"):
        parse_sbatch("#!/bin/sh\necho a\0b\n", defaults=defaults)
    big = "#!/bin/sh\n" + "# " + "x" * MAX_SCRIPT_BYTES + "\n"
    with pytest.raises(SbatchError, match=f"the batch script is {len(big):,} bytes; Horizon takes scripts of at most"):
        parse_sbatch(big, defaults=defaults)
    fields, _ = parse_sbatch("#!/bin/sh\n" + "#" * (MAX_SCRIPT_BYTES - 20) + "\n", defaults=defaults)
    assert sum(len(part) for part in fields["command"]) <= 128 * 1024  # submission's bound on a command


def test_percent_capital_j_of_a_batch_script_is_the_job_number():
    """dask-jobqueue's ``-o dask-logs/dask-worker-%J.out``: Slurm 22.05 writes ``dask-worker-1.out``
    for job 1 (``%s`` is ``batch``); srun's ``%J`` is ``1.0``."""
    names = Names(job_id="4213", name="dask-worker", user="ann", node="n-01")
    assert expand("dask-logs/dask-worker-%J.out", names) == "dask-logs/dask-worker-4213.out"
    assert expand("%j-%J-%s.out", names) == "4213-4213-batch.out"
    assert _expand("s-%J-%t.out", job="4213", step=0, rank=0, node_index=0, node="n-01", user="ann",
                   name="x") == "s-4213.0-0.out"


async def test_the_output_folder_submitit_makes_after_sbatch_is_waited_for(tmp_path):
    """submitit's ``--output=logs/%j/%j_0_log.out``: the job is started before ``logs/<number>`` exists;
    the agent waits for it (a folder that never comes fails the job, as in Slurm, after the wait)."""
    from services.nodes.backends.process.executors import ProcessExecutor
    from services.submission.normalise import admit

    executor = ProcessExecutor(tmp_path / "state")
    alloc = c.NodeAllocation(node="n-01", cpus_milli=1000, memory_bytes=1 << 30)

    async def start(job_id: str):
        fields, _ = parse_sbatch(SUBMITIT.format(folder=tmp_path), defaults=SbatchDefaults(
            user="ann", workdir=str(tmp_path), script_path=str(tmp_path / "submission.sh")))
        spec = dict(admit(c.JobSubmitted(job_id=job_id, tenant="acme", **fields), subject_tenant="acme",
                          gpu_models=set()))[job_id]
        return await executor.start(job_id, 1, spec, alloc)

    began = time.monotonic()
    never = asyncio.create_task(start("never"))
    made = asyncio.create_task(start("made"))
    await asyncio.sleep(1.0)  # sbatch has returned; submitit moves its files into logs/<number>
    (tmp_path / "logs" / "made").mkdir(parents=True)
    outcome = await (await made).wait()
    assert outcome.exit_code == 0, outcome
    assert (tmp_path / "logs" / "made" / "made_0_log.out").read_text() == "job made ran\n"
    with pytest.raises(RuntimeError, match=f"cannot open output file {tmp_path}/logs/never/never_0_log.out"):
        await never
    assert time.monotonic() - began >= attempt_supervisor.OUTPUT_FOLDER_WAIT_S


def test_srun_names_an_array_tasks_files_as_submitit_asks(tmp_path):
    """submitit's step line in a task of ``--array=0-3%4``: ``srun --unbuffered --output
    logs/%A_%a/%A_%a_%t_log.out --error logs/%A_%a/%A_%a_%t_log.err python -u -m submitit.core._submit``;
    a file that cannot be opened is named in srun's error."""
    environ = {"SLURM_JOB_ID": "4215", "SLURM_ARRAY_JOB_ID": "4213", "SLURM_ARRAY_TASK_ID": "2",
               "SLURM_JOB_USER": "ann", "SLURM_JOB_NAME": "submitit"}
    (tmp_path / "logs" / "4213_2").mkdir(parents=True)
    args = parse_srun(["--unbuffered", "--output", f"{tmp_path}/logs/%A_%a/%A_%a_%t_log.out", "--error",
                       f"{tmp_path}/logs/%A_%a/%A_%a_%t_log.err", "python", "-u", "-m", "submitit.core._submit",
                       f"{tmp_path}/logs/%j"], environ)
    started = {"nodes": ["n-01"], "ranks": [[0, 1]], "step": 0}
    files = _open_files(args, started, environ)
    names = sorted({Path(f.name).name for f in files.values()})
    assert names == ["4213_2_0_log.err", "4213_2_0_log.out", "4213_2_1_log.err", "4213_2_1_log.out"]
    for f in files.values():
        f.close()
    assert _expand("%A-%a-%j", job="4213", step=0, rank=0, node_index=0, node="n", user="u", name="x") == "4213--4213"
    missing = parse_srun(["--output", f"{tmp_path}/nowhere/%j.out", "true"], environ)
    with pytest.raises(SrunError, match=f"cannot open output file {tmp_path}/nowhere/4215.out: No such file"):
        _open_files(missing, started, environ)
