"""A real Kubernetes cluster for the tests: ``deploy/kubernetes/testcluster/start.sh`` in a temporary
folder, once per test run (docs/backends.md, "Kubernetes").

etcd, kube-apiserver, kube-controller-manager and one kubelet over containerd, built from Debian's
kubernetes source (cached outside the checkout: the first start on a machine builds for some minutes;
``.ci/run`` builds before the suite). No kube-scheduler runs: binding pods is Horizon's job. Where the
cluster cannot start, its tests fail in CI (``CI`` set) and are skipped elsewhere, with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "deploy" / "kubernetes" / "testcluster"
START_BUDGET_S = 1200  # a cold build included

__all__ = ["KubernetesCluster", "start_cluster", "stop_cluster", "unavailable"]


@dataclass(frozen=True)
class KubernetesCluster:
    folder: Path
    kubeconfig: Path
    kubectl: Path

    def kubectl_run(self, *args: str, input: str | None = None, check: bool = True) -> str:
        done = subprocess.run([str(self.kubectl), "--kubeconfig", str(self.kubeconfig), *args], input=input,
                              capture_output=True, text=True, timeout=60)
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl_run("get", *args, "-o", "json"))


def unavailable() -> str | None:
    """Why this machine cannot run the test cluster, or None."""
    if os.geteuid() != 0:
        return "the Kubernetes test cluster needs root (containerd, the kubelet, cgroups)"
    if not Path("/usr/bin/apt-get").exists() and not Path("/usr/bin/containerd").exists():
        return "the Kubernetes test cluster needs Debian's packages (apt-get) or containerd installed"
    return None


def start_cluster(folder: Path) -> KubernetesCluster:
    """Start it in ``folder``; ``RuntimeError`` with the script's last words if it cannot."""
    done = subprocess.run([str(SCRIPTS / "start.sh"), str(folder)], capture_output=True, text=True,
                          timeout=START_BUDGET_S)
    found = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    if done.returncode != 0 or "KUBECONFIG" not in found:
        stop_cluster(folder)
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise RuntimeError(f"the Kubernetes test cluster did not start (exit {done.returncode}):\n{tail}")
    return KubernetesCluster(folder, Path(found["KUBECONFIG"]), Path(found["KUBECTL"]))


def stop_cluster(folder: Path) -> None:
    subprocess.run([str(SCRIPTS / "stop.sh"), str(folder)], capture_output=True, timeout=120)
