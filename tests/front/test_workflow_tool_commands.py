"""The Slurm command lines Parsl's ``SlurmProvider`` and Snakemake's ``snakemake-executor-plugin-slurm`` run,
as they run them, through Horizon's shims (issue 34, the workflow tools). Each line is copied from the
tool's source (parsl 2026.10.26 ``parsl/providers/slurm/slurm.py`` and ``template.py``;
snakemake-executor-plugin-slurm 2.8.0 ``submit_string.py``, ``job_status_query.py``, ``accounts.py``,
``partitions.py``, ``job_cancellation.py``) and run by ``sh -c`` or as a word list as the tool does, with
the shims first on PATH, against a ``horizon up`` of one node running real processes. The tools
themselves, from PyPI: tests/journeys/test_tool_parsl.py and test_tool_snakemake.py.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from services.runtime.command_shims import write_shims
from tests.front.test_cli_up import free_port

HORIZON = [sys.executable, "-m", "services.front.cli.main"]
pytestmark = pytest.mark.timeout(240)

# parsl/providers/slurm/template.py with what SlurmProvider.submit puts in (exclusive is its default)
PARSL_SCRIPT = """#!/bin/bash

#SBATCH --job-name={name}
#SBATCH --output={folder}/{name}.stdout
#SBATCH --error={folder}/{name}.stderr
#SBATCH --nodes=1
#SBATCH --time=10
#SBATCH --ntasks-per-node=1

#SBATCH --exclusive


export PARSL_CORES=1

export JOBNAME="{name}"

sleep 300
"""


class Shell:
    """A shell with Horizon's shims first on PATH and HORIZON_NATS_URL set, as the tools' users have it."""

    def __init__(self, url: str, folder: Path) -> None:
        shims = folder / "shims"
        write_shims(shims, guard=False)  # Horizon's even where a Slurm is installed (CI has one)
        self.env = {**os.environ, "HORIZON_NATS_URL": url, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}
        self.folder = folder

    def sh(self, line: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """``line`` as ``subprocess(..., shell=True)`` runs it (Parsl's execute_wait, the plugin's sbatch)."""
        return subprocess.run(line, shell=True, cwd=self.folder, env=self.env, input=stdin, capture_output=True,
                              text=True, timeout=60)

    def words(self, line: str) -> subprocess.CompletedProcess[str]:
        """``line`` split by ``shlex.split`` and run without a shell (the plugin's status and account lines)."""
        return subprocess.run(shlex.split(line), cwd=self.folder, env=self.env, capture_output=True, text=True,
                              timeout=60)

    def until(self, line: str, want: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while True:
            done = self.sh(line)
            if re.search(want, done.stdout):
                return done.stdout
            assert time.monotonic() < deadline, f"{line}: no {want!r} in {done.stdout!r} {done.stderr!r}"
            time.sleep(0.3)


def test_parsl_and_snakemake_command_lines(tmp_path):
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    up = subprocess.Popen([*HORIZON, "up", "--port", str(port), "--data-dir", str(tmp_path / "h"), "--nodes", "1",
                           "--cpus-per-node", "4", "--gpus-per-node", "0"], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
    assert up.stdout is not None and up.stdout.readline().strip() == url
    shell = Shell(url, tmp_path)
    try:
        # -- Parsl's SlurmProvider ----------------------------------------------------------------
        # 1. at start: `sacct -X` exiting 0 makes it poll with sacct (else squeue)
        assert shell.sh("sacct -X").returncode == 0
        # 2. submit: `sbatch <script>`, the number read with its regex_job_id
        name = "parsl.htex_local.block-0.1795911453.3642504"
        script = tmp_path / name
        script.write_text(PARSL_SCRIPT.format(name=name, folder=tmp_path))
        done = shell.sh(f"sbatch {script}")
        assert done.returncode == 0, done.stderr
        number = re.match(r"Submitted batch job (?P<id>\S*)", done.stdout).group("id")  # type: ignore[union-attr]
        assert number == "1", done.stdout
        # 3. its status polls, --job being getopt's prefix of --jobs; each line split on white space
        out = shell.until(f"sacct -X --noheader --format=jobid,state%20 --job '{number}'", "RUNNING")
        assert out.split() == [number, "RUNNING"], out
        out = shell.sh(f"squeue --noheader --format='%i %t' --job '{number}'").stdout
        assert out.split() == [number, "R"], out
        # 4. its cancel: `scancel <numbers>`
        assert shell.sh(f"scancel {number}").returncode == 0
        out = shell.until(f"sacct -X --noheader --format=jobid,state%20 --job '{number}'", "CANCELLED")
        assert out.split() == [number, "CANCELLED"], out

        # -- snakemake-executor-plugin-slurm ----------------------------------------------------------
        # 5. no account given: `sacct -nu "USER" -o Account%256 | tail -1`, split by shlex (so sacct gets
        #    '|', 'tail', '-1'): an error, as Slurm's getopt refuses -1; the plugin then goes without one
        user = os.environ.get("USER", "root")
        assert shell.words(f'sacct -nu "{user}" -o Account%256 | tail -1').returncode == 1
        # 6. no partition given: `sinfo -o %P`, the default one marked *
        assert "main*" in shell.words("sinfo -o %P").stdout.split()
        # 7. submit with --parsable, the rule's command by --wrap (the plugin's get_submit_command)
        run_uuid = str(uuid.uuid4())
        (tmp_path / "logs" / "rule_greet" / "a").mkdir(parents=True)
        call = (f"sbatch --parsable --job-name {run_uuid} --output {tmp_path}/logs/rule_greet/a/%j.log "
                "--export=ALL --comment rule_greet_wildcards_a   -p main -t 5 --mem 1000 --ntasks=1 "
                f'--cpus-per-task=1 -D {tmp_path} --wrap="echo hello \\"a\\" > greet-a.txt; echo logged"')
        done = shell.sh(call)
        assert done.returncode == 0 and re.fullmatch(r"\d+", done.stdout.strip()), (done.stdout, done.stderr)
        second = done.stdout.strip()
        assert second == "2"
        # 8. its status: sacct by the run's name over "all" clusters (one here), JobIdRaw|State
        starttime = f"{dt.datetime.now() - dt.timedelta(days=2):%Y-%m-%dT%H:00}"
        status = ("sacct -X --parsable2 --clusters all --noheader --format=JobIdRaw,State "
                  f"--starttime {starttime} --endtime now --name {run_uuid}")
        deadline = time.monotonic() + 60
        while (out := shell.words(status)).stdout.strip() != f"{second}|COMPLETED":
            assert out.returncode == 0 and time.monotonic() < deadline, (out.stdout, out.stderr)
            time.sleep(0.3)
        # ... or squeue's, when the plugin is told --status-command squeue
        out = shell.words(f"squeue --format='%i|%T' --states=all --noheader --name {run_uuid}")
        assert out.stdout.split() == [f"{second}|COMPLETED"], (out.stdout, out.stderr)
        assert (tmp_path / "greet-a.txt").read_text() == "hello a\n"  # the wrapped line's quotes, read by sh
        assert (tmp_path / "logs" / "rule_greet" / "a" / f"{second}.log").read_text() == "logged\n"
        # 9. a script on stdin (--slurm-pass-command-as-script), then its cancel
        done = shell.sh(f"sbatch --parsable --job-name {run_uuid} --export=ALL -t 5 --ntasks=1 /dev/stdin",
                        stdin="#!/bin/sh\nsleep 300\n")
        third = done.stdout.strip()
        assert done.returncode == 0 and third == "3", (done.stdout, done.stderr)
        assert shell.words(f"scancel {third}").returncode == 0
        shell.until(f"sacct -X -P -n -o State -j {third}", "CANCELLED")
        # another cluster's name is refused, saying Horizon's
        done = shell.words(f"sacct -X --clusters other --name {run_uuid}")
        assert done.returncode == 1 and "Horizon is one cluster, 'horizon'" in done.stderr, done.stderr
        audit = subprocess.run([*HORIZON, "audit"], env=shell.env, capture_output=True, text=True, timeout=120)
        assert audit.returncode == 0 and audit.stdout.splitlines()[-1].startswith("OK: all "), audit.stdout
    finally:
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=60) == 0
