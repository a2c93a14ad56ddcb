"""Kubernetes users submit as Kubernetes users do (docs/backends.md): a pod, or a ``batch/v1`` Job's
pods, with ``schedulerName: horizon`` and Kueue's queue label becomes a Horizon job, waits with
Horizon's why as its ``PodScheduled`` condition, and is bound where Horizon places it.

The pure part (``admission.py``) is tested on pods as the API server returns them; the rest runs
``horizon up --backend kubernetes --quota-provider kubernetes`` against the real test cluster
(``tests/kubernetes_cluster.py``) and drives it with ``kubectl apply`` as a user does.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from services.domain.cluster import BACKEND_LABEL
from services.nodes.backends.kubernetes import admission, core
from tests.kubernetes_cluster import KubernetesCluster
from tests.nodes.test_kubernetes_backend import KubeUp

pytestmark = pytest.mark.timeout(1500)


def user_pod(name: str, namespace: str = "team-a", uid: str = "", cpu: str = "250m", created: str = "2026-11-28T10:00:00Z",
             labels: dict[str, str] | None = None, notes: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}", "creationTimestamp": created,
                         "labels": labels or {}, "annotations": notes or {}},
            "spec": {"schedulerName": "horizon", "containers": [{"name": "c", "image": "busybox:1.35",
                                                                  "resources": {"requests": {"cpu": cpu, "memory": "32Mi"}}}],
                     **spec},
            "status": {"phase": "Pending"}}


# ---------------------------------------------------------------------- the pure part


def test_a_users_pod_is_a_job_with_its_requests_queue_and_a_deterministic_id() -> None:
    pod = user_pod("train-1", labels={admission.QUEUE_LABEL: "ml", admission.PRIORITY_LABEL: "high"},
                   notes={admission.CHECKPOINT_ANNOTATION: "SIGTERM"}, activeDeadlineSeconds=600,
                   nodeSelector={"disk": "ssd"},
                   tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
                                {"key": "node.kubernetes.io/not-ready", "operator": "Exists"}])
    [request], waiting = admission.requests([pod], install="ab12")
    assert waiting == [] and request.keys == ("team-a/train-1",)
    again, _ = admission.requests([dict(pod)], install="other")
    assert again[0].job_id == request.job_id  # the same pod: the same id, whoever computes it
    assert request.job_id.startswith("k8s-team-a-train-1-")
    renewed, _ = admission.requests([user_pod("train-1", uid="another")], install="ab12")
    assert renewed[0].job_id != request.job_id  # created again under its name: a new job
    event = admission.job_submitted(request, ts=5.0)
    assert (event.tenant, event.account, event.priority_class, event.checkpoint_signal) == ("team-a", "ml", "high", "SIGTERM")
    assert (event.resources.cpus, event.resources.memory, event.resources.gpus, event.nodes) == ("250m", 32 << 20, 0, 1)
    assert event.time_limit_s == 600 and event.requeue is False
    assert event.node_selector == {"disk": "ssd", BACKEND_LABEL: "kubernetes"}
    assert [(t.key, t.operator) for t in event.tolerations] == [("gpu", "Exists")]
    assert admission.pods_of_payload(event.payload) == ("team-a", [("train-1", "uid-train-1")])
    # without the queue label, the namespace is the account
    assert admission.job_submitted(admission.requests([user_pod("x")], "ab12")[0][0], 0).account == "team-a"


def test_which_pods_are_users_pods() -> None:
    bound = user_pod("b", nodeName="n1")
    others = user_pod("o")
    others["spec"]["schedulerName"] = "default-scheduler"
    ours = user_pod("h", labels={core.LABEL_MANAGED: "horizon", core.LABEL_INSTALL: "ab12"})
    done = {**user_pod("d"), "status": {"phase": "Succeeded"}}
    deleting = user_pod("del")
    deleting["metadata"]["deletionTimestamp"] = "2026-11-28T10:00:00Z"
    assert [admission.users_pod(p, "ab12") for p in (bound, others, ours, done, deleting, user_pod("u"))] == \
        [False, False, False, False, False, True]


def test_a_pod_group_is_one_gang_once_all_its_pods_exist() -> None:
    group = {admission.GROUP_LABEL: "ddp"}
    count = {admission.GROUP_COUNT: "2"}
    first = user_pod("ddp-0", labels=group, notes=count, created="2026-11-28T10:00:01Z")
    requests, waiting = admission.requests([first], "ab12")
    assert requests == [] and waiting == [admission.Waiting(
        "team-a/ddp-0", "pod group ddp: 1 of its 2 pods exist; Horizon waits for all of them")]
    second = user_pod("ddp-1", labels=group, notes=count, created="2026-11-28T10:00:00Z")
    extra = user_pod("ddp-2", labels=group, notes=count, created="2026-11-28T10:00:02Z")
    [request], waiting = admission.requests([first, extra, second], "ab12")
    assert waiting == [] and request.keys == ("team-a/ddp-1", "team-a/ddp-0")  # the first two by creation
    event = admission.job_submitted(request, 0)
    assert (event.nodes, event.name, event.labels["kubernetes.pod-group"]) == (2, "ddp", "ddp")
    bad = user_pod("odd", labels={admission.GROUP_LABEL: "g"}, notes={admission.GROUP_COUNT: "two"})
    assert "must be a whole number of pods, not two" in admission.requests([bad], "ab12")[1][0].why


# ---------------------------------------------------------------------- against the real cluster


def until(what: str, check: Callable[[], Any], timeout: float = 90, say: Callable[[], str] = lambda: "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout:g} s\n{say()}")


def condition(k: KubernetesCluster, namespace: str, pod: str) -> str:
    status = k.get("pod", pod, "-n", namespace)["status"]
    return next((c.get("message", "") for c in status.get("conditions") or [] if c["type"] == "PodScheduled"), "")


def job_rows(up: KubeUp, namespace: str) -> dict[str, dict[str, Any]]:
    return {job: row for job, row in up.rows().items() if job.startswith(f"k8s-{namespace}-")}


def pod_body(name: str, namespace: str, cpu: str, command: list[str], labels: dict[str, str] | None = None,
             notes: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}, "annotations": notes or {}},
            "spec": {"schedulerName": "horizon", "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": "busybox:1.35", "imagePullPolicy": "IfNotPresent",
                                     "command": command, "resources": {"requests": {"cpu": cpu, "memory": "16Mi"}}}]}}


def apply(k: KubernetesCluster, body: dict[str, Any]) -> None:
    k.kubectl_run("apply", "-f", "-", input=json.dumps(body))


class UsersUp(KubeUp):
    """``horizon up --backend kubernetes`` with the namespaces' ResourceQuotas as account quotas."""

    def __init__(self, data_dir: Path, cluster: KubernetesCluster, namespace: str) -> None:
        super().__init__(data_dir, cluster, namespace)
        self.extra = (*self.extra, "--quota-provider", "kubernetes", "--quota-every", "1s")


def test_a_kubectl_job_with_schedulername_horizon_runs_where_horizon_places_it(
        tmp_path: Path, kubernetes_cluster: KubernetesCluster) -> None:
    k = kubernetes_cluster
    for namespace in ("pods-a", "pods-q"):
        k.kubectl_run("create", "namespace", namespace, check=False)
    # pods-q may request 1 CPU: a Horizon job of that account holds it, so its pod below waits in Horizon
    # (Kubernetes itself admits the pod: nothing else of pods-q's namespace requests CPU)
    apply(k, {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "compute", "namespace": "pods-q"},
              "spec": {"hard": {"requests.cpu": "1"}}})
    up = UsersUp(tmp_path / "data", k, "hz-users")
    up.start()
    try:
        # 1. a batch/v1 Job of two pods, as a user writes it for Kueue, with Horizon's scheduler name
        apply(k, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "hello", "namespace": "pods-a"},
                  "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 0, "template": {
                      "metadata": {"labels": {admission.QUEUE_LABEL: "pods-a"}},
                      "spec": {"schedulerName": "horizon", "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                               "containers": [{"name": "hello", "image": "busybox:1.35", "imagePullPolicy": "IfNotPresent",
                                               "command": ["sh", "-c", "echo hello from $(hostname)"],
                                               "resources": {"requests": {"cpu": "250m", "memory": "32Mi"}}}]}}}})
        until("the Job's two pods succeeded", lambda: (k.get("job", "hello", "-n", "pods-a").get("status") or {})
              .get("succeeded") == 2, say=lambda: up.log()[-3000:])
        pods = [p for p in k.get("pods", "-n", "pods-a", "-l", "job-name=hello")["items"]]
        rows = job_rows(up, "pods-a")
        assert len(pods) == 2 and len(rows) == 2
        for pod in pods:
            name = pod["metadata"]["name"]
            [job] = [j for j in rows if j.startswith(f"k8s-pods-a-{name}-")]
            assert rows[job]["state"] == "SUCCEEDED" and rows[job]["node"] == pod["spec"]["nodeName"] == "localhost"
            assert (rows[job]["tenant"], rows[job]["account"]) == ("pods-a", "pods-a")
            assert k.kubectl_run("logs", "-n", "pods-a", name).strip() == f"hello from {name}"
            assert pod["metadata"]["annotations"][core.ANNOTATION_JOB] == job  # bound by Horizon, marked as its
            assert up.bindings()[f"pods-a/{name}"] == 1

        # 2. a pod over its namespace's ResourceQuota (as Horizon counts the account) waits, the quota named
        holder = up.submit("--account", "pods-q", "--cpus", "1", "--mem", "32M", "--", "sh", "-c", "sleep 12")
        up.wait_state(holder, ("RUNNING",), timeout=90)
        apply(k, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "over", "namespace": "pods-q",
                                                                  "labels": {admission.QUEUE_LABEL: "pods-q"}},
                  "spec": {"schedulerName": "horizon", "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                           "containers": [{"name": "c", "image": "busybox:1.35", "imagePullPolicy": "IfNotPresent",
                                           "command": ["echo", "after the quota"],
                                           "resources": {"requests": {"cpu": "500m", "memory": "32Mi"}}}]}})
        why = until("the pod's condition naming the quota",
                    lambda: "ResourceQuota pods-q/compute" in (m := condition(k, "pods-q", "over")) and m,
                    say=lambda: f"{condition(k, 'pods-q', 'over')}\n{up.log()[-2000:]}")
        assert why.startswith("Horizon: job k8s-pods-q-over-") and "pending" in why
        pod = k.get("pod", "over", "-n", "pods-q")
        assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
        until("the pod ran once the quota had room", lambda: k.get("pod", "over", "-n", "pods-q")["status"]
              .get("phase") == "Succeeded", timeout=120, say=lambda: up.log()[-3000:])
        assert k.kubectl_run("logs", "-n", "pods-q", "over").strip() == "after the quota"

        # 3. a pod group of two: one gang of two nodes, bound all at once; on a one-node cluster it is
        # refused, the reason on its pods
        group = {admission.QUEUE_LABEL: "pods-a", admission.GROUP_LABEL: "pair"}
        for i in range(2):
            apply(k, pod_body(f"pair-{i}", "pods-a", "100m", ["true"], labels=group, notes={admission.GROUP_COUNT: "2"}))
            if i == 0:
                until("the first pod waits for its group", lambda: "1 of its 2 pods exist" in condition(k, "pods-a", "pair-0"))
        gang = until("the group's job", lambda: [j for j in job_rows(up, "pods-a") if j.startswith("k8s-pods-a-pair-")])
        if len(k.get("nodes")["items"]) == 1:
            message = until("the gang's reason", lambda: "REJECTED" in (m := condition(k, "pods-a", "pair-1")) and m)
            assert message == f"Horizon: job {gang[0]} REJECTED: nodes: 2 nodes of 0.1 CPUs and 16Mi memory each; " \
                              "only 1 registered node could hold one"
            assert k.get("pod", "pair-0", "-n", "pods-a")["status"]["conditions"][0]["reason"] == "HorizonRejected"
        else:
            up.wait_state(gang[0], ("SUCCEEDED",), timeout=90)
            assert len({k.get("pod", f"pair-{i}", "-n", "pods-a")["spec"]["nodeName"] for i in range(2)}) == 2

        # 4. a pod deleted while its job waits cancels the job
        cpus = core.quantity(k.get("node", "localhost")["status"]["allocatable"]["cpu"], 1000)
        holder = up.submit("--cpus", "0.5", "--mem", "32M", "--", "sh", "-c", "sleep 30")
        up.wait_state(holder, ("RUNNING",), timeout=90)
        apply(k, pod_body("whole", "pods-a", f"{cpus}m", ["true"]))
        job = until("the waiting pod's job", lambda: [j for j in job_rows(up, "pods-a") if j.startswith("k8s-pods-a-whole-")])[0]
        until("its why", lambda: "CPUs" in condition(k, "pods-a", "whole"), say=lambda: condition(k, "pods-a", "whole"))
        k.kubectl_run("delete", "pod", "whole", "-n", "pods-a", "--wait")
        row = up.wait_state(job, ("CANCELLED",), timeout=60)
        assert row["reason"] == "its pod pods-a/whole was deleted in Kubernetes"
        assert up.cli("cancel", holder).returncode == 0
        up.wait_state(holder, ("CANCELLED",), timeout=60)

        # 5. preemption: a high-class pod takes the room of a running normal one, whose pod is deleted
        # (SIGTERM first); it is not requeued (a pod is bound once): its job ends PREEMPTED
        apply(k, pod_body("victim", "pods-a", f"{cpus - 250}m", ["sh", "-c", 'trap "exit 143" TERM; sleep 300 & wait']))
        victim = until("the victim's job", lambda: [j for j in job_rows(up, "pods-a") if j.startswith("k8s-pods-a-victim-")])[0]
        up.wait_state(victim, ("RUNNING",), timeout=90)
        apply(k, pod_body("boss", "pods-a", "500m", ["echo", "boss"], labels={admission.PRIORITY_LABEL: "high"}))
        boss = until("the boss's job", lambda: [j for j in job_rows(up, "pods-a") if j.startswith("k8s-pods-a-boss-")])[0]
        up.wait_state(boss, ("SUCCEEDED",), timeout=120)
        row = up.wait_state(victim, ("PREEMPTED",), timeout=30)
        assert row["reason"] == f"preempted for {boss}"
        assert k.kubectl_run("logs", "-n", "pods-a", "boss").strip() == "boss"
        gone = k.get("pods", "-n", "pods-a", "--field-selector", "metadata.name=victim")["items"]
        assert not gone or gone[0]["status"]["phase"] == "Failed"
        up.check_and_audit()
    finally:
        up.stop()
        for namespace in ("pods-a", "pods-q"):
            k.kubectl_run("delete", "namespace", namespace, "--wait=false", check=False)
