"""Real nodes through `horizon up`, as a user meets them: limits, where jobs run and write, `horizon
logs`, `show`'s stderr tail, and jobs that outlive their agent (kill -9, and Ctrl-C of `up`).

Real processes, a real nats-server (the one `up` bundles), real cgroups (v1 on these machines).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.nodes.backends.process.cgroups import probe
from tests.helpers import job_file
from tests.front.test_cli_up import free_port

HORIZON = [sys.executable, "-m", "services.front.cli.main"]
pytestmark = pytest.mark.timeout(180)
needs_cgroups = pytest.mark.skipif(not probe().usable, reason=f"no writable cgroups: {probe().describe()}")



class Up:
    """`horizon up` on a free port and a data dir of its own; the CLI against it."""

    def __init__(self, data_dir: Path, *extra: str) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.extra = extra
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.err = open(self.data_dir.parent / f"up-{self.port}.err", "a")
        self.proc = subprocess.Popen([*HORIZON, "up", "--port", str(self.port), "--data-dir", str(self.data_dir),
                                      *self.extra], stdout=subprocess.PIPE, stderr=self.err, text=True)
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == self.url, self.log()

    def log(self) -> str:
        return (self.data_dir.parent / f"up-{self.port}.err").read_text()

    def stop(self, sig: int = signal.SIGINT) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=60)
        self.err.close()
        return code

    def cli(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*HORIZON, *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                              env={**os.environ, "HORIZON_NATS_URL": self.url})

    def submit(self, *args: str, cwd: Path | None = None) -> str:
        done = self.cli("submit", "--json", *args, cwd=cwd)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["job_id"]  # type: ignore[no-any-return]

    def rows(self) -> dict[str, dict]:
        """Each job's row by its id and by its number (what sbatch printed)."""
        done = self.cli("jobs", "--json")
        rows = json.loads(done.stdout) if done.returncode == 0 else []
        return {**{r["slurm_id"]: r for r in rows if r.get("slurm_id")}, **{r["job_id"]: r for r in rows}}

    def wait_state(self, job_id: str, states: tuple[str, ...], timeout: float = 60) -> dict:
        deadline = time.time() + timeout
        row: dict = {}
        while time.time() < deadline:
            row = self.rows().get(job_id, {})
            if row.get("state") in states:
                return row
            time.sleep(0.3)
        raise AssertionError(f"{job_id} is {row.get('state')}, not {states}; up said:\n{self.log()[-3000:]}")


def endings(up: Up, job_id: str) -> list[str]:
    shown = up.cli("show", "--json", job_id)
    assert shown.returncode == 0, shown.stderr
    events = json.loads(shown.stdout)["job"]["events"]
    return [e["type"] for e in events if e["type"] in ("JobSucceeded", "JobFailed", "JobCancelled", "JobPreempted")]


@needs_cgroups
def test_limits_working_directory_output_logs_and_show(tmp_path):
    up = Up(tmp_path / "h", "--nodes", "2", "--gpus-per-node", "2")
    work = tmp_path / "project"
    work.mkdir()
    up.start()
    try:
        hog = up.submit("--mem", "64M", "--", sys.executable, "-c", "x = bytearray(200 * 1024 * 1024); print('alive')")
        pinned = up.submit("--cpus", "1", "--", "grep", "Cpus_allowed_list", "/proc/self/status")
        here = up.submit("--", "pwd", cwd=work)
        bad = up.submit("--", sys.executable, "-c", "raise ValueError('bad lr')")
        named = up.submit("--output", "out-%j.txt", "--", "echo", "hello", cwd=work)
        up.submit("--job-id", "sweep", "--array", "0-1", "--", "sh", "-c", "echo task $SLURM_ARRAY_TASK_ID")

        row = up.wait_state(hog, ("OUT_OF_MEMORY", "FAILED", "SUCCEEDED"))
        assert row["state"] == "OUT_OF_MEMORY", row
        assert "out of memory" in row["reason"] and "64 MiB" in row["reason"]
        assert up.wait_state(pinned, ("SUCCEEDED",))
        cores = up.cli("logs", pinned).stdout.split()[-1]
        assert re.fullmatch(r"\d+", cores), f"the cpuset of a --cpus 1 job is one core, not {cores!r}"

        assert up.wait_state(here, ("SUCCEEDED",))
        assert up.cli("logs", here).stdout == f"{work}\n"  # it ran where it was submitted from
        assert up.wait_state(bad, ("FAILED",))
        shown = up.cli("show", bad).stdout
        assert "ValueError: bad lr" in shown and str(job_file(up.data_dir / "jobs", bad, 1, "stderr")) in shown
        assert up.cli("logs", "--err", bad).stdout.endswith("ValueError: bad lr\n")
        number = up.wait_state(named, ("SUCCEEDED",))["number"]
        assert (work / f"out-{number}.txt").read_text() == "hello\n"  # %j: the job's number (issue 34)
        assert up.cli("logs", named).stdout == "hello\n"  # wherever --output put it
        assert up.wait_state("sweep_1", ("SUCCEEDED",))
        assert up.cli("logs", "sweep_1").stdout == "task 1\n"
        missing = up.cli("logs", "no-such-job")
        assert missing.returncode == 1 and "no job or array 'no-such-job'" in missing.stderr and "Traceback" not in missing.stderr
    finally:
        assert up.stop() == 0


def _running(up: Up, job_id: str) -> int:
    """The job's process id, once it runs."""
    up.wait_state(job_id, ("RUNNING",))
    pid_file = up.data_dir / "jobs" / job_id / "1" / "job.pid"
    deadline = time.time() + 10
    while not pid_file.exists() and time.time() < deadline:
        time.sleep(0.1)
    return int(pid_file.read_text().split()[0])


def test_a_job_outlives_kill_9_of_its_agent(tmp_path):
    """The job runs until the test says so, which it does only once a new agent runs: the job
    outlives its agent's death, and the new agent reports its end (events, not a long sleep)."""
    up = Up(tmp_path / "h", "--processes", "--nodes", "1", "--gpus-per-node", "2")
    go = tmp_path / "go"
    up.start()
    try:
        job = up.submit("--", "sh", "-c", f"while [ ! -e {go} ]; do sleep 0.1; done; echo survived")
        pid = _running(up, job)
        agent = json.loads((up.data_dir / "processes.json").read_text())["agent"]
        os.kill(agent, signal.SIGKILL)
        deadline = time.time() + 60
        while json.loads((up.data_dir / "processes.json").read_text()).get("agent") in (agent, None):
            assert time.time() < deadline, "the agent was not restarted"
            time.sleep(0.1)
        os.kill(pid, 0)  # the job ran on without its agent
        go.touch()
        row = up.wait_state(job, ("SUCCEEDED", "FAILED"), timeout=60)
        assert row["state"] == "SUCCEEDED", row
        assert up.cli("logs", job).stdout == "survived\n"
        assert endings(up, job) == ["JobSucceeded"]
        check = up.cli("check")
        assert check.returncode == 0 and check.stdout.strip().endswith("ok"), check.stdout + check.stderr
    finally:
        go.touch()
        assert up.stop(signal.SIGTERM) == 0


from tests.nodes.test_containers import image  # noqa: E402,F401 - the busybox image, built once per session


@needs_cgroups
def test_a_container_job_has_its_limits_and_its_output_in_horizon_logs(tmp_path, image):
    up = Up(tmp_path / "h", "--nodes", "1", "--gpus-per-node", "2")
    work = tmp_path / "project"
    work.mkdir()
    up.start()
    try:
        boxed = up.submit("--image", image, "--cpus", "1", "--", "sh", "-c",
                          "echo hello from $(pwd) task $HORIZON_JOB_ID; grep Cpus_allowed_list /proc/self/status",
                          cwd=work)
        hog = up.submit("--image", image, "--mem", "64M", "--", "sh", "-c",
                        "head -c 200m /dev/zero | tail > /dev/null; echo survived", cwd=work)
        assert up.wait_state(boxed, ("SUCCEEDED",))
        lines = up.cli("logs", boxed).stdout.splitlines()
        assert lines[0] == f"hello from {work} task {boxed}"
        assert re.fullmatch(r"Cpus_allowed_list:\s+\d+", lines[1]), lines
        row = up.wait_state(hog, ("OUT_OF_MEMORY", "FAILED", "SUCCEEDED"))
        assert row["state"] == "OUT_OF_MEMORY", row
        assert sorted(p.name for p in work.iterdir()) == [], "Podman left files in the job's directory"
        missing = up.submit("--image", "localhost/no-such-image:1", "--", "true")
        row = up.wait_state(missing, ("FAILED",))
        assert "no-such-image" in row["reason"], row
    finally:
        assert up.stop() == 0


async def test_a_gpu_the_driver_reports_broken_is_re_registered_unhealthy(js_log, tmp_path):
    """The agent's health watch, with a driver injected at the NVML boundary: an XID 79 on one GPU
    re-registers the node with that device's health set (placement then skips it)."""
    import asyncio

    from events import catalogue as c
    from services.nodes.agent.app import NodeAgent
    from services.nodes.backends.process.discovery import discover_gpus
    from services.nodes.backends.process.executors import SimExecutor
    from services.nodes.spec import NodeSpec
    from services.nodes.backends.process.nvml import NvmlBackend
    from tests.e2e import events_of
    from tests.nodes.test_discovery import FakeNvml, dgx

    fake = FakeNvml(dgx(4), p2p=[{0, 1, 2, 3}])
    gpus, note = discover_gpus(NvmlBackend(fake))
    assert note == "" and all(g.uuid for g in gpus)
    node = NodeSpec("gpu-box", 32_000, 256 << 30, tuple(gpus))
    agent = NodeAgent(js_log, [node], SimExecutor(), gpu_backend=NvmlBackend(fake), health_interval_s=0.05)
    await agent.start()

    async def registrations() -> list[c.NodeRegistered]:
        records = []
        async for batch in js_log.read(1, until_seq=await js_log.last_seq()):
            records.extend(batch)
        return [e for e in events_of(records) if isinstance(e, c.NodeRegistered)]

    try:
        fake.events.append((2, 79))
        found: list[c.NodeRegistered] = []

        async def reregistered() -> bool:
            found[:] = await registrations()
            return len(found) == 2

        deadline = asyncio.get_running_loop().time() + 10
        while not await reregistered():
            assert asyncio.get_running_loop().time() < deadline, found
            await asyncio.sleep(0.05)
        first, second = found
        assert [g.health for g in first.gpus] == ["", "", "", ""]
        assert [g.health for g in second.gpus] == ["", "", "XID 79: fell off the bus", ""]
        assert not first.simulated and first.isolation == "simulated: jobs run no process"
    finally:
        await agent.stop()
