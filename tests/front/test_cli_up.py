"""The newcomer's path: `horizon up`, then `horizon submit` in another shell, `horizon jobs`, Ctrl-C."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import pytest

HORIZON = [sys.executable, "-m", "services.front.cli.main"]
pytestmark = pytest.mark.timeout(120)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def interrupt(proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
    """Stop a `horizon up` as Ctrl-C does (by its PID), killing it only if it does not stop within 60 s."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def horizon(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HORIZON, *args, "--nats", url] if args[0] != "submit" else
                          [*HORIZON, args[0], "--nats", url, *args[1:]],
                          capture_output=True, text=True, timeout=60)


def test_up_submit_jobs_and_ctrl_c(tmp_path):
    port = free_port()
    up = subprocess.Popen([*HORIZON, "up", "--port", str(port), "--data-dir", str(tmp_path / "h"), "--nodes", "2",
                           "--gpus-per-node", "4"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"nats://127.0.0.1:{port}"
    try:
        assert up.stdout.readline().strip() == url
        sub = horizon("submit", "--gpus", "2", "--json", "--", "sleep", "1", url=url)
        assert sub.returncode == 0, sub.stderr
        job_id = json.loads(sub.stdout)["job_id"]
        deadline = time.time() + 30
        row = None
        while time.time() < deadline:
            out = horizon("jobs", "--json", url=url)
            assert out.returncode == 0, out.stderr
            rows = {r["job_id"]: r for r in json.loads(out.stdout)}
            row = rows.get(job_id)
            if row and row["state"] == "SUCCEEDED":
                break
            time.sleep(0.3)
        assert row is not None and row["state"] == "SUCCEEDED", row
        assert row["node"].startswith("node-")
        assert len(row["allocation"][0]["device_ids"]) == 2
        rejected = horizon("submit", "--gpus", "1", "--gpu-type", "h100", "--", "true", url=url)
        assert rejected.returncode == 1 and "Traceback" not in rejected.stderr
        assert "resources.gpu_type: 'h100' is not a GPU model of this cluster" in rejected.stderr
        queue = horizon("queue", url=url)
        assert queue.returncode == 0 and "0 queued" in queue.stdout
    finally:
        up.send_signal(signal.SIGINT)
        code = up.wait(timeout=30)
    assert code == 0, up.stderr.read()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_client_commands_without_a_server_fail_in_one_line():
    out = subprocess.run([*HORIZON, "jobs", "--nats", f"nats://127.0.0.1:{free_port()}"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().startswith("Error: cannot reach NATS at")


def test_nodes_and_node_commands(tmp_path):
    port = free_port()
    up = subprocess.Popen([*HORIZON, "up", "--port", str(port), "--data-dir", str(tmp_path / "h"), "--nodes", "2",
                           "--gpus-per-node", "4", "--executor", "sim"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    url = f"nats://127.0.0.1:{port}"
    try:
        assert up.stdout.readline().strip() == url
        out = horizon("node", "cordon", "node-01", url=url)
        assert out.returncode == 0 and "node-01: cordoned" in out.stdout, out.stderr
        bad = horizon("node", "drain", "node-77", url=url)
        assert bad.returncode == 1 and "no node 'node-77'" in bad.stderr
        deadline = time.time() + 10
        while time.time() < deadline:
            rows = {n["node"]: n for n in json.loads(horizon("nodes", "--json", url=url).stdout)}
            if rows.get("node-01", {}).get("state") == "cordoned":
                break
            time.sleep(0.2)
        assert rows["node-00"]["state"] == "idle" and rows["node-00"]["gpus"] == 4
        assert rows["node-01"]["state"] == "cordoned"
        table = horizon("nodes", url=url)
        assert "node-00" in table.stdout and "0/4" in table.stdout
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(timeout=30)


def test_tables_show_data_literally():
    from rich.table import Table

    from services.front.cli.options import console

    table = Table()
    table.add_column("NODE[DEVICES]")
    table.add_row("node-00[gpu0,gpu1]")
    c = console()
    with c.capture() as cap:
        c.print(table)
    assert "node-00[gpu0,gpu1]" in cap.get()
