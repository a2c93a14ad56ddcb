"""Regenerate the dashboard's screenshots in docs/img/ (dashboard-*.png) from a real stack.

    .venv/bin/python docs/img/make_screenshots.py [--keep DIR]

Starts ``horizon up --auth`` with a development cluster of 4 nodes x 8 GPUs (process executor, a
data dir of its own under a temporary directory), adds three tenants (acme, globex, initech),
configures an account tree with quotas as the operator, and runs the tenants' work for about a
minute, each through its own URL: training jobs that hold GPUs, a two-node gang and jobs over
their account's quota waiting, short jobs arriving and finishing (the charts), one node cordoned.
Then Debian's headless chromium (selenium) logs in with the operator's token, opens each view at
1400x900 and saves it, and last logs in as the tenant acme for its own view of the cluster.
Everything it starts is stopped by its PID, also on failure. Needs chromium, chromium-driver and
selenium (the dev extra).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent
HORIZON = [sys.executable, "-m", "services.front.cli.main"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(url: str | None, *args: str, data_dir: Path | None = None) -> str:
    """A horizon command as a tenant (``url``: its own URL) or as the operator (``data_dir``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HORIZON_NATS_URL", "HORIZON_TENANT"))}
    if url is not None:
        env["HORIZON_NATS_URL"] = url
    where = ["--data-dir", str(data_dir)] if data_dir is not None else []
    done = subprocess.run([*HORIZON, *args, *where], cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    if done.returncode != 0:
        raise SystemExit(f"horizon {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def submit(urls: dict[str, str], tenant: str, job_id: str, *args: str, command: str = "sleep 600") -> None:
    run(urls[tenant], "submit", "--job-id", job_id, *args, "--", "sh", "-c", command)


def workload(urls: dict[str, str], data_dir: Path) -> None:
    """Three tenants' work on 4 nodes x 8 GPUs."""
    def operator(*args: str) -> str:
        return run(None, *args, data_dir=data_dir)

    operator("account", "set", "research", "--shares", "3")
    operator("account", "set", "acme", "--parent", "research", "--shares", "2", "--quota-gpus", "16", "--tenant", "acme")
    operator("account", "set", "initech", "--parent", "research", "--shares", "1", "--quota-gpus", "8",
             "--tenant", "initech")
    operator("account", "set", "globex", "--shares", "1", "--quota-gpus", "24", "--tenant", "globex")
    train = "for i in $(seq 1 600); do echo \"step $i loss $(awk -v i=$i 'BEGIN{printf \"%.4f\", 2.5/(1+i/40)}')\"; sleep 1; done"
    submit(urls, "acme", "llama-ft", "--gpus", "8", "--name", "llama-finetune", command=train)
    submit(urls, "acme", "eval-7", "--gpus", "2", "--name", "eval", "--priority-class", "high")
    submit(urls, "globex", "vision-pre", "--gpus", "4", "--name", "vit-pretrain")
    submit(urls, "initech", "rl-sweep", "--gpus", "1", "--array", "0-3", "--name", "rl-sweep")
    submit(urls, "initech", "notebook", "--gpus", "1", "--priority-class", "low", "--name", "notebook")
    operator("node", "cordon", "node-03", "--reason", "firmware update")
    # waiting: a two-node gang, jobs over their account's quota, short jobs behind them
    submit(urls, "globex", "big-gang", "--gpus", "8", "--nodes", "2", "--name", "dist-train")
    submit(urls, "initech", "ppo-large", "--gpus", "8", "--name", "ppo-large")
    submit(urls, "acme", "lr-sweep", "--gpus", "8", "--array", "0-1", "--name", "lr-sweep")
    submit(urls, "globex", "distill", "--gpus", "4", "--name", "distill", "--priority-class", "low")
    # short jobs arriving and finishing: decisions, queue length and waits over time
    for i in range(40):
        tenant = ("acme", "globex", "initech")[i % 3]
        submit(urls, tenant, f"short-{i}", "--gpus", "1", "--name", "short", "--time", "1m", command=f"sleep {1 + i % 4}")
        time.sleep(1.0)


def shoot(base: str, token: str, acme_password: str) -> None:
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
        driver.get(f"{base}/login?token={token}")  # the operator
        time.sleep(1)
        for view, name in (("cluster", "cluster"), ("queue", "queue"), ("fairshare", "fairshare"),
                           ("charts", "charts"), ("job/acme:llama-ft", "job")):
            if view.startswith("job"):  # the story, its attempts and its output: a taller page
                driver.set_window_size(1400, 1280)
            driver.get(f"{base}/#{view}")
            time.sleep(4 if view.startswith("job") else 2.5)
            driver.save_screenshot(str(OUT / f"dashboard-{name}.png"))
            print(f"docs/img/dashboard-{name}.png")
        driver.set_window_size(1400, 1000)  # what if: fair share weighed 20 times less, on the whole log
        driver.get(f"{base}/#whatif")
        time.sleep(1)
        driver.execute_script("document.querySelector('#whatif-set').value = 'policy.weight.fairshare=500';"
                              "document.querySelector('#whatif-from').value = '1';"
                              "document.querySelector('#whatif-form').requestSubmit();")
        deadline = time.monotonic() + 300
        while not driver.execute_script("return document.querySelector('#whatif-table')"):
            if time.monotonic() > deadline:
                raise RuntimeError("the what-if page showed no result in 300 s")
            time.sleep(0.5)
        time.sleep(0.5)
        driver.save_screenshot(str(OUT / "dashboard-whatif.png"))
        print("docs/img/dashboard-whatif.png")
        driver.set_window_size(1400, 900)
        driver.delete_all_cookies()  # the tenant acme: its own jobs, the others' GPUs without names
        driver.get(f"{base}/")
        time.sleep(1)
        driver.execute_script("const f = document.querySelector('#tenant-form'); f.tenant.value = 'acme';"
                              "f.password.value = arguments[0]; f.requestSubmit();", acme_password)
        time.sleep(3)
        driver.save_screenshot(str(OUT / "dashboard-tenant.png"))
        print("docs/img/dashboard-tenant.png")
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
    data_dir = where / "h"
    up = subprocess.Popen([*HORIZON, "up", "--auth", "--data-dir", str(data_dir), "--port", str(port),
                           "--ui-port", str(ui), "--nodes", "4", "--gpus-per-node", "8"], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        url = up.stdout.readline().strip()
        if not url:
            raise SystemExit(f"horizon up did not start: {(where / 'up.err').read_text()}")
        deadline = time.time() + 30
        while "Dashboard:" not in (where / "up.err").read_text() and time.time() < deadline:
            time.sleep(0.2)
        base = re.search(r"Dashboard: (http://\S+?)/?\s", (where / "up.err").read_text()).group(1)
        urls = {name: json.loads(run(None, "tenant", "add", name, "--json", data_dir=data_dir))["nats_url"]
                for name in ("acme", "globex", "initech")}
        workload(urls, data_dir)
        token = (data_dir / "auth" / "dashboard-token").read_text().strip()
        shoot(base, token, urllib.parse.unquote(urllib.parse.urlsplit(urls["acme"]).password or ""))
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
