"""The Kubernetes backend (docs/backends.md, Kubernetes): Horizon decides, a real Kubernetes cluster runs.

The pure core is tested on objects as the API server of Kubernetes 1.20 returns them (a Node, pods
of other schedulers, a placement's Pod, ended pods). The rest runs ``horizon up --backend kubernetes``
against the real test cluster (``tests/kubernetes_cluster.py``: one node ``localhost``, no
kube-scheduler): jobs that succeed, fail and are cancelled, each pod bound once to the node Horizon
chose (the backend's log and the API server's audit log say so) and its container's output in its log,
which ``horizon logs`` shows; a pod bound by hand taking capacity Horizon then does not use; a backend
restart in the middle of a run. tests/journeys/test_kubernetes_up.py runs the whole acceptance journey
(gangs over two nodes, preemption with a checkpoint) as a person does.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from events import catalogue as c
from services.nodes.backends.kubernetes import core, output
from tests.kubernetes_cluster import KubernetesCluster
from tests.nodes.test_real_nodes import Up

pytestmark = pytest.mark.timeout(1500)  # the first start of the cluster on a machine builds Kubernetes

# A Node as kube-apiserver 1.20 returns it (trimmed), with GPU feature discovery's labels.
NODE: dict[str, Any] = {
    "metadata": {"name": "gpu-1", "labels": {"kubernetes.io/hostname": "gpu-1", "nvidia.com/gpu.product": "A100-SXM4-40GB",
                                             "nvidia.com/gpu.memory": "40960"}},
    "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
    "status": {"allocatable": {"cpu": "7500m", "memory": "3977232Ki", "nvidia.com/gpu": "4", "pods": "110"},
               "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
}


def other_pod(name: str, node: str, cpu: str, memory: str, gpus: str = "0", phase: str = "Running",
              labels: dict[str, str] | None = None) -> dict[str, Any]:
    limits = {"cpu": cpu, "memory": memory, **({"nvidia.com/gpu": gpus} if gpus != "0" else {})}
    return {"metadata": {"name": name, "namespace": "ml", "labels": labels or {}},
            "spec": {"nodeName": node, "containers": [{"name": "a", "resources": {"requests": {"cpu": cpu}, "limits": limits}}]},
            "status": {"phase": phase}}


# ---------------------------------------------------------------------- the pure core


def test_a_node_as_horizon_registers_it() -> None:
    spec = core.node_spec(NODE)
    assert (spec.name, spec.cpus_milli, spec.memory_bytes, spec.backend) == ("gpu-1", 7500, 3977232 * 1024, "kubernetes")
    assert [(g.id, g.type, g.memory_bytes) for g in spec.gpus] == [(f"gpu{i}", "A100-SXM4-40GB", 40 << 30) for i in range(4)]
    assert spec.labels["kubernetes.io/hostname"] == "gpu-1"
    assert spec.taints == (c.Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule"),)
    assert spec.foreign is None and core.node_drained(NODE) is None
    assert core.node_drained({**NODE, "spec": {"unschedulable": True}}) == \
        "Kubernetes: the node is cordoned (spec.unschedulable)"
    not_ready = {**NODE, "status": {**NODE["status"], "conditions": [{"type": "Ready", "status": "Unknown",
                                                                      "message": "Kubelet stopped posting"}]}}
    assert core.node_drained(not_ready) == "Kubernetes: the node is not Ready (Unknown: Kubelet stopped posting)"


def test_pods_horizon_did_not_place_are_used_capacity_never_smaller_totals() -> None:
    mine = other_pod("hz-1", "gpu-1", "4", "1Gi", labels={core.LABEL_INSTALL: "ab12"})
    pods = [other_pod("train", "gpu-1", "2", "1Gi", "1"),  # a limit alone is the request (memory, GPUs)
            other_pod("done", "gpu-1", "3", "1Gi", phase="Succeeded"), mine,
            other_pod("elsewhere", "gpu-2", "1", "1Gi"),
            {"metadata": {"name": "pending", "namespace": "ml"}, "spec": {}, "status": {"phase": "Pending"}}]
    use = core.foreign_use(pods, "ab12")
    assert use["gpu-1"] == core.Use(2000, 1 << 30, 1, ("ml/train",)) and set(use) == {"gpu-1", "gpu-2"}
    spec = core.node_spec(NODE, use["gpu-1"], held_devices={"gpu3"})
    assert (spec.cpus_milli, len(spec.gpus)) == (7500, 4)  # the totals stay
    assert spec.foreign == c.ForeignUse(cpus_milli=2000, memory_bytes=1 << 30, devices=["gpu2"], jobs=["ml/train"])
    # init containers: the largest of them, if more than the containers' sum
    init = other_pod("init", "gpu-1", "1", "1Gi")
    init["spec"]["initContainers"] = [{"resources": {"requests": {"cpu": "3", "memory": "10Mi"}}}]
    assert core.pod_requests(init) == (3000, 1 << 30, 0)


def test_a_placement_is_a_pod_for_horizon_s_scheduler_with_requests_equal_to_limits() -> None:
    spec = c.JobSpec(tenant="acme", command=("sh", "-c", "echo hi"), cpus_milli=1500, memory_bytes=256 << 20,
                     tolerations=(c.Toleration(key="nvidia.com/gpu", operator="Exists"),))
    alloc = c.NodeAllocation(node="gpu-1", device_ids=["gpu0", "gpu1"], cpus_milli=1500, memory_bytes=256 << 20)
    pod = core.pod_manifest("ab12", "acme:j/1", 2, spec, alloc, {"HORIZON_JOB_ID": "acme:j/1"}, "busybox:1.35", "ml", 10)
    meta, body = pod["metadata"], pod["spec"]
    assert meta["name"] == core.pod_name("ab12", "acme:j/1", 2, "gpu-1") and re.fullmatch(r"hz-acme-j-1-2-[0-9a-f]{8}",
                                                                                            meta["name"])
    assert (meta["namespace"], meta["labels"][core.LABEL_INSTALL], meta["labels"]["horizon.io/job"]) == \
        ("ml", "ab12", "acme_j_1")
    assert core.attempt_of(pod, "ab12") == ("acme:j/1", 2) and core.attempt_of(pod, "ffff") is None
    assert body["schedulerName"] == "horizon" and "nodeName" not in body and body["restartPolicy"] == "Never"
    [container] = body["containers"]
    assert container["image"] == "busybox:1.35" and container["command"] == ["sh", "-c", "echo hi"]
    assert container["resources"]["requests"] == container["resources"]["limits"] == \
        {"cpu": "1500m", "memory": str(256 << 20), "nvidia.com/gpu": "2"}
    assert body["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    assert body["terminationGracePeriodSeconds"] == 10
    assert container["env"] == [{"name": "HORIZON_JOB_ID", "value": "acme:j/1"}]
    with_image = core.pod_manifest("ab12", "j", 1, c.JobSpec(tenant="t", image="python:3.12"), alloc, {}, "busybox", "ml", 0)
    assert with_image["spec"]["containers"][0]["image"] == "python:3.12"
    assert "command" not in with_image["spec"]["containers"][0]  # the image's own entrypoint


def ended(phase: str, **terminated: Any) -> dict[str, Any]:
    return {"status": {"phase": phase, "containerStatuses": [{"state": {"terminated": terminated}}]}}


def test_outcomes_from_phase_and_exit_codes() -> None:
    assert core.outcome(ended("Succeeded", exitCode=0)).exit_code == 0
    assert core.outcome(ended("Failed", exitCode=3, reason="Error")).exit_code == 3
    oom = core.outcome(ended("Failed", exitCode=137, reason="OOMKilled"))
    assert oom.out_of_memory
    killed = core.outcome(ended("Failed", exitCode=137, reason="Error"))
    assert (killed.exit_code, killed.signalled) == (-9, True)
    assert core.outcome(None).lost  # deleted by someone else before it ended
    pulling = {"status": {"phase": "Pending", "containerStatuses": [{"state": {"waiting": {
        "reason": "ErrImageNeverPull", "message": "image nope:1 not present"}}}]}}
    assert core.outcome(pulling).error == "ErrImageNeverPull: image nope:1 not present"
    assert core.running(pulling) and not core.ended(pulling)
    refused = {"status": {"phase": "Failed", "reason": "OutOfcpu", "message": "Node didn't have enough resource: cpu"}}
    assert core.outcome(refused).error == "Kubernetes: OutOfcpu: Node didn't have enough resource: cpu"
    assert core.checkpoint_message(ended("Failed", exitCode=143, message="s3://ckpt/7\n")) == "s3://ckpt/7"


def test_the_output_of_an_attempt_is_its_pod_on_that_node() -> None:
    spec = c.JobSpec(tenant="acme", command=("true",))

    def pod(attempt: int, node: str, index: int = 0, bound: bool = True) -> dict[str, Any]:
        made = core.pod_manifest("ab12", "acme:j", attempt, spec, c.NodeAllocation(node=node), {}, "busybox", "ml",
                                 0, index)
        if bound:
            made["spec"]["nodeName"] = node
        return made

    pods = [pod(1, "n1"), pod(2, "n1"), pod(2, "n2", 1), pod(3, "n1", bound=False),
            core.pod_manifest("ffff", "acme:j", 4, spec, c.NodeAllocation(node="n1"), {}, "busybox", "ml", 0)]
    pods[-1]["spec"]["nodeName"] = "n1"  # another installation's pod of a job of the same id
    name = lambda p: p["metadata"]["name"] if p else None  # noqa: E731
    assert name(output.pod_of(pods, "ab12", "n1", "acme:j", 0)) == name(pods[1])  # the latest bound on n1
    assert name(output.pod_of(pods, "ab12", "n1", "acme:j", 1)) == name(pods[0])
    assert name(output.pod_of(pods, "ab12", "n2", "acme:j", 0)) == name(pods[2])  # a gang's other node: its own pod
    assert output.pod_of(pods, "ab12", "n2", "acme:j", 1) is None
    assert output.pod_of(pods, "ab12", "n1", "other", 0) is None
    assert pods[0]["metadata"]["annotations"][core.ANNOTATION_TENANT] == "acme"  # whose output it is


def test_a_pod_s_start_time_is_utc_whatever_the_local_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.nodes.backends.kubernetes.executor import _parse_time

    monkeypatch.setenv("TZ", "Europe/Berlin")  # summer time in July: mktime - timezone was an hour early
    time.tzset()
    try:
        assert _parse_time("2026-07-01T12:00:00Z") == 1782907200.0
        assert _parse_time("2026-11-28T21:17:04Z") == 1795900624.0
        assert _parse_time("yesterday") is None and _parse_time(None) is None
    finally:
        monkeypatch.undo()
        time.tzset()


# ---------------------------------------------------------------------- against the real cluster


class KubeUp(Up):
    """``horizon up --backend kubernetes`` over the test cluster, its pods in a namespace of its own."""

    def __init__(self, data_dir: Path, cluster: KubernetesCluster, namespace: str) -> None:
        cluster.kubectl_run("create", "namespace", namespace, check=False)
        super().__init__(data_dir, "--backend", "kubernetes", "--kubeconfig", str(cluster.kubeconfig),
                         "--namespace", namespace)
        self.cluster, self.namespace = cluster, namespace

    def pods(self) -> dict[tuple[str, int], list[dict[str, Any]]]:
        """(job, attempt) -> its pods."""
        out: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for pod in self.cluster.get("pods", "-n", self.namespace)["items"]:
            notes = pod["metadata"].get("annotations") or {}
            if core.ANNOTATION_JOB in notes:
                out.setdefault((notes[core.ANNOTATION_JOB], int(notes[core.ANNOTATION_ATTEMPT])), []).append(pod)
        return out

    def bindings(self) -> dict[str, int]:
        """Pod -> how many Bindings the backend posted for it (its log: one line per binding, over restarts)."""
        found: dict[str, int] = {}
        for line in (self.data_dir / "horizon.log").read_text().splitlines():
            m = re.search(r"pods (\S+) bound to", line)
            if m:
                for pod in m.group(1).split(","):
                    found[pod] = found.get(pod, 0) + 1
        return found

    def check_and_audit(self) -> None:
        for command in (("check",), ("audit",)):
            done = self.cli(*command)
            assert done.returncode == 0, f"horizon {command[0]}: {done.stdout[-2000:]}{done.stderr[-2000:]}"


TRAP = 'trap "exit 143" TERM; sleep 300 & wait'  # PID 1 of a container ignores SIGTERM unless it traps it


def test_jobs_run_as_pods_bound_once_where_horizon_placed_them(tmp_path: Path,
                                                               kubernetes_cluster: KubernetesCluster) -> None:
    up = KubeUp(tmp_path / "data", kubernetes_cluster, "hz-jobs")
    up.start()
    try:
        small = ("--cpus", "0.25", "--mem", "32M")
        plain = [up.submit(*small, "--", "sh", "-c", f"echo job {i} on $HORIZON_NODE in $(hostname)") for i in range(3)]
        failing = up.submit(*small, "--", "sh", "-c", "echo bad >&2; exit 3")
        cancelled = up.submit(*small, "--", "sh", "-c", TRAP)
        up.wait_state(cancelled, ("RUNNING",), timeout=90)
        assert up.cli("cancel", cancelled).returncode == 0
        for job in plain:
            assert up.wait_state(job, ("SUCCEEDED",), timeout=90)["exit_code"] == 0
        row = up.wait_state(failing, ("FAILED",), timeout=90)
        assert (row["exit_code"], row["reason"]) == (3, "exit code 3")
        up.wait_state(cancelled, ("CANCELLED",), timeout=90)

        jobs = [*plain, failing, cancelled]
        pods = {key: found for key, found in up.pods().items() if key[0] in jobs}
        # the cancelled job's pod is being deleted: gone already where the kubelet was quick to end it
        assert set(pods) - {(cancelled, 1)} == {(job, 1) for job in jobs if job != cancelled}, set(pods)
        bindings, rows = up.bindings(), up.rows()
        for (job, _), [pod] in pods.items():  # one pod per attempt, bound once, to the node Horizon chose
            assert rows[job]["node"] == pod["spec"]["nodeName"] == "localhost"
            assert bindings[pod["metadata"]["name"]] == 1
            assert pod["spec"]["schedulerName"] == "horizon"
        audited = kubernetes_cluster.bindings("hz-jobs")  # the API server's own record: one Binding each
        assert {pod["metadata"]["name"]: audited.get(pod["metadata"]["name"]) for [pod] in pods.values()} == \
            {pod["metadata"]["name"]: [("localhost", 201)] for [pod] in pods.values()}
        for i, job in enumerate(plain):  # real containers ran them
            [pod] = pods[(job, 1)]
            name = pod["metadata"]["name"]
            assert kubernetes_cluster.kubectl_run("logs", "-n", "hz-jobs", name).strip() == \
                f"job {i} on localhost in {name}"
            assert up.cli("logs", job).stdout == f"job {i} on localhost in {name}\n"  # horizon logs: the pod's log
            assert pod["status"]["phase"] == "Succeeded"
        [failed_pod] = pods[(failing, 1)]
        assert failed_pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
        assert up.cli("logs", failing).stdout == "bad\n"  # its standard error: Kubernetes keeps one log
        said = up.cli("logs", "--err", failing)
        assert said.returncode == 1 and "standard output and error as one log" in said.stderr, said
        [cancelled_pod] = pods.get((cancelled, 1), [None])
        deadline = time.monotonic() + 60  # its pod was deleted (the cancel): gone once the kubelet ended it
        while cancelled_pod is not None and kubernetes_cluster.kubectl_run(
                "get", "pod", "-n", "hz-jobs", cancelled_pod["metadata"]["name"], "--ignore-not-found"):
            assert time.monotonic() < deadline, "the cancelled job's pod is still there"
            time.sleep(0.5)
        said = up.cli("logs", cancelled)  # and its log with it
        assert said.returncode == 1 and f"no output of job {cancelled}" in said.stderr, said
        assert cancelled_pod is None or cancelled_pod.get("metadata", {}).get("deletionTimestamp") \
            or cancelled_pod["status"]["phase"] == "Failed"
        assert kubernetes_cluster.deleted("hz-jobs"), "the cancel deleted no pod"  # the API server's record
        up.check_and_audit()
    finally:
        up.stop()


def test_a_pod_bound_by_hand_takes_capacity_horizon_then_does_not_use(tmp_path: Path,
                                                                     kubernetes_cluster: KubernetesCluster) -> None:
    k = kubernetes_cluster
    k.kubectl_run("create", "namespace", "hz-other", check=False)
    cpus = core.quantity(k.get("node", "localhost")["status"]["allocatable"]["cpu"], 1000)
    name = f"by-hand-{int(time.time() * 1000) % 10**8}"  # a name of its own: a deleted pod's name is no one's
    foreign = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "hz-other"},
               "spec": {"nodeName": "localhost", "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "a", "image": "busybox:1.35", "imagePullPolicy": "IfNotPresent",
                                        "command": ["sleep", "300"],
                                        "resources": {"requests": {"cpu": f"{cpus - 500}m", "memory": "16Mi"}}}]}}
    up = KubeUp(tmp_path / "data", k, "hz-foreign")
    up.start()
    try:
        k.kubectl_run("apply", "-f", "-", input=json.dumps(foreign))
        deadline = time.monotonic() + 60
        # the node's foreign use, registered: used capacity, the totals unchanged
        while (node := _node_rows(up)["localhost"])["cpus_used_milli"] != cpus - 500:
            status = k.get("pod", name, "-n", "hz-other")["status"]
            assert time.monotonic() < deadline, f"{up.cli('nodes').stdout}\nthe pod: {status}"
            time.sleep(0.5)
        assert node["cpus_milli"] == cpus
        fits = up.submit("--cpus", "0.5", "--mem", "16M", "--", "true")
        waits = up.submit("--cpus", "1", "--mem", "16M", "--", "echo", "ran")
        up.wait_state(fits, ("SUCCEEDED",), timeout=60)
        time.sleep(3)
        assert up.rows()[waits]["state"] == "PENDING"  # it would fit the node's totals: it waits, never rejected
        assert (waits, 1) not in up.pods()
        # deleted as a user does: gone from the API once its kubelet has ended it (a forced deletion is
        # gone at once, while the kubelet still counts it and would refuse the next pod: OutOfcpu)
        k.kubectl_run("delete", "pod", name, "-n", "hz-other", "--wait")
        up.wait_state(waits, ("SUCCEEDED",), timeout=90)
        up.check_and_audit()
    finally:
        up.stop()
        k.kubectl_run("delete", "pod", name, "-n", "hz-other", "--grace-period=0", "--force", "--ignore-not-found")


def _node_rows(up: Up) -> dict[str, dict[str, Any]]:
    return {n["node"]: n for n in json.loads(up.cli("nodes", "--json").stdout)}


def test_a_backend_restart_mid_run_binds_nothing_twice_and_loses_nothing(tmp_path: Path,
                                                                         kubernetes_cluster: KubernetesCluster) -> None:
    up = KubeUp(tmp_path / "data", kubernetes_cluster, "hz-restart")
    up.start()
    small = ("--cpus", "0.25", "--mem", "32M")
    try:
        long = [up.submit(*small, "--", "sh", "-c", f"sleep 8; echo long {i}") for i in range(2)]
        short = up.submit(*small, "--", "sh", "-c", "echo short")
        for job in long:
            up.wait_state(job, ("RUNNING",), timeout=90)
        up.wait_state(short, ("SUCCEEDED",), timeout=90)
    finally:
        assert up.stop() == 0  # the pods run on without it
    up.start()  # same data dir: catches up, adopts the running pods
    try:
        for i, job in enumerate(long):
            assert up.wait_state(job, ("SUCCEEDED",), timeout=90)["exit_code"] == 0
            [pod] = up.pods()[(job, 1)]
            assert kubernetes_cluster.kubectl_run("logs", "-n", "hz-restart", pod["metadata"]["name"]).strip() == \
                f"long {i}"
        after = up.submit(*small, "--", "echo", "after")
        up.wait_state(after, ("SUCCEEDED",), timeout=90)
        jobs = [*long, short, after]
        pods = {key: found for key, found in up.pods().items() if key[0] in jobs}
        assert set(pods) == {(j, 1) for j in jobs} and all(len(p) == 1 for p in pods.values())
        assert set(up.bindings().values()) == {1}  # over both runs: each pod bound once
        audited = kubernetes_cluster.bindings("hz-restart")  # and so says the API server's audit log
        assert audited == {pod["metadata"]["name"]: [("localhost", 201)] for [pod] in pods.values()}, audited
        assert set(kubernetes_cluster.created("hz-restart").values()) == {1}
        assert "adopted from a previous agent" in (up.data_dir / "horizon.log").read_text()
        up.check_and_audit()
    finally:
        up.stop()
