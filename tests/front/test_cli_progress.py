"""Progress bars on long commands: drawn on stderr when it is a terminal, absent otherwise."""

from __future__ import annotations

import asyncio
import os
import pty
import subprocess
import sys

from services.front.sim.simulation import run_simulation
from tests.front.test_simulate import LUBLIN, needs_trace


@needs_trace
def test_a_simulation_reports_its_progress_up_to_every_job():
    seen: list[tuple[int, int]] = []
    out, _ = asyncio.run(run_simulation(str(LUBLIN), start=1981, length=64, policy="fcfs", in_process=True,
                                        progress=lambda done, total: seen.append((done, total))))
    assert out["jobs"] == 64
    assert seen[-1] == (64, 64)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)  # it only moves forward


ARGS = [sys.executable, "-m", "services.front.cli.main", "simulate", str(LUBLIN), "--window", "1981:64", "--policy", "fcfs",
        "--in-process", "--json"]
ENV = {**os.environ, "COLUMNS": "100", "TERM": "xterm"}


@needs_trace
def test_the_bar_is_drawn_on_a_terminal_and_nowhere_else():
    piped = subprocess.run(ARGS, capture_output=True, timeout=120, env=ENV)
    assert piped.returncode == 0 and piped.stderr == b""  # a pipe (CI, scripts) gets no bar
    main, tty = pty.openpty()
    drawn = b""
    try:
        child = subprocess.Popen(ARGS, stdout=subprocess.PIPE, stderr=tty, env=ENV)
        os.close(tty)
        while True:  # read as it draws, so a full terminal buffer never blocks the child
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the child closed its end
                break
            if not chunk:
                break
            drawn += chunk
        stdout = child.stdout.read()
        assert child.wait(timeout=120) == 0
    finally:
        os.close(main)
    assert b"simulating" in drawn
    assert stdout.startswith(b"{") and b"simulating" not in stdout  # --json stays clean
