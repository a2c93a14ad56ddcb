"""`horizon up --processes`: every part its own OS process, a SIGKILLed one restarted, all stopped by PID."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.front.test_cli_up import HORIZON, free_port, horizon

pytestmark = pytest.mark.timeout(150)

PARTS = {"submission", "scheduling", "placement", "preemption", "inventory", "projections", "agent"}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def pids(data_dir: Path) -> dict[str, int]:
    return json.loads((data_dir / "processes.json").read_text())


def run_job(url: str) -> str:
    sub = horizon("submit", "--gpus", "2", "--sim-runtime", "0.5", "--json", "--", "train", url=url)
    assert sub.returncode == 0, sub.stderr
    job_id = json.loads(sub.stdout)["job_id"]
    deadline = time.time() + 40
    state = None
    while time.time() < deadline:
        out = horizon("jobs", "--json", url=url)
        if out.returncode == 0:  # the projections may still be starting
            state = {r["job_id"]: r["state"] for r in json.loads(out.stdout)}.get(job_id)
            if state == "SUCCEEDED":
                return job_id
        time.sleep(0.3)
    raise AssertionError(f"{job_id} is {state}, not SUCCEEDED")


def every_part_in_one_scrape(up_err: Path) -> None:
    """`up`'s /metrics merges every child's (the restarted scheduling's from its new port): one
    family per name, each part's series in it."""
    import re
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    found = re.search(r"Metrics \(Prometheus\): (http://127\.0\.0\.1:\d+/metrics)", up_err.read_text())
    assert found, up_err.read_text()
    deadline, parts, families = time.time() + 20, set(), {}
    while time.time() < deadline:
        with urllib.request.urlopen(found.group(1), timeout=10) as reply:
            families = {f.name: f for f in text_string_to_metric_families(reply.read().decode())}
        parts = {s.labels["part"] for s in families["horizon_consumer_lag"].samples}
        if parts == PARTS:
            break
        time.sleep(0.3)
    assert parts == PARTS
    # the rounds that published, each child's (preemption had nothing to decide: no round of its is timed)
    decided = {s.labels["part"] for s in families["horizon_decide_duration_milliseconds"].samples}
    assert {"submission", "scheduling", "placement", "inventory"} <= decided
    assert {s.labels["state"] for s in families["horizon_gpus_state"].samples} >= {"free", "busy"}


def test_processes_restart_a_killed_service_and_all_stop_by_pid(tmp_path):
    port = free_port()
    data_dir = tmp_path / "h"
    with open(tmp_path / "up.err", "wb") as err:
        up = subprocess.Popen([*HORIZON, "up", "--processes", "--executor", "sim", "--port", str(port),
                               "--data-dir", str(data_dir), "--nodes", "2", "--gpus-per-node", "4", "--ui-port", "0"],
                              stdout=subprocess.PIPE, stderr=err, text=True)
    url = f"nats://127.0.0.1:{port}"
    seen: set[int] = set()
    try:
        assert up.stdout.readline().strip() == url  # printed once every child said READY=1
        first = pids(data_dir)
        assert set(first) == PARTS and all(alive(p) for p in first.values())
        assert up.pid not in first.values() and len(set(first.values())) == len(PARTS)
        seen.update(first.values())
        run_job(url)

        os.kill(first["scheduling"], signal.SIGKILL)
        deadline = time.time() + 20
        while time.time() < deadline:
            now = pids(data_dir)
            if now.get("scheduling", first["scheduling"]) != first["scheduling"]:
                break
            time.sleep(0.1)
        assert now["scheduling"] != first["scheduling"] and alive(now["scheduling"])
        assert {k: v for k, v in now.items() if k != "scheduling"} == \
               {k: v for k, v in first.items() if k != "scheduling"}  # the others were left alone
        seen.update(now.values())
        run_job(url)
        every_part_in_one_scrape(tmp_path / "up.err")
    finally:
        up.send_signal(signal.SIGTERM)
        code = up.wait(timeout=60)
    log = (tmp_path / "up.err").read_text()
    assert code == 0, log
    assert f"scheduling (pid {first['scheduling']}) exited with signal SIGKILL" in log
    deadline = time.time() + 5
    while any(alive(p) for p in seen) and time.time() < deadline:
        time.sleep(0.1)
    assert not [p for p in seen if alive(p)], "a child outlived `horizon up --processes`"
    assert not (data_dir / "processes.json").exists()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
