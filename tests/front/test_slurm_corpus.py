"""Slurm scripts as people write them, run unchanged (issue 18).

The corpus (tests/data/slurm_corpus/) holds batch scripts in the shapes found in the wild: GPU
training, DDP launched with `scontrol show hostnames`, MPI with `srun`, arrays, checkpointing on
`--signal`, and every option form Slurm users type. Each says what it must produce in `# expect:`
comments; this test submits every one with `horizon sbatch` to a `horizon up` development cluster
with its default shape and no configuration (`--nodes 2`: two simulated 8-GPU a100 nodes whose
jobs run for real), waits for each to end SUCCEEDED, and checks its output:

* `# expect: step S tasks=N nodes=M [gpus=G] [distinct]` — srun's step S ran N tasks (one `TASK`
  line each: step, rank, local rank, node index, node name, ntasks, CUDA_VISIBLE_DEVICES) with
  ranks 0..N-1, on M distinct nodes, local ranks 0..k-1 on each node and node indexes 0..M-1,
  each task seeing G GPUs (`distinct`: no two tasks of a node share one);
* `# expect: hosts M` — `scontrol show hostnames` printed the job's M nodes (a `HOSTS` line);
* `# expect: gpus G` — the batch script saw G GPUs (a `GPUS` line);
* `# expect: array K` — an array of K tasks, each SUCCEEDED with its own output;
* `# expect: line TEXT` — a line of the output starts with TEXT;
* `# expect: warning WORD` — `horizon sbatch` warned (stderr) with WORD in the warning;
* `# expect: sacct S STATE CODE` — `horizon sacct` shows step `<id>.S` with that state and exit code.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.front.test_cli_up import free_port, interrupt

HORIZON = [sys.executable, "-m", "services.front.cli.main"]
CORPUS = Path(__file__).parents[1] / "data" / "slurm_corpus"
SCRIPTS = sorted(CORPUS.glob("*.sh"))
pytestmark = pytest.mark.timeout(600)


@dataclass
class Expect:
    steps: dict[int, dict[str, Any]] = field(default_factory=dict)
    hosts: int | None = None
    gpus: int | None = None
    array: int | None = None
    lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    sacct: list[tuple[str, str, str]] = field(default_factory=list)


def expectations(script: Path) -> Expect:
    out = Expect()
    for line in script.read_text().splitlines():
        if not line.startswith("# expect: "):
            continue
        what, _, rest = line[len("# expect: "):].partition(" ")
        if what == "step":
            number, *items = rest.split()
            step: dict[str, Any] = {"distinct": "distinct" in items}
            step.update((k, int(v)) for k, _, v in (i.partition("=") for i in items if "=" in i))
            out.steps[int(number)] = step
        elif what == "hosts":
            out.hosts = int(rest)
        elif what == "gpus":
            out.gpus = int(rest)
        elif what == "array":
            out.array = int(rest)
        elif what == "line":
            out.lines.append(rest)
        elif what == "warning":
            out.warnings.append(rest)
        elif what == "sacct":
            step_id, state, code = rest.split()
            out.sacct.append((step_id, state, code))
    return out


class DevUp:
    """`horizon up --nodes 2` (a development cluster, default shape), and the CLI against it."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.err = open(data_dir.parent / "up.err", "a")
        self.proc = subprocess.Popen([*HORIZON, "up", "--nodes", "2", "--port", str(self.port), "--data-dir",
                                      str(data_dir)], stdout=subprocess.PIPE, stderr=self.err, text=True)
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline().strip()
        assert first == self.url, (first, self.log())

    def log(self) -> str:
        return (self.data_dir.parent / "up.err").read_text()

    def cli(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HORIZON_", "SLURM_"))}
        env["HORIZON_NATS_URL"] = self.url
        return subprocess.run([*HORIZON, *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env)

    def rows(self) -> dict[str, dict[str, Any]]:
        done = self.cli("jobs", "--json")
        assert done.returncode == 0, done.stderr
        return {r["job_id"]: r for r in json.loads(done.stdout)}

    def stop(self) -> None:
        interrupt(self.proc)
        self.err.close()


@dataclass
class Run:
    script: Path
    work: Path
    submitted: subprocess.CompletedProcess[str]
    job_id: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("corpus")
    up = DevUp(base / "data")
    try:
        yield up, base
    finally:
        up.stop()


@pytest.fixture(scope="module")
def runs(cluster) -> dict[str, Run]:
    """Every script of the corpus submitted as it is, each from a folder of its own; then every
    job waited for until it ends."""
    up, base = cluster
    out: dict[str, Run] = {}
    for script in SCRIPTS:
        work = base / script.stem
        (work / "logs").mkdir(parents=True)
        shutil.copy(script, work / script.name)
        done = up.cli("sbatch", "--parsable", script.name, cwd=work)
        run = Run(script, work, done)
        if done.returncode == 0:
            run.job_id = done.stdout.strip().split(";")[0]
        out[script.name] = run
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline:
        rows = up.rows()
        pending = False
        for run in out.values():
            if not run.job_id:
                continue
            # by the number sbatch printed (an array's: its tasks are NUMBER_INDEX)
            run.rows = [r for r in rows.values() if r.get("slurm_id") == run.job_id
                        or str(r.get("slurm_id")).startswith(run.job_id + "_")]
            if not run.rows or any(r["state"] in ("PENDING", "HELD", "SCHEDULED", "RUNNING") for r in run.rows):
                pending = True
        if not pending:
            break
        time.sleep(1.0)
    return out


def _output(run: Run) -> str:
    return "".join(path.read_text(errors="replace") for path in sorted(run.work.rglob("*.out")))


@pytest.mark.parametrize("script", [s.name for s in SCRIPTS])
def test_a_slurm_script_runs_unchanged(cluster, runs, script):
    up, _ = cluster
    run = runs[script]
    want = expectations(run.script)
    assert run.submitted.returncode == 0, run.submitted.stderr
    assert re.fullmatch(r"[^;\s]+(;\S+)?", run.submitted.stdout.strip()), run.submitted.stdout
    for word in want.warnings:
        assert word in run.submitted.stderr.lower(), (word, run.submitted.stderr)
    states = {r["job_id"]: r["state"] for r in run.rows}
    output = _output(run)
    assert states and set(states.values()) == {"SUCCEEDED"}, (states, output[-2000:],
                                                             [r.get("reason") for r in run.rows])
    if want.array is not None:
        assert len(states) == want.array and all("_" in job_id for job_id in states), states
        assert len([ln for ln in output.splitlines() if ln.startswith("ARRAY ")]) == want.array
    lines = output.splitlines()
    for text in want.lines:
        assert any(line.startswith(text) for line in lines), (text, output[-2000:])
    if want.hosts is not None:
        [hosts] = [line.split()[1:] for line in lines if line.startswith("HOSTS")]
        assert len(hosts) == len(set(hosts)) == want.hosts, hosts
    if want.gpus is not None:
        assert f"GPUS {want.gpus}" in lines, output[-2000:]
    # each job's own output (an array: one file per task), its srun steps by step id
    steps: dict[tuple[Path, int], list[list[str]]] = defaultdict(list)
    for path in sorted(run.work.rglob("*.out")):
        for line in path.read_text(errors="replace").splitlines():
            parts = line.split()
            if parts[:1] == ["TASK"] and len(parts) == 8:
                steps[(path, int(parts[1]))].append(parts[2:])
    files = sorted({path for path, _ in steps})
    if want.steps:
        assert len(files) == (want.array or 1), (files, output[-2000:])
    for (path, number), rows in sorted(steps.items()):
        assert number in want.steps, (path.name, number, rows)
    for (path, number) in [(path, number) for path in files for number in want.steps]:
        step = want.steps[number]
        rows = steps[(path, number)]
        n = step["tasks"]
        assert sorted(int(r[0]) for r in rows) == list(range(n)), (number, rows)
        assert {int(r[4]) for r in rows} == {n}, rows  # SLURM_NTASKS of the step
        nodes = sorted({r[3] for r in rows})
        assert len(nodes) == step["nodes"], (number, nodes)
        assert sorted({int(r[2]) for r in rows}) == list(range(step["nodes"])), rows  # SLURM_NODEID
        for node in nodes:
            local = sorted(int(r[1]) for r in rows if r[3] == node)
            assert local == list(range(len(local))), (node, rows)
        if "gpus" in step:
            seen = [r[5].split(",") for r in rows]
            assert all(len(devices) == step["gpus"] for devices in seen), rows
            if step["distinct"]:
                for node in nodes:
                    devices = [d for r in rows if r[3] == node for d in r[5].split(",")]
                    assert len(devices) == len(set(devices)), (node, rows)
    if want.sacct:
        done = up.cli("sacct", "-j", run.job_id, "-P", "-n", "-o", "JobID,State,ExitCode")
        assert done.returncode == 0, done.stderr
        shown = {tuple(line.split("|")) for line in done.stdout.splitlines()}
        for step_id, state, code in want.sacct:
            assert (f"{run.job_id}.{step_id}", state, code) in shown, done.stdout
    assert len(SCRIPTS) >= 30


def test_sacct_shows_the_steps_with_their_exit_codes(cluster, runs):
    up, _ = cluster
    run = runs["22_steps_sequence.sh"]
    done = up.cli("sacct", "-j", run.job_id, "-P", "-n", "-o", "JobID,State,ExitCode")
    assert done.returncode == 0, done.stderr
    shown = [tuple(line.split("|")) for line in done.stdout.splitlines()]
    assert (run.job_id, "COMPLETED", "0:0") in shown, shown
    assert (f"{run.job_id}.batch", "COMPLETED", "0:0") in shown, shown
    for step in range(3):
        assert (f"{run.job_id}.{step}", "COMPLETED", "0:0") in shown, shown


def test_partitions_show_in_sinfo_and_squeue_and_an_unknown_one_runs_with_a_warning(cluster, tmp_path):
    up, _ = cluster
    sinfo = up.cli("sinfo")
    assert sinfo.returncode == 0, sinfo.stderr
    assert "PARTITION" in sinfo.stdout and "main*" in sinfo.stdout, sinfo.stdout
    script = tmp_path / "long.sh"
    script.write_text("#!/bin/bash\n#SBATCH -p nonexistent\n#SBATCH -t 5\n#SBATCH -o long-%j.out\nsleep 30\n")
    done = up.cli("sbatch", "--parsable", script.name, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "'nonexistent'" in done.stderr and "main" in done.stderr, done.stderr
    job_id = done.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 30
    queue = ""
    while time.monotonic() < deadline:
        queue = up.cli("squeue", "-h", "-o", "%i %P %T").stdout
        if job_id in queue:
            break
        time.sleep(0.5)
    assert f"{job_id} main " in queue, queue
    assert up.cli("scancel", job_id).returncode == 0
    # an operator makes an unknown partition a submit-time error, as Slurm does
    strict = up.cli("partition", "set", "--unknown", "reject", "--data-dir", str(up.data_dir))
    assert strict.returncode == 0, strict.stderr
    refused = up.cli("sbatch", "--parsable", script.name, cwd=tmp_path)
    assert refused.returncode != 0 and "'nonexistent'" in refused.stderr, refused.stderr
    assert up.cli("partition", "set", "--unknown", "default", "--data-dir", str(up.data_dir)).returncode == 0
