"""deploy/ as shipped: the systemd units' and the Kubernetes manifests' own command lines run Horizon.

Nothing here re-types a command: each test reads the files in deploy/, expands them the way
systemd or Kubernetes would (the env file, ``%i``, ``${VAR}`` and ``$VAR``; the ConfigMap and
``$(VAR)``), and runs the result as processes on loopback. Only what cannot exist on a test
machine is replaced: the install path (``/opt/horizon/.venv/bin``) by this venv, the data
directories by temporary ones, the NATS URL by a private server's, and, for Kubernetes, the
3-replica JetStream cluster by one server (replicas 1; the cluster itself is tested in
tests/domain/test_cluster.py). Readiness is systemd's own protocol (``Type=notify``: ``READY=1`` on
``$NOTIFY_SOCKET``), then a real job goes through every part.
"""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from services.runtime.natsserver import find_nats_server
from services.front.host.supervisor import ChildSpec, Supervisor
from tests.front.test_cli_up import HORIZON, free_port, horizon

pytestmark = pytest.mark.timeout(150)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SERVICES = ("submission", "scheduling", "placement", "preemption", "inventory")
VENV_BIN = Path(sys.executable).parent


# ---------------------------------------------------------------------- reading deploy/


def env_file(path: Path) -> dict[str, str]:
    """systemd's EnvironmentFile=: KEY=VALUE lines, comments and blanks skipped."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip().strip('"')
    return out


def exec_start(unit: Path, env: dict[str, str], instance: str = "", host: str = "node") -> list[str]:
    """A unit's ExecStart= expanded as systemd does: ``${VAR}`` is one word, a word that is
    ``$VAR`` becomes the variable's whitespace-separated words, ``%i`` the instance, ``%l`` the
    short host name."""
    line = next(line for line in unit.read_text().splitlines() if line.startswith("ExecStart="))
    argv: list[str] = []
    for word in shlex.split(line.removeprefix("ExecStart=")):
        word = word.replace("%i", instance).replace("%l", host)
        if re.fullmatch(r"\$[A-Za-z_][A-Za-z0-9_]*", word):
            argv += env[word[1:]].split()
        else:
            argv.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env[m.group(1)], word))
    return argv


def config_map(path: Path) -> dict[str, str]:
    """The ``data:`` of a ConfigMap (flat string values, as deploy/k8s/config.yaml has)."""
    out, inside = {}, False
    for line in path.read_text().splitlines():
        if line.startswith("data:"):
            inside = True
        elif inside and line.startswith("  ") and not line.strip().startswith("#") and ":" in line:
            key, _, value = line.strip().partition(":")
            out[key] = json.loads(value.strip())
        elif inside and line and not line.startswith(" "):
            inside = False
    return out


def container_args(path: Path) -> dict[str, list[str]]:
    """Each Deployment's container ``args: [...]`` (flow style, JSON-compatible) by container name."""
    text = path.read_text()
    out = {}
    for match in re.finditer(r"- name: (\S+)\n\s+image: \S+\n\s+args: (\[.*?\])", text, re.S):
        out[match.group(1)] = json.loads(match.group(2))
    return out


def agent_script(path: Path) -> str:
    """The agent DaemonSet's ``sh -c`` script (a folded ``>-`` scalar)."""
    text = path.read_text()
    block = re.search(r'command: \["/bin/sh", "-c"\]\n\s+args:\n\s+- >-\n((?:\s{14}.*\n)+)', text)
    assert block, "the agent's command in deploy/k8s/agent.yaml"
    return " ".join(line.strip() for line in block.group(1).splitlines())


def kube_expand(argv: list[str], env: dict[str, str]) -> list[str]:
    """Kubernetes' ``$(VAR)`` in args (``$$`` is a literal ``$``)."""
    def one(word: str) -> str:
        word = re.sub(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), word)
        return word.replace("$$", "$")
    return [one(w) for w in argv]


# ---------------------------------------------------------------------- running it


def nats_from(conf: Path, tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    """nats-server with the shipped configuration, moved onto loopback, free ports and a temporary store."""
    port, http = free_port(), free_port()
    text = conf.read_text()
    text = re.sub(r"(?m)^listen: .*$", f"listen: 127.0.0.1:{port}", text)
    text = re.sub(r"(?m)^http: \S+", f"http: 127.0.0.1:{http}", text)
    text = re.sub(r'store_dir: "[^"]*"', f'store_dir: "{tmp / "js"}"', text)
    assert f"127.0.0.1:{port}" in text and str(tmp / "js") in text, "the shipped conf changed shape"
    path = tmp / "nats.conf"
    path.write_text(text)
    server = subprocess.Popen([str(find_nats_server()), "-c", str(path)], stdout=subprocess.DEVNULL,
                              stderr=open(tmp / "nats.log", "wb"))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return server, f"nats://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise AssertionError("nats-server did not start with " + str(path))


def run_a_job(url: str) -> None:
    sub = horizon("submit", "--json", "--", "sh", "-c", "echo deployed", url=url)
    assert sub.returncode == 0, sub.stderr
    job_id = json.loads(sub.stdout)["job_id"]
    deadline, state = time.monotonic() + 60, None
    while time.monotonic() < deadline:
        out = horizon("jobs", "--json", url=url)
        if out.returncode == 0:
            state = {r["job_id"]: r["state"] for r in json.loads(out.stdout)}.get(job_id)
            if state == "SUCCEEDED":
                return
        time.sleep(0.3)
    raise AssertionError(f"{job_id} is {state}, not SUCCEEDED")


def every_part_serves_metrics(names: list[str], logs: Path) -> None:
    """Each part printed its /metrics URL (the manifests' metrics options reached it) and answers
    there in Prometheus's text format."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    for name in names:
        found = re.search(r"metrics \(Prometheus\) on (http://\S+/metrics)", (logs / f"{name}.log").read_text())
        assert found, f"{name} serves no /metrics"
        url = found.group(1).replace("http://0.0.0.0:", "http://127.0.0.1:")
        with urllib.request.urlopen(url, timeout=5) as reply:
            families = {f.name for f in text_string_to_metric_families(reply.read().decode())}
        assert "horizon_consumer_lag" in families, (name, families)


def run_parts(specs: list[ChildSpec], url: str, tmp: Path, server: subprocess.Popen[bytes],
              then: Callable[[], None] = lambda: None) -> None:
    parts = Supervisor(specs, tmp / "logs", env=None, min_delay_s=0.5)
    try:
        parts.start()
        waiting = parts.wait_ready(90)
        assert waiting == [], f"not ready: {waiting}; logs in {tmp / 'logs'}: " + " | ".join(
            (tmp / "logs" / f"{w}.log").read_text()[-400:] for w in waiting)
        run_a_job(url)
        every_part_serves_metrics([s.name for s in specs], tmp / "logs")
        then()
        assert parts.restarts() == {s.name: 0 for s in specs}  # nothing crashed on the way
    finally:
        parts.stop(timeout_s=20)
        server.terminate()
        server.wait(timeout=20)


def test_the_systemd_units_run_horizon(tmp_path):
    env = env_file(DEPLOY / "systemd" / "horizon.env")
    server, url = nats_from(DEPLOY / "systemd" / "nats-single.conf", tmp_path)
    env.update(HORIZON_NATS_URL=url, HORIZON_DATA_DIR=str(tmp_path / "data"))
    # each part's own port (9471..9477) on every interface; here free ports, as other tests run beside
    assert env["HORIZON_METRICS_ARGS"] == "--metrics --metrics-host 0.0.0.0"
    env["HORIZON_METRICS_ARGS"] = "--metrics-port 0 --metrics-host 127.0.0.1"
    nats_unit = exec_start(DEPLOY / "systemd" / "nats-server.service", env)
    assert nats_unit[1:] == ["-c", env["HORIZON_NATS_CONF"]]  # the unit runs the conf we just ran
    local = {"/opt/horizon/.venv/bin/horizon": str(VENV_BIN / "horizon")}
    specs = [ChildSpec(name, [local.get(w, w) for w in exec_start(DEPLOY / "systemd" / "horizon@.service", env,
                                                                  instance=name)]) for name in SERVICES]
    specs.append(ChildSpec("projections", [local.get(w, w) for w in exec_start(
        DEPLOY / "systemd" / "horizon-projections.service", env)]))
    specs.append(ChildSpec("agent", [local.get(w, w) for w in exec_start(
        DEPLOY / "systemd" / "horizon-agent.service", env, host="gpu-host")]))
    assert all(s.argv[0] == str(VENV_BIN / "horizon") for s in specs)
    assert "--policy" in specs[1].argv and "--executor" in specs[-1].argv  # the env file's options reached them
    run_parts(specs, url, tmp_path, server)


def test_the_kubernetes_manifests_run_horizon(tmp_path):
    config = config_map(DEPLOY / "k8s" / "config.yaml")
    assert config["HORIZON_STREAM_REPLICAS"] == "3"
    server, url = nats_from(DEPLOY / "systemd" / "nats-single.conf", tmp_path)
    assert config["HORIZON_METRICS_PORT"] == "9470"  # the pods' metrics port and their annotations'
    for manifest in ("services.yaml", "projections.yaml", "agent.yaml"):
        text = (DEPLOY / "k8s" / manifest).read_text()
        assert text.count('prometheus.io/port: "9470"') == text.count("containerPort: 9470") == text.count("image:")
    config.update(HORIZON_NATS_URL=url, HORIZON_STREAM_REPLICAS="1", HORIZON_METRICS_PORT="0",
                  HORIZON_METRICS_HOST="127.0.0.1")
    args = {**container_args(DEPLOY / "k8s" / "services.yaml"), **container_args(DEPLOY / "k8s" / "projections.yaml")}
    assert set(args) == {*SERVICES, "projections"}, set(args)
    specs = []
    for name, argv in args.items():
        argv = [str(tmp_path / f"data-{name}") if w == "/data" else w for w in kube_expand(argv, config)]
        assert not any("$(" in w for w in argv), argv  # every variable is in the ConfigMap
        specs.append(ChildSpec(name, [*HORIZON, *argv]))  # the image's ENTRYPOINT is `horizon`
    script = kube_expand([agent_script(DEPLOY / "k8s" / "agent.yaml")], config)[0].replace(
        "--data-dir /data", f"--data-dir {tmp_path / 'data-agent'}")
    agent_env = {**config, "NODE_NAME": "gpu-7.example.internal", "PATH": f"{VENV_BIN}:/usr/bin:/bin"}
    specs.append(ChildSpec("agent", ["/usr/bin/env", *[f"{k}={v}" for k, v in agent_env.items()],
                                     "/bin/sh", "-c", script]))

    def node_named_after_the_kubernetes_node() -> None:
        nodes = horizon("nodes", "--json", url=url)
        assert nodes.returncode == 0, nodes.stderr
        assert "gpu-7-example-internal-00" in {n["node"] for n in json.loads(nodes.stdout)}, nodes.stdout

    run_parts(specs, url, tmp_path, server, then=node_named_after_the_kubernetes_node)
