"""The Kubernetes test cluster is a real part (deploy/kubernetes/testcluster/, issue 33 item 1): a real
API server whose pods nobody binds until Horizon does, a kubelet that runs them in containerd, and
ResourceQuota enforced at admission, all on loopback and off the host."""

from __future__ import annotations

import json
import time

import pytest

from tests.kubernetes_cluster import KubernetesCluster

pytestmark = pytest.mark.timeout(1500)  # the first start on a machine builds Kubernetes


def pod(name: str, command: str, **spec: object) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                       "spec": {"schedulerName": "horizon", "restartPolicy": "Never", **spec,
                                "containers": [{"name": "main", "image": "busybox:1.35",
                                                "imagePullPolicy": "IfNotPresent",
                                                "command": ["sh", "-c", command]}]}})


def wait_for(check, seconds: float = 60.0):  # type: ignore[no-untyped-def]
    until = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < until, "not within the time"
        time.sleep(0.3)


def test_a_pod_waits_for_its_binding_then_runs_in_a_real_container(kubernetes_cluster: KubernetesCluster) -> None:
    k = kubernetes_cluster
    node = k.get("node", "localhost")
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert ready["Ready"] == "True"
    assert int(node["status"]["allocatable"]["cpu"]) >= 1
    k.kubectl_run("apply", "-f", "-", input=pod("bound-by-hand", "echo hello from $(hostname); exit 3"))
    time.sleep(2)
    waiting = k.get("pod", "bound-by-hand")
    assert waiting["status"]["phase"] == "Pending" and not waiting["spec"].get("nodeName")  # no one else binds
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "bound-by-hand"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "localhost"}}
    k.kubectl_run("create", "--raw", "/api/v1/namespaces/default/pods/bound-by-hand/binding", "-f", "-",
                  input=json.dumps(binding))
    ended = wait_for(lambda: (p := k.get("pod", "bound-by-hand"))["status"]["phase"] in ("Succeeded", "Failed") and p)
    assert ended["status"]["phase"] == "Failed"
    assert ended["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    assert k.kubectl_run("logs", "bound-by-hand").strip() == "hello from bound-by-hand"
    k.kubectl_run("delete", "pod", "bound-by-hand", "--grace-period=0", "--force")


def test_a_namespace_quota_refuses_a_pod_over_it(kubernetes_cluster: KubernetesCluster) -> None:
    k = kubernetes_cluster
    k.kubectl_run("create", "namespace", "team-a")
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "compute", "namespace": "team-a"},
             "spec": {"hard": {"requests.cpu": "1", "requests.memory": "1Gi", "pods": "2"}}}
    k.kubectl_run("apply", "-f", "-", input=json.dumps(quota))
    wait_for(lambda: k.get("resourcequota", "compute", "-n", "team-a").get("status", {}).get("hard"))
    big = json.loads(pod("too-big", "true"))
    big["metadata"]["namespace"] = "team-a"
    big["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "2", "memory": "64Mi"},
                                                 "limits": {"cpu": "2", "memory": "64Mi"}}
    with pytest.raises(AssertionError, match="exceeded quota: compute, requested: requests.cpu=2"):
        k.kubectl_run("apply", "-f", "-", input=json.dumps(big))
    assert k.kubectl_run("get", "pod", "too-big", "-n", "team-a", check=False) == ""
