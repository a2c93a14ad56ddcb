"""`horizon up` uses the machine it runs on, says what it runs, and holds its data directory alone.

Real processes and a real nats-server (``--port 0``: the URL is the first line ``up`` prints):

* without shape options the one node is this machine (its CPUs and memory, not simulated);
* with them, a development cluster whose GPUs ``up`` calls simulated;
* a second ``up`` on a held data directory exits non-zero within 10 s naming the holder's pid and
  touches nothing, while the first keeps working.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.nodes.backends.process.discovery import node_name
from services.nodes.spec import local_nodes
from services.front.host.launch import Shape, try_hint
from services.front.host.launch_processes import process_specs
from services.front.host.lock import DataDirBusy, DataDirLock
from tests.front.test_cli_up import HORIZON, horizon

pytestmark = pytest.mark.timeout(120)


def start_up(data_dir: Path, *args: str) -> tuple[subprocess.Popen[str], str, str]:
    """``horizon up --port 0`` on ``data_dir``: the process, its NATS URL and what it said on stderr."""
    up = subprocess.Popen([*HORIZON, "up", "--port", "0", "--data-dir", str(data_dir), *args],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = up.stdout.readline().strip()
    assert url.startswith("nats://"), up.stderr.read() if up.poll() is not None else url
    said = []
    while not said or "Ctrl-C stops everything" not in said[-1]:
        line = up.stderr.readline()
        assert line, "".join(said)
        said.append(line)
    return up, url, "".join(said)


def stop(up: subprocess.Popen[str]) -> int:
    if up.poll() is None:
        up.send_signal(signal.SIGINT)
    return up.wait(timeout=30)


def run_to_end(url: str, *command: str, gpus: int = 0) -> dict:
    sub = horizon("submit", *(["--gpus", str(gpus)] if gpus else []), "--json", "--", *command, url=url)
    assert sub.returncode == 0, sub.stderr
    job_id = json.loads(sub.stdout)["job_id"]
    deadline = time.time() + 40
    row: dict = {}
    while time.time() < deadline:
        out = horizon("jobs", "--json", url=url)
        if out.returncode == 0:
            row = {r["job_id"]: r for r in json.loads(out.stdout)}.get(job_id) or {}
            if row.get("state") in ("SUCCEEDED", "FAILED", "CANCELLED", "OUT_OF_MEMORY"):
                return row
        time.sleep(0.3)
    raise AssertionError(f"{job_id}: {row}")


def nodes_json(url: str) -> list[dict]:
    deadline = time.time() + 20
    while time.time() < deadline:
        out = horizon("nodes", "--json", url=url)
        if out.returncode == 0 and (rows := json.loads(out.stdout)):
            return rows
        time.sleep(0.2)
    raise AssertionError("no node registered")


def _memtotal() -> int:
    line = next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal:"))
    return int(line.split()[1]) * 1024


def test_up_without_shape_options_registers_this_machine(tmp_path):
    up, url, said = start_up(tmp_path / "h")
    try:
        rows = nodes_json(url)
        assert len(rows) == 1
        me = rows[0]
        assert me["node"] == node_name()
        assert me["cpus_milli"] == len(os.sched_getaffinity(0)) * 1000
        assert me["memory_bytes"] == _memtotal()
        assert me["simulated"] is False and me["unhealthy"] == {}
        assert f"Horizon is up: node {node_name()}: {len(os.sched_getaffinity(0))} CPU" in said
        if me["gpus"] == 0:
            # the hint as typed in another shell: up took a free port, so it carries --nats
            assert "no GPU found (" in said and f"horizon submit --nats {url} -- hostname" in said
            assert "nvidia-smi" not in said
            row = run_to_end(url, "hostname")  # the hint works here
            assert row["state"] == "SUCCEEDED" and row["node"] == node_name()
        else:
            assert f"horizon submit --nats {url} --gpus 1 -- nvidia-smi" in said
        table = horizon("nodes", url=url)
        assert table.returncode == 0 and "machine" in table.stdout
    finally:
        assert stop(up) == 0


def test_a_second_up_on_a_held_data_dir_exits_at_once_and_the_first_keeps_working(tmp_path):
    data_dir = tmp_path / "h"
    first, url, said = start_up(data_dir, "--nodes", "2", "--gpus-per-node", "2")
    try:
        assert "Horizon is up: 2 simulated nodes x 2 a100 GPUs (simulated: not real devices)" in said
        assert "nvidia-smi" not in said
        before = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in data_dir.iterdir() if p.is_file()}
        started = time.monotonic()
        second = subprocess.run([*HORIZON, "up", "--port", "0", "--data-dir", str(data_dir)],
                                capture_output=True, text=True, timeout=30)
        took = time.monotonic() - started
        assert second.returncode != 0 and took < 10, (second.returncode, took)
        assert f"pid {first.pid}" in second.stderr and "in use by horizon up" in second.stderr, second.stderr
        assert "Traceback" not in second.stderr and second.stdout == ""
        after = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in data_dir.iterdir() if p.is_file()}
        assert after == before  # not even horizon.log was opened
        # the first is unharmed: it takes a job and runs it
        row = run_to_end(url, "sh", "-c", "echo ok", gpus=1)
        assert row["state"] == "SUCCEEDED", row
    finally:
        assert stop(first) == 0
    # its lock went with it: the data dir can be used again
    again, url, _ = start_up(data_dir, "--nodes", "1", "--executor", "sim")
    try:
        assert {n["node"] for n in nodes_json(url)} >= {"node-00"}  # up and serving on the same log
    finally:
        assert stop(again) == 0


# ------------------------------------------------------------------------------------ the pieces, alone


def test_shape_options_make_a_dev_cluster_and_their_absence_the_machine(tmp_path):
    machine = Shape(None, None, None, None, None)
    assert not machine.dev and machine.args() == []
    dev = Shape(None, 2, None, None, None)  # one shape option: the others take the dev defaults
    assert dev.dev and dev.args() == ["--nodes", "4", "--gpus-per-node", "2", "--gpu-type", "a100",
                                      "--cpus-per-node", "64", "--memory-per-node", "512Gi"]
    assert dev.describe_dev() == "4 simulated nodes x 2 a100 GPUs (simulated: not real devices)"
    assert all(n.simulated for n in dev.dev_nodes())
    # --processes passes the shape to the agent, and nothing when it is the machine
    agent = [s for s in process_specs("nats://x", tmp_path, [], machine.args()) if s.name == "agent"][0]
    assert "--nodes" not in agent.argv and "--gpus-per-node" not in agent.argv
    agent = [s for s in process_specs("nats://x", tmp_path, [], dev.args()) if s.name == "agent"][0]
    assert agent.argv[agent.argv.index("--gpus-per-node") + 1] == "2"
    # the first job up suggests works where it runs
    assert try_hint(local_nodes(1, gpus_per_node=0)) == "horizon submit -- hostname"
    assert "nvidia-smi" not in try_hint(local_nodes(1, gpus_per_node=2))


def test_the_data_dir_lock_names_its_holder_and_dies_with_it(tmp_path):
    with DataDirLock(tmp_path, command="horizon up") as held:
        assert (tmp_path / "lock").exists() and held.held
        record = json.loads((tmp_path / "lock").read_text())
        assert record["pid"] == os.getpid() and record["command"] == "horizon up" and record["host"]
        with pytest.raises(DataDirBusy) as busy:
            DataDirLock(tmp_path).acquire()  # another open of the file: flock says no
        assert f"pid {os.getpid()}" in str(busy.value) and "stop it or use another --data-dir" in str(busy.value)
        with DataDirLock(tmp_path, "agent") as agent:  # a lock by name is another file
            assert agent.path == tmp_path / "agent.lock"
    DataDirLock(tmp_path).acquire().release()  # free again
    # a holder killed with SIGKILL leaves the file, not the lock
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from services.front.host.lock import DataDirLock; "
        f"DataDirLock(Path({str(tmp_path)!r}), 'agent', command='horizon service agent').acquire(); "
        "print('held', flush=True); time.sleep(60)")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(DataDirBusy, match=f"horizon service agent, pid {holder.pid}"):
            DataDirLock(tmp_path, "agent").acquire()
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert json.loads((tmp_path / "agent.lock").read_text())["pid"] == holder.pid  # stale record, no lock
    DataDirLock(tmp_path, "agent").acquire().release()


def test_horizon_nodes_shows_kind_isolation_loudly_and_unhealthy_gpus():
    from services.front.cli.nodes import nodes_table
    from services.front.cli.options import console

    base = {"state": "idle", "cpus_milli": 2000, "cpus_used_milli": 0, "memory_bytes": 2**30,
            "memory_used_bytes": 0, "gpus_used": 0, "gpu_types": ["a100-80gb"], "jobs": [], "taints": []}
    rows = [{**base, "node": "g1", "gpus": 8, "simulated": False, "isolation": "cgroup v1 (memory cpu cpuset)",
             "unhealthy": {"gpu3": "XID 79: fell off the bus"}},
            {**base, "node": "node-00", "gpus": 2, "simulated": True,
             "isolation": "none: no writable cgroup (memory, cpu)", "unhealthy": {}}]
    table, notes = nodes_table(rows)
    out = console()
    with out.capture() as cap:
        out.print(table)
        for note in notes:
            out.print(note)
    text = cap.get()
    g1 = next(line for line in text.splitlines() if line.strip().startswith("g1"))
    assert "machine" in g1 and "0/8 (1 unhealthy)" in g1 and "cgroup v1 (memory cpu cpuset)" in g1
    dev = next(line for line in text.splitlines() if line.strip().startswith("node-00"))
    assert "simulated" in dev and "NONE: no writable cgroup (memory, cpu)" in dev
    assert "g1 gpu3 unhealthy: XID 79: fell off the bus" in text
    assert "node-00: jobs are NOT isolated (none: no writable cgroup (memory, cpu))" in text


def test_a_second_agent_on_a_data_dir_says_who_holds_it(tmp_path, nats_server):
    with DataDirLock(tmp_path / "d", "agent", command="horizon service agent"):
        out = subprocess.run([*HORIZON, "service", "agent", "--nats", nats_server.url, "--data-dir",
                              str(tmp_path / "d")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert f"is in use by horizon service agent, pid {os.getpid()}" in out.stderr
