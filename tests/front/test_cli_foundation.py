"""The CLI's foundation commands, run as a user would (a subprocess)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import socket

import pytest

HORIZON = [sys.executable, "-m", "services.front.cli.main"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HORIZON, *args], capture_output=True, text=True, timeout=60)


def test_schema_prints_every_event():
    out = run("schema")
    assert out.returncode == 0
    assert "JobSubmitted" in json.loads(out.stdout)["$defs"]


def test_schema_of_an_unknown_event_is_one_line_not_a_traceback():
    out = run("schema", "--event", "JobTeleported")
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    assert "unknown event type 'JobTeleported'" in out.stderr


def test_horizon_nats_runs_in_the_foreground_and_stops_on_sigterm(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([*HORIZON, "nats", "--data-dir", str(tmp_path), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()
        assert line == f"nats://127.0.0.1:{port}"
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        except OSError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("nats-server still listening after horizon nats stopped")


def test_your_user_is_your_uid_s_name_when_the_shell_does_not_say(monkeypatch):
    """sbatch's job ids and squeue --me name you as Slurm does: a shell without $USER (cron, CI) is
    still you, not "anonymous"."""
    import os
    import pwd

    from services.front.client.client import default_user

    monkeypatch.delenv("USER", raising=False)
    monkeypatch.delenv("LOGNAME", raising=False)
    assert default_user() == pwd.getpwuid(os.getuid()).pw_name
    monkeypatch.setenv("LOGNAME", "ann")
    assert default_user() == "ann"
    monkeypatch.setenv("USER", "bob")
    assert default_user() == "bob"
