"""A real Kubernetes cluster for the tests: ``deploy/kubernetes/testcluster/start.sh`` in a temporary
folder, once per test run (docs/backends.md, "Kubernetes").

etcd, kube-apiserver, kube-controller-manager and one kubelet over containerd (``add_node`` adds
another, over a containerd of its own), built from Debian's kubernetes source (cached outside the
checkout: the first start on a machine builds for some minutes; ``.ci/run`` builds before the suite).
The API server's audit log records every Binding and every pod created (``bindings``, ``created``).
No kube-scheduler runs: binding pods is Horizon's job. Where the cluster cannot start, its tests fail
in CI (``CI`` set) and are skipped elsewhere, with the reason.
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

    def add_node(self, name: str) -> None:
        """Another node (``node-up.sh``: a kubelet over a containerd of its own), Ready when this returns."""
        done = subprocess.run([str(SCRIPTS / "node-up.sh"), str(self.folder), name], capture_output=True, text=True,
                              timeout=300)
        if done.returncode != 0:
            self.remove_node(name)
            raise RuntimeError(f"node {name} did not start (exit {done.returncode}): {done.stderr.strip()[-2000:]}")

    def remove_node(self, name: str) -> None:
        """Take it away again (``node-down.sh``): its Node deleted, its processes stopped."""
        subprocess.run([str(SCRIPTS / "node-down.sh"), str(self.folder), name], capture_output=True, timeout=120)

    def audit(self, namespace: str) -> list[dict[str, Any]]:
        """What the API server's audit log holds about the pods of ``namespace`` (``start.sh``'s policy:
        every Binding with its target node, every pod created or deleted), oldest first."""
        path = self.folder / "logs" / "audit.log"
        events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
        return [e for e in events if e.get("stage") == "ResponseComplete"
                and (e.get("objectRef") or {}).get("namespace") == namespace]

    def bindings(self, namespace: str) -> dict[str, list[tuple[str, int]]]:
        """Pod -> every Binding asked for it: (target node, HTTP code), whoever asked."""
        found: dict[str, list[tuple[str, int]]] = {}
        for e in self.audit(namespace):
            ref = e["objectRef"]
            if ref.get("resource") == "pods" and ref.get("subresource") == "binding" and e.get("verb") == "create":
                target = ((e.get("requestObject") or {}).get("target") or {}).get("name", "")
                found.setdefault(ref["name"], []).append((target, int((e.get("responseStatus") or {}).get("code", 0))))
        return found

    def created(self, namespace: str) -> dict[str, int]:
        """Pod -> how many times a pod of that name was created (successfully)."""
        return self._counted(namespace, "create")

    def deleted(self, namespace: str) -> dict[str, list[tuple[str, int | None]]]:
        """Pod -> the deletions of it the API server took: (who, grace period asked). A graceful deletion is
        followed by its kubelet's (``system:node:NAME``, 0) once the pod's containers have ended."""
        found: dict[str, list[tuple[str, int | None]]] = {}
        for e in self.audit(namespace):
            ref = e["objectRef"]
            if (ref.get("resource") == "pods" and not ref.get("subresource") and e.get("verb") == "delete"
                    and int((e.get("responseStatus") or {}).get("code", 0)) < 300):
                grace = (e.get("requestObject") or {}).get("gracePeriodSeconds")
                found.setdefault(ref["name"], []).append((str((e.get("user") or {}).get("username")), grace))
        return found

    def _counted(self, namespace: str, verb: str) -> dict[str, int]:
        found: dict[str, int] = {}
        for e in self.audit(namespace):
            ref = e["objectRef"]
            if (ref.get("resource") == "pods" and not ref.get("subresource") and e.get("verb") == verb
                    and int((e.get("responseStatus") or {}).get("code", 0)) < 300):
                found[ref["name"]] = found.get(ref["name"], 0) + 1
        return found


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
