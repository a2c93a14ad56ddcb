"""One queue over every backend at once (docs/backends.md, "One queue over several backends"; issue 33,
item 5): one ``horizon up --backend agent,slurm,kubernetes`` over this machine's agent, a real Slurm
cluster (tests/slurm_cluster.py: slurmctld and two slurmd on this host) and the real Kubernetes test
cluster (tests/kubernetes_cluster.py: one node ``localhost``, no kube-scheduler).

30 jobs of two tenants, placed by one fair share over all three backends, each run exactly once where
Horizon placed it, as each backend's own records say: Slurm's jobs (``scontrol show job``: one per
attempt, on the nodes Horizon chose), the pods (one per attempt, bound once to the node Horizon chose,
their container's output) and, for the agent's node, the processes' own marks. A 2-node gang runs on
two nodes of one backend (Slurm's: ``srun`` inside it reaches both), a 3-node gang no backend alone can
hold waits saying why, a job pinned by ``--node-selector horizon.io/backend=...`` runs there, and
``horizon nodes`` says each node's backend; ``check`` and ``audit`` pass. Then the same over one bus
with each backend a ``horizon service`` of its own, on one data dir.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.domain.hostlist import expand
from services.nodes.backends.kubernetes import core as kube
from services.nodes.backends.slurm import core as slurm_core
from tests.kubernetes_cluster import KubernetesCluster
from tests.nodes.test_real_nodes import HORIZON, Up
from tests.slurm_cluster import SlurmCluster, SlurmNode, slurm_installed

pytestmark = [pytest.mark.timeout(1500),  # the first start of the Kubernetes cluster on a machine builds it
              pytest.mark.skipif(not slurm_installed(), reason="Slurm (slurm-wlm) is not installed")]

SELECTOR = "horizon.io/backend"
FINAL = ("SUCCEEDED", "FAILED", "CANCELLED", "OUT_OF_MEMORY", "TIMEOUT", "LOST")


@pytest.fixture
def slurm(tmp_path: Path) -> Iterator[SlurmCluster]:
    with SlurmCluster(tmp_path / "slurm", [SlurmNode("s1", gpus=0), SlurmNode("s2", gpus=0)]) as running:
        yield running


class Together(Up):
    """``horizon up`` over the three backends, and what each backend itself says of the jobs."""

    def __init__(self, data_dir: Path, slurm: SlurmCluster, kubernetes: KubernetesCluster, namespace: str,
                 *options: str) -> None:
        """``options``: ``up``'s (without them, ``--backend agent,slurm,kubernetes`` with each one's options)."""
        kubernetes.kubectl_run("create", "namespace", namespace, check=False)
        self.slurm_options = ["--slurm-conf", str(slurm.conf), "--slurm-partition", slurm.partition]
        self.kube_options = ["--kubeconfig", str(kubernetes.kubeconfig), "--namespace", namespace]
        super().__init__(data_dir, *(options or ("--backend", "agent,slurm,kubernetes", *self.slurm_options,
                                                 *self.kube_options)))
        self.slurm, self.kubernetes, self.namespace = slurm, kubernetes, namespace

    def nodes(self) -> dict[str, str]:
        """Node -> its backend, as ``horizon nodes --json`` says."""
        return {n["node"]: n["backend"] for n in json.loads(self.cli("nodes", "--json").stdout)}

    def submit_as(self, tenant: str, *args: str) -> str:
        return self.submit("--tenant", tenant, "--account", tenant, *args)

    def until(self, what: str, check: Any, timeout_s: float = 120.0) -> Any:
        deadline = time.monotonic() + timeout_s
        while not (found := check()):
            assert time.monotonic() < deadline, f"{what}; up said:\n{self.log()[-3000:]}"
            time.sleep(0.5)
        return found

    def slurm_jobs(self, backend_dir: Path) -> dict[tuple[str, int], list[dict[str, str]]]:
        """(job, attempt) -> the Slurm jobs this installation submitted for it (Slurm's own records)."""
        install = (backend_dir / "jobs" / "slurm-installation").read_text().strip()
        records = slurm_core.parse_records(self.slurm.run("scontrol", "show", "job", "-o"))
        out: dict[tuple[str, int], list[dict[str, str]]] = {}
        for record in records:
            key = slurm_core.attempt_of(record, install)
            if key is not None:
                out.setdefault(key, []).append(record)
        return out

    def pods(self) -> dict[tuple[str, int], list[dict[str, Any]]]:
        """(job, attempt) -> its pods in the namespace (the API server's own records)."""
        out: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for pod in self.kubernetes.get("pods", "-n", self.namespace)["items"]:
            notes = pod["metadata"].get("annotations") or {}
            if kube.ANNOTATION_JOB in notes:
                out.setdefault((notes[kube.ANNOTATION_JOB], int(notes[kube.ANNOTATION_ATTEMPT])), []).append(pod)
        return out

    def bindings(self, log: Path) -> Counter[str]:
        """Pod -> how many Bindings the backend posted for it (its log: one line per binding)."""
        found: Counter[str] = Counter()
        for line in log.read_text().splitlines():
            m = re.search(r"pods (\S+) bound to", line)
            if m:
                found.update(m.group(1).split(","))
        return found

    def check_and_audit(self) -> None:
        for command in ("check", "audit"):
            done = self.cli(command)
            assert done.returncode == 0, f"horizon {command}: {done.stdout[-2000:]}{done.stderr[-2000:]}"


def _command(marks: Path, sleep_s: float, held: bool = False) -> list[str]:
    """A job's command: its mark in ``marks`` where that folder is (this host: the agent's node and Slurm's,
    not a pod's container), its words on stdout, then a while asleep; ``held``: where ``marks`` is, until
    the test writes ``marks/release`` (at most 300 s) instead, however long the test's steps take."""
    wait = (f"if [ -d {marks} ]; then i=0; while [ ! -e {marks}/release ] && [ $i -lt 1500 ]; do sleep 0.2; "
            f"i=$((i+1)); done; else sleep {sleep_s}; fi") if held else f"sleep {sleep_s}"
    return ["--", "sh", "-c", f'echo "ran $HORIZON_JOB_ID on $HORIZON_NODE"; '
                              f'[ -d {marks} ] && echo "$HORIZON_JOB_ID $HORIZON_NODE" >> {marks}/ran; {wait}']


def _gang_command(marks: Path, conf: Path) -> list[str]:
    """A 2-node job that reaches both its nodes: under Slurm, ``srun`` runs one task on each."""
    mark = f'echo "$HORIZON_JOB_ID $SLURMD_NODENAME" >> {marks}/ran'
    return ["--", "sh", "-c", f"SLURM_CONF={conf} /usr/bin/srun sh -c '{mark}'"]


def _runs_once_where_placed(up: Together, jobs: list[str], marks: Path, backend_dir: Path,
                            backend_log: Path) -> dict[str, str]:
    """Every job ended SUCCEEDED after one attempt, and ran once, on the nodes Horizon chose, in the backend
    of those nodes, and nowhere else; job -> that backend."""
    rows, backend_of = up.rows(), up.nodes()
    slurm_jobs, pods, bound = up.slurm_jobs(backend_dir), up.pods(), up.bindings(backend_log)
    lines = (marks / "ran").read_text().splitlines()
    where: dict[str, str] = {}
    for job in jobs:
        row = rows[job]
        assert (row["state"], row["attempt"]) == ("SUCCEEDED", 1), row
        nodes = [a["node"] for a in row["allocation"]]
        [backend] = {backend_of[n] for n in nodes}  # a gang's nodes are of one backend
        where[job] = backend
        ran_here = sorted(line.split()[1] for line in lines if line.split()[0] == job)
        if backend == "slurm":
            [record] = slurm_jobs.pop((job, 1))  # one Slurm job for the attempt
            assert sorted(expand(record["NodeList"])) == sorted(nodes), record
            assert (record["JobState"], record["ExitCode"], record["NumNodes"]) == ("COMPLETED", "0:0",
                                                                                     str(len(nodes))), record
            assert ran_here == sorted(nodes)  # its processes: once on each of its nodes
        elif backend == "kubernetes":
            [pod] = pods.pop((job, 1))  # one pod for the attempt, bound once, where Horizon placed it
            assert [pod["spec"]["nodeName"]] == nodes and bound[pod["metadata"]["name"]] == 1
            assert pod["status"]["phase"] == "Succeeded"
            said = up.kubernetes.kubectl_run("logs", "-n", up.namespace, pod["metadata"]["name"]).strip()
            assert said == f"ran {job} on {nodes[0]}" and ran_here == []
        else:
            assert ran_here == nodes  # a process of its own on the agent's node, once
    assert not slurm_jobs and not pods  # no job ran in a backend Horizon did not place it in
    return where


def test_one_queue_over_the_agent_slurm_and_kubernetes(tmp_path: Path, slurm: SlurmCluster,
                                                       kubernetes_cluster: KubernetesCluster) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    up = Together(tmp_path / "data", slurm, kubernetes_cluster, "hz-together")
    up.start()
    try:
        me = socket.gethostname().split(".")[0]
        assert up.nodes() == {me: "agent", "s1": "slurm", "s2": "slurm", "localhost": "kubernetes"}
        rows = [line.split() for line in up.cli("nodes").stdout.splitlines()]  # the table: BACKEND last
        assert rows[0][-1] == "BACKEND" and {r[0]: r[-1] for r in rows[1:]} == up.nodes()
        small = ("--cpus", "1", "--mem", "64M")
        # acme fills the cluster: a gang of 2 (only Slurm has two nodes), a job pinned to Kubernetes, and
        # more plain jobs than there are CPUs left
        acme = [up.submit_as("acme", *small, "--nodes", "2", *_gang_command(marks, slurm.conf)),
                up.submit_as("acme", *small, "--node-selector", f"{SELECTOR}=kubernetes", *_command(marks, 20))]
        # held until beta's 15 submissions below are in (they took 45 s and more on a loaded machine, beside
        # the suite's other workers: a fixed sleep ran out first); a pod's (no marks there) sleeps 40 s
        acme += [up.submit_as("acme", *small, *_command(marks, 40, held=True)) for _ in range(13)]
        # a gang of 3 no backend holds alone: it waits, saying why, and blocks no one
        wide = up.submit_as("acme", *small, "--nodes", "3", "--", "true")
        reason = up.until("the 3-node gang's reason", lambda: up.rows()[wide].get("reason"))
        assert "the gang needs 3 nodes of one backend and a gang never spans two" in reason, reason
        assert up.cli("cancel", "--tenant", "acme", wide).returncode == 0
        up.until("acme's jobs fill the cluster", lambda: sum(up.rows()[j]["state"] == "RUNNING" for j in acme) >= 8)
        # beta arrives with nothing used: fair share puts its jobs before acme's that still wait
        beta = [up.submit_as("beta", *small, "--node-selector", f"{SELECTOR}=agent", *_command(marks, 2))]
        beta += [up.submit_as("beta", *small, *_command(marks, 2)) for _ in range(14)]
        rows = up.rows()
        waiting = [j for j in acme if rows[j]["state"] == "PENDING"]
        assert waiting, f"acme's jobs should outnumber the cluster's CPUs: {up.cli('nodes').stdout}"
        (marks / "release").touch()  # acme's running jobs end; beta's and acme's waiting ones follow
        jobs = acme + beta
        assert len(jobs) == 30
        for job in jobs:
            up.wait_state(job, FINAL, timeout=240)
        rows = up.rows()
        # every plain job of beta was placed before (or in the cycle of) the first of acme's that waited
        first_waiter = min(rows[j]["scheduled_ts"] for j in waiting)
        late = {j: rows[j]["scheduled_ts"] - first_waiter for j in beta[1:] if rows[j]["scheduled_ts"] > first_waiter}
        assert not late, (late, {j: rows[j]["scheduled_ts"] for j in jobs})
        where = _runs_once_where_placed(up, jobs, marks, up.data_dir, up.data_dir / "horizon.log")
        assert where[acme[0]] == "slurm" and where[acme[1]] == "kubernetes" and where[beta[0]] == "agent"
        spread = Counter(where.values())
        assert set(spread) == {"agent", "slurm", "kubernetes"} and min(spread.values()) >= 2, spread
        for tenant, own in (("acme", acme), ("beta", beta)):
            assert len({where[j] for j in own}) >= 2, (tenant, {j: where[j] for j in own})
        up.check_and_audit()
    finally:
        up.stop()


class Services(Together):
    """The distributed shape: ``horizon up --nodes 0`` (no agent of its own), and each backend a ``horizon
    service`` on its bus, the three on one data dir of their own (each locks its own file in it)."""

    def __init__(self, data_dir: Path, slurm: SlurmCluster, kubernetes: KubernetesCluster, namespace: str) -> None:
        super().__init__(data_dir, slurm, kubernetes, namespace, "--nodes", "0")
        self.backend_dir = data_dir.parent / "backends"
        self.services: dict[str, subprocess.Popen[str]] = {}

    def start(self) -> None:
        super().start()
        for name, options in (("slurm", self.slurm_options), ("kubernetes", self.kube_options), ("agent", [])):
            out = open(self.backend_dir.parent / f"service-{name}.log", "w")  # noqa: SIM115 - the process keeps it
            self.services[name] = subprocess.Popen(
                [*HORIZON, "service", name, "--nats", self.url, "--data-dir", str(self.backend_dir), *options],
                stdout=out, stderr=subprocess.STDOUT, text=True)
            self.until(f"horizon service {name} is up",
                       lambda: f"{name} running against" in self.service_log(name) or self.services[name].poll())
            assert self.services[name].poll() is None, self.service_log(name)

    def service_log(self, name: str) -> str:
        return (self.backend_dir.parent / f"service-{name}.log").read_text()

    def stop(self, sig: int = 2) -> int:
        for name, proc in reversed(list(self.services.items())):
            proc.send_signal(sig)
            assert proc.wait(timeout=60) == 0, self.service_log(name)
        self.services.clear()
        return super().stop(sig)


def test_the_same_with_each_backend_a_service_on_one_bus(tmp_path: Path, slurm: SlurmCluster,
                                                         kubernetes_cluster: KubernetesCluster) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    up = Services(tmp_path / "data", slurm, kubernetes_cluster, "hz-services")
    up.start()
    try:
        me = socket.gethostname().split(".")[0]
        assert up.until("every backend's nodes", lambda: len(up.nodes()) == 4 and up.nodes()) == \
            {me: "agent", "s1": "slurm", "s2": "slurm", "localhost": "kubernetes"}
        small = ("--cpus", "1", "--mem", "64M")
        jobs = [up.submit_as("acme", *small, "--nodes", "2", *_gang_command(marks, slurm.conf))]
        jobs += [up.submit_as(tenant, *small, "--node-selector", f"{SELECTOR}={backend}", *_command(marks, 1))
                 for tenant, backend in (("acme", "kubernetes"), ("beta", "agent"), ("beta", "slurm"))]
        jobs += [up.submit_as("beta", *small, *_command(marks, 1)) for _ in range(2)]
        for job in jobs:
            up.wait_state(job, FINAL, timeout=120)
        where = _runs_once_where_placed(up, jobs, marks, up.backend_dir, up.backend_dir.parent / "service-kubernetes.log")
        assert [where[j] for j in jobs[:4]] == ["slurm", "kubernetes", "agent", "slurm"]
        up.check_and_audit()
    finally:
        up.stop()
