"""Partitions through a real `horizon up --executor sim`: the stock partitions, `horizon sinfo`, a script
naming a partition the site does not define (run with a warning, then refused under the operator's
strict rule, naming it), squeue's %P, and a restart that keeps the operator's changes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from events import catalogue as c
from tests.e2e import events_of, read_log
from tests.front.test_cli_up import free_port

HORIZON = [sys.executable, "-m", "services.front.cli.main"]
pytestmark = pytest.mark.timeout(240)

SCRIPT = """#!/bin/bash
#SBATCH --job-name=train
#SBATCH -p nonexistent
#SBATCH --gres=gpu:1
#SBATCH --time=10
echo "partition $SLURM_JOB_PARTITION"
"""


def horizon(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HORIZON, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "HORIZON_NATS_URL": url})


def start(data: Path, port: int) -> subprocess.Popen[str]:
    up = subprocess.Popen([*HORIZON, "up", "--port", str(port), "--data-dir", str(data), "--nodes", "3",
                           "--gpus-per-node", "4", "--executor", "sim"], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
    assert up.stdout is not None and up.stdout.readline().strip() == f"nats://127.0.0.1:{port}"
    return up


def stop(up: subprocess.Popen[str]) -> None:
    up.send_signal(signal.SIGINT)
    assert up.wait(timeout=60) == 0


def partitions(url: str) -> dict[str, dict]:
    out = horizon(url, "partition", "list", "--json")
    assert out.returncode == 0, out.stderr
    return {row["name"]: row for row in json.loads(out.stdout)["partitions"]}


def wait_for(url: str, job_id: str, state: str) -> dict:
    deadline = time.time() + 60
    row: dict = {}
    while time.time() < deadline:
        out = horizon(url, "jobs", "--json")
        row = {r["job_id"]: r for r in json.loads(out.stdout)}.get(job_id, {})
        if row.get("state") == state:
            return row
        time.sleep(0.3)
    raise AssertionError(row)


def test_stock_partitions_unknown_names_sinfo_and_the_strict_rule(tmp_path):
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    script = tmp_path / "train.sh"
    script.write_text(SCRIPT)
    up = start(tmp_path / "h", port)
    try:
        # 1. a stock up has partitions of its own nodes: main (the default, every node) and gpu
        stock = partitions(url)
        assert set(stock) == {"main", "gpu"}
        assert stock["main"]["default"] and stock["main"]["nodes"] == ["ALL"]
        assert stock["gpu"]["nodes"] == ["node-[00-02]"] and stock["gpu"]["total_nodes"] == 3
        info = horizon(url, "sinfo")
        assert info.returncode == 0, info.stderr
        assert info.stdout.splitlines() == [
            "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST",
            "main*     up      infinite      3   idle node-[00-02]",
            "gpu       up      infinite      3   idle node-[00-02]"]

        # 2. a partition the site does not define: the job runs in the default one, with the warning
        sub = horizon(url, "sbatch", "--job-id", "loose", "--sim-runtime", "1", str(script))
        assert sub.returncode == 0 and re.fullmatch(r"Submitted batch job [0-9]+\n", sub.stdout), sub.stderr
        assert "horizon sbatch: warning: partition 'nonexistent' is not defined here; the job runs in 'main'" \
            in sub.stderr
        row = wait_for(url, "loose", "SUCCEEDED")
        assert row["partition"] == "main"
        fmt = horizon(url, "queue", "-t", "all", "--noheader", "--format", "%i %P %T")
        number = sub.stdout.split()[-1]  # squeue's JOBID is the job's number
        assert f"{number} main COMPLETED" in fmt.stdout.splitlines(), fmt.stdout
        sub = horizon(url, "sbatch", "--job-id", "on-gpu", "--sim-runtime", "1", "-p", "gpu,debug", str(script))
        assert sub.returncode == 0 and "the job runs in 'gpu'" in sub.stderr, sub.stderr
        assert wait_for(url, "on-gpu", "SUCCEEDED")["partition"] == "gpu"

        # 3. the operator's strict setting: the same script is refused at submit, naming the partition
        strict = horizon(url, "partition", "set", "--unknown", "reject")
        assert strict.returncode == 0, strict.stderr
        sub = horizon(url, "sbatch", "--job-id", "strict", "--sim-runtime", "1", str(script))
        assert sub.returncode == 1
        assert "job strict rejected: partitions: invalid partition specified: 'nonexistent'" in sub.stderr
        check = horizon(url, "sbatch", "--check", "--sim-runtime", "1", str(script))
        assert check.returncode == 1 and "invalid partition specified: 'nonexistent'" in check.stderr

        # 4. an operator's change to a stock partition
        changed = horizon(url, "partition", "set", "gpu", "--max-time", "60", "--priority-tier", "1")
        assert changed.returncode == 0, changed.stderr
    finally:
        stop(up)
    # 5. a restart publishes nothing over it, and nothing again
    up = start(tmp_path / "h", port)
    try:
        after = partitions(url)
        assert after["gpu"]["max_time_s"] == 3600.0 and after["gpu"]["priority_tier"] == 1
        configured = [e for e in events_of(asyncio.run(read_log(url))) if isinstance(e, c.PartitionConfigured)]
        assert [(e.name, e.user) for e in configured] == [("main", "horizon up"), ("gpu", "horizon up"),
                                                          ("gpu", configured[-1].user)]
        assert configured[-1].user != "horizon up"
    finally:
        stop(up)
