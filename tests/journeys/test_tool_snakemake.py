"""Snakemake drives `horizon up` through its Slurm executor plugin, unchanged (issue 34, the workflow tools
as acceptance).

A person with no Slurm of their own starts ``horizon up``, puts Horizon's Slurm commands on PATH
(``horizon slurm-shims``, docs/slurm.md) and ``HORIZON_NATS_URL`` in their shell, activates a venv with
Snakemake 9 and ``snakemake-executor-plugin-slurm`` 2 from PyPI (``tests/journeys/tool_venv.py``) and runs
a workflow of three rules (two samples: five Slurm jobs) with ``snakemake --executor slurm --jobs 2``.

What the plugin does with Slurm (snakemake_executor_plugin_slurm 2.8.0): no account given, it guesses
with ``sacct -nu USER -o Account%256 | tail -1`` split into words (an error, as Slurm's: it goes without);
no partition given, ``sinfo -o %P`` and the one marked ``*``; each rule's job is ``sbatch --parsable
--job-name <run uuid> --output .../%j.log --export=ALL --comment rule_... -p main -t 5 --mem 1000
--ntasks=1 --cpus-per-task=1 -D <workdir> --wrap="python -m snakemake ... --executor slurm-jobstep"``,
which inside the job runs the rule through ``srun -n1 --cpu-bind=q --cpus-per-task=1 --nodes=1``
(snakemake from the venv: the job has the submitting shell's PATH); it polls ``sacct -X --parsable2
--clusters all --noheader --format=JobIdRaw,State --starttime ... --endtime now --name <run uuid>``
and asks ``scontrol show config`` for MaxArraySize and MinJobAge (Horizon's scontrol does not answer
it; the plugin then takes its defaults). ``--slurm-init-seconds-before-status-checks 1``: the plugin's
first poll waits 40 s by default. Then ``horizon audit`` passes over the log. The command lines alone:
tests/front/test_workflow_tool_commands.py.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.journeys.conftest import running
from tests.journeys.person import Person
from tests.journeys.tool_venv import tool_venv, with_the_shims

pytestmark = pytest.mark.timeout(600)

SNAKEMAKE = ("snakemake==9.27.1", "snakemake-executor-plugin-slurm==2.8.0")

SNAKEFILE = '''\
SAMPLES = ["a", "b"]

rule all:
    input: "summary.txt"

rule greet:
    output: "greet/{s}.txt"
    shell: "echo hello {wildcards.s} $SLURM_JOB_ID > {output}"

rule count:
    input: "greet/{s}.txt"
    output: "count/{s}.txt"
    shell: "(cat {input}; echo $SLURM_JOB_ID) | wc -w > {output}"

rule summarise:
    input: expand("count/{s}.txt", s=SAMPLES)
    output: "summary.txt"
    shell: "cat {input} > {output}"
'''


def test_snakemake_runs_a_workflow_on_horizon(someone: Person) -> None:
    venv = tool_venv(*SNAKEMAKE)
    with running(someone, "horizon up --port 0", at="work") as up:
        with_the_shims(someone, up.url, venv, "sacctmgr", "sshare")
        flow = someone.folder("flow")
        (flow / "Snakefile").write_text(SNAKEFILE)
        began = time.monotonic()
        done = someone.run("snakemake --executor slurm --jobs 2 --default-resources runtime=5 mem_mb=1000 "
                           "--slurm-init-seconds-before-status-checks 1", cwd=flow, timeout=400)
        took = time.monotonic() - began
        log = done.out + done.err
        assert "5 of 6 steps (83%) done" in log and "6 of 6 steps (100%) done" in log, log

        # each greet ran in a Slurm job of its own, its number the one the plugin read from sbatch
        submitted = dict(re.findall(r"Job (\d+) has been submitted with SLURM jobid (\d+)", log))
        assert len(submitted) == 5 and len(set(submitted.values())) == 5, log
        greets = {s: (flow / "greet" / f"{s}.txt").read_text().split() for s in ("a", "b")}
        for sample, words in greets.items():
            assert words[:2] == ["hello", sample] and words[2] in submitted.values(), greets
        assert greets["a"][2] != greets["b"][2], greets
        assert (flow / "summary.txt").read_text().split() == ["4", "4"]
        # Horizon's records: five jobs named for the run, all completed
        run_id = re.search(r"SLURM run ID: (\S+)", log).group(1)  # type: ignore[union-attr]
        rows = someone.run(f"sacct -X -P -n -o JobID,State --name {run_id}").out.split()
        assert sorted(rows) == sorted(f"{n}|COMPLETED" for n in submitted.values()), rows
        audit = someone.run("horizon audit")
        assert audit.out.strip().splitlines()[-1].startswith("OK: all "), audit
    print(f"snakemake took {took:.1f} s")
