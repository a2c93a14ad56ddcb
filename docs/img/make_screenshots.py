"""Regenerate the dashboard's screenshots in docs/img/ (dashboard-*.png) from a real stack.

    .venv/bin/python docs/img/make_screenshots.py [--keep DIR]

Starts ``horizon up`` with a development cluster of 4 nodes x 8 GPUs (process executor, a data
dir of its own under a temporary directory), configures an account tree with quotas, and runs the
work of three tenants for about a minute: training jobs that hold GPUs, a two-node gang waiting
with a reservation, short jobs arriving and finishing (the charts), one node cordoned. Then Debian's
headless chromium (selenium) opens each view at 1400x900 and saves it. Everything it starts is
stopped by its PID, also on failure. Needs chromium, chromium-driver and selenium (the dev extra).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent
HORIZON = [sys.executable, "-m", "services.cli.main"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(url: str, *args: str) -> str:
    done = subprocess.run([*HORIZON, *args], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "HORIZON_NATS_URL": url})
    if done.returncode != 0:
        raise SystemExit(f"horizon {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def submit(url: str, tenant: str, job_id: str, *args: str, command: str = "sleep 600") -> None:
    run(url, "submit", "--tenant", tenant, "--job-id", job_id, "--account", tenant, *args, "--", "sh", "-c", command)


def workload(url: str) -> None:
    """Three tenants' work on 4 nodes x 8 GPUs."""
    run(url, "account", "set", "research", "--shares", "3")
    run(url, "account", "set", "acme", "--parent", "research", "--shares", "2", "--quota-gpus", "16")
    run(url, "account", "set", "initech", "--parent", "research", "--shares", "1", "--quota-gpus", "8")
    run(url, "account", "set", "globex", "--shares", "1", "--quota-gpus", "24")
    train = "for i in $(seq 1 600); do echo \"step $i loss $(awk -v i=$i 'BEGIN{printf \"%.4f\", 2.5/(1+i/40)}')\"; sleep 1; done"
    submit(url, "acme", "llama-ft", "--gpus", "8", "--name", "llama-finetune", command=train)
    submit(url, "acme", "eval-7", "--gpus", "2", "--name", "eval", "--priority-class", "high")
    submit(url, "globex", "vision-pre", "--gpus", "4", "--name", "vit-pretrain")
    submit(url, "initech", "rl-sweep", "--gpus", "1", "--array", "0-3", "--name", "rl-sweep")
    submit(url, "initech", "notebook", "--gpus", "1", "--priority-class", "low", "--name", "notebook")
    run(url, "node", "cordon", "node-03", "--reason", "firmware update")
    # waiting: a two-node gang (a reservation), a job over its account's quota, an array behind them
    submit(url, "globex", "big-gang", "--gpus", "8", "--nodes", "2", "--name", "dist-train")
    submit(url, "initech", "ppo-large", "--gpus", "8", "--name", "ppo-large")
    submit(url, "acme", "lr-sweep", "--gpus", "8", "--array", "0-1", "--name", "lr-sweep")
    submit(url, "globex", "distill", "--gpus", "4", "--name", "distill", "--priority-class", "low")
    # short jobs arriving and finishing: decisions, queue length and waits over time
    for i in range(40):
        tenant = ("acme", "globex", "initech")[i % 3]
        submit(url, tenant, f"short-{i}", "--gpus", "1", "--name", "short", "--time", "1m", command=f"sleep {1 + i % 4}")
        time.sleep(1.0)


def shoot(base: str) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,900",
                "--hide-scrollbars"):
        options.add_argument(arg)
    service = Service("/usr/bin/chromedriver")
    driver = webdriver.Chrome(options=options, service=service)
    try:
        for view, name in (("cluster", "cluster"), ("queue", "queue"), ("fairshare", "fairshare"),
                           ("charts", "charts"), ("job/llama-ft", "job")):
            driver.get(f"{base}/#{view}")
            time.sleep(4 if view.startswith("job") else 2.5)
            driver.save_screenshot(str(OUT / f"dashboard-{name}.png"))
            print(f"docs/img/dashboard-{name}.png")
    finally:
        pid = service.process.pid if service.process else None
        driver.quit()
        if pid is not None and service.process.poll() is None:
            service.process.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, default=None, help="Use this data dir (kept) instead of a temporary one.")
    args = parser.parse_args()
    where = args.keep or Path(tempfile.mkdtemp(prefix="horizon-shots-"))
    port, ui = free_port(), free_port()
    err = open(where / "up.err", "w+")
    up = subprocess.Popen([*HORIZON, "up", "--data-dir", str(where / "h"), "--port", str(port), "--ui-port", str(ui),
                           "--nodes", "4", "--gpus-per-node", "8"], cwd=ROOT, stdout=subprocess.PIPE, stderr=err,
                          text=True)
    try:
        url = up.stdout.readline().strip()
        if not url:
            raise SystemExit(f"horizon up did not start: {(where / 'up.err').read_text()}")
        deadline = time.time() + 30
        while "Dashboard:" not in (where / "up.err").read_text() and time.time() < deadline:
            time.sleep(0.2)
        base = re.search(r"Dashboard: (http://\S+?)/?\s", (where / "up.err").read_text()).group(1)
        workload(url)
        shoot(base)
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()
        err.close()


if __name__ == "__main__":
    main()
