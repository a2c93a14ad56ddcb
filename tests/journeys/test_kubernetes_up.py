"""``horizon up --backend kubernetes`` as a person runs it, over the real test cluster with two nodes
(issue 33's first acceptance line; docs/backends.md, "Kubernetes backend").

The person starts ``horizon up --backend kubernetes --kubeconfig PATH --port 0 --data-dir k8s`` in a
terminal of its own (stopped at the end with Ctrl-C, by its PID's process group) and works with the
``horizon`` commands beside it (``--data-dir k8s`` finds the server ``--port 0`` started): three plain
jobs (two in ``busybox:1.35``, one in the default image), a gang of two pods (one on each node), a pod
that fails with exit code 3, one cancelled while it runs, and a low-class job with a checkpoint signal
(SIGTERM: the only signal Kubernetes 1.20 sends, with the deletion) that a high-class gang preempts:
it writes its checkpoint to ``$HORIZON_CHECKPOINT_FILE``, is requeued, and its next attempt resumes
from ``$HORIZON_CHECKPOINT_REF`` and succeeds.

Then, from Kubernetes' own records: every pod is one of an attempt Horizon scheduled, named for it and
created once, and bound once (the API server's audit log: one Binding each) to the node of Horizon's
``JobScheduled``; the containers ran (their logs, through ``horizon logs`` and ``kubectl logs``); the
end states are Kubernetes' (phases, exit codes); the stopped attempts' pods were deleted; the backend's
Lease names this ``horizon up`` and is renewed; ``horizon check`` and ``horizon audit`` pass.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.nodes.backends.kubernetes import core
from tests.journeys.conftest import Up, start_up, submitted_id
from tests.journeys.person import Person
from tests.kubernetes_cluster import KubernetesCluster

pytestmark = pytest.mark.timeout(1500)  # the first start of the cluster on a machine builds Kubernetes

NAMESPACE = "hz-journey"
SECOND = "node-2"
SMALL = "--cpus 0.25 --mem 32M"
# PID 1 of a container ignores SIGTERM unless it traps it
TRAP = 'trap "exit 143" TERM; sleep 300 & wait'
# The low job: resumes from its checkpoint when it has one; else works until SIGTERM, writing one first.
LOW = ('if [ -n "$HORIZON_CHECKPOINT_REF" ]; then echo "resumed from $HORIZON_CHECKPOINT_REF"; exit 0; fi; '
       'trap "echo step-42 > $HORIZON_CHECKPOINT_FILE; echo checkpointed; exit 143" TERM; '
       'echo working on $HORIZON_NODE; sleep 300 & wait')


@pytest.fixture
def two_nodes(kubernetes_cluster: KubernetesCluster) -> Iterator[KubernetesCluster]:
    """The shared cluster with a second node for the test (``node-up.sh``), taken away after it."""
    started = time.monotonic()
    kubernetes_cluster.add_node(SECOND)
    print(f"node {SECOND} Ready in {time.monotonic() - started:.1f} s")
    try:
        yield kubernetes_cluster
    finally:
        kubernetes_cluster.remove_node(SECOND)


def submit(person: Person, args: str) -> str:
    return submitted_id(person.run(f"horizon submit --data-dir k8s {args}"))


def job_json(person: Person, job: str) -> dict[str, Any]:
    return json.loads(person.run(f"horizon show --data-dir k8s --json {job}").out)  # type: ignore[no-any-return]


def jobs_json(person: Person) -> dict[str, dict[str, Any]]:
    return {row["job_id"]: row for row in json.loads(person.run("horizon jobs --data-dir k8s --json").out)}


def wait_state(person: Person, job: str, *states: str, timeout: float = 90.0) -> str:
    """`horizon jobs` again until the job is in one of ``states``; returns the state."""
    def state(out: str) -> str:
        return next((row["state"] for row in json.loads(out) if row["job_id"] == job), "")

    seen = person.until("horizon jobs --data-dir k8s --json", lambda r: r.rc == 0 and state(r.out) in states,
                        timeout=timeout)
    return state(seen.out)


def scheduled(shown: dict[str, Any]) -> dict[int, list[str]]:
    """Attempt -> the nodes of its JobScheduled allocation, in order (the log's, as `show` has it)."""
    out: dict[int, list[str]] = {}
    for event in shown["job"]["events"]:
        if event["type"] == "JobScheduled":
            body = event["detail"]
            out[int(body["attempt"])] = [a["node"] for a in body["allocations"]]
    return out


def logs(person: Person, job: str, *args: str) -> str:
    return person.run(f"horizon logs --data-dir k8s {' '.join(args)} {job}").out


def lease(k: KubernetesCluster, install: str) -> dict[str, Any]:
    return k.get("lease", f"horizon-{install}", "-n", NAMESPACE)["spec"]  # type: ignore[no-any-return]


def test_horizon_decides_kubernetes_runs(two_nodes: KubernetesCluster, person: Person) -> None:
    k = two_nodes
    k.kubectl_run("create", "namespace", NAMESPACE, check=False)
    began = time.monotonic()
    person.cwd = person.folder("work")  # up's data dir k8s is here, and the commands run here
    up = start_up(person, f"horizon up --backend kubernetes --kubeconfig {k.kubeconfig} --namespace {NAMESPACE} "
                          "--port 0 --data-dir k8s", cwd=person.cwd)
    print(f"horizon up ready in {time.monotonic() - began:.1f} s")
    nodes = person.run("horizon nodes --data-dir k8s").out
    assert re.search(r"^\s*localhost\s", nodes, re.M) and re.search(rf"^\s*{SECOND}\s", nodes, re.M), nodes
    install = (person.cwd / "k8s" / "jobs" / "kubernetes-installation").read_text().strip()
    first_lease = _holds_the_lease(k, install, up)

    # 1. three plain jobs (one in the default image), a gang of two pods, a failing one, a cancelled one
    plain = [submit(person, f"{SMALL} --image busybox:1.35 -- sh -c 'echo plain {i} on $HORIZON_NODE'")
             for i in (1, 2)]
    plain.append(submit(person, f"{SMALL} -- sh -c 'echo plain 3 on $HORIZON_NODE; busybox | head -1'"))
    gang = submit(person, f"-N 2 {SMALL} --image busybox:1.35 -- sh -c "
                          "'echo gang node $SLURM_NODEID of $SLURM_JOB_NUM_NODES on $HORIZON_NODE'")
    failing = submit(person, f"{SMALL} -- sh -c 'echo about to fail; exit 3'")
    cancelled = submit(person, f"{SMALL} -- sh -c '{TRAP}'")
    assert wait_state(person, cancelled, "RUNNING") == "RUNNING"
    person.run(f"horizon cancel --data-dir k8s {cancelled}")
    for job in [*plain, gang]:
        assert wait_state(person, job, "SUCCEEDED", "FAILED", "CANCELLED") == "SUCCEEDED", logs(person, job)
    assert wait_state(person, failing, "SUCCEEDED", "FAILED") == "FAILED"
    assert wait_state(person, cancelled, "CANCELLED", "SUCCEEDED", "FAILED") == "CANCELLED"
    rows = jobs_json(person)
    assert (rows[failing]["exit_code"], rows[failing]["reason"]) == (3, "exit code 3"), rows[failing]

    # 2. a low-class job with a checkpoint signal fills a node; a high-class gang needs its room
    low = submit(person, f"--priority-class low --checkpoint-signal TERM --cpus 1.5 --mem 32M --image busybox:1.35 "
                         f"-- sh -c '{LOW}'")
    assert wait_state(person, low, "RUNNING") == "RUNNING"
    person.until(f"horizon logs --data-dir k8s {low}", lambda r: "working on" in r.out, timeout=30)
    high = submit(person, "--priority-class high -N 2 --cpus 1.5 --mem 32M --image busybox:1.35 "
                          "-- sh -c 'echo high on $HORIZON_NODE; sleep 2'")
    assert wait_state(person, high, "SUCCEEDED", "FAILED", timeout=120) == "SUCCEEDED", logs(person, high)
    assert wait_state(person, low, "SUCCEEDED", "FAILED", timeout=120) == "SUCCEEDED", logs(person, low)
    shown = job_json(person, low)
    kinds = [e["type"] for e in shown["job"]["events"]]
    assert "JobCheckpointed" in kinds and "JobPreempted" in kinds, kinds
    preempted = next(e for e in shown["job"]["events"] if e["type"] == "JobPreempted")
    assert preempted["detail"].get("checkpoint_ref") == "step-42", preempted
    assert logs(person, low) == "resumed from step-42\n"  # attempt 2, from the checkpoint attempt 1 wrote

    # 3. what Kubernetes says: every pod one of Horizon's placements, created once, bound once, there
    jobs = {job: job_json(person, job) for job in [*plain, gang, failing, cancelled, low, high]}
    expected: dict[str, tuple[str, str, int]] = {}  # pod name -> (its node, job, attempt)
    for job, body in jobs.items():
        for attempt, placed in scheduled(body).items():
            for index, node in enumerate(placed):
                expected[core.pod_name(install, job, attempt, node, index)] = (node, job, attempt)
    assert len(expected) == 3 + 2 + 1 + 1 + 2 + 2, expected  # the low job twice, on one node each time
    assert set(scheduled(jobs[low])) == {1, 2}
    assert set(scheduled(jobs[gang])[1]) == set(scheduled(jobs[high])[1]) == {"localhost", SECOND}
    created, bindings = k.created(NAMESPACE), k.bindings(NAMESPACE)
    assert created == {name: 1 for name in expected}, created
    assert bindings == {name: [(node, 201)] for name, (node, _, _) in expected.items()}, bindings
    pods = {p["metadata"]["name"]: p for p in k.get("pods", "-n", NAMESPACE)["items"]}
    stopped = {core.pod_name(install, cancelled, 1, scheduled(jobs[cancelled])[1][0]),
               core.pod_name(install, low, 1, scheduled(jobs[low])[1][0])}
    # the stopped attempts' pods were deleted by Horizon with the grace period its stop asked (the cancel's,
    # the preemption's, which is the checkpoint's time), then by their kubelet once they had ended; only
    # they: the ended pods stay, with their logs
    deletions = k.deleted(NAMESPACE)
    assert set(deletions) == stopped, deletions
    for job, asked in ((cancelled, "JobStopRequested"), (low, "PreemptionRequested")):
        pod = core.pod_name(install, job, 1, scheduled(jobs[job])[1][0])
        [grace] = [e["detail"]["grace_period_s"] for e in jobs[job]["job"]["events"] if e["type"] == asked]
        assert deletions[pod][0] == ("admin", int(grace)), (job, deletions[pod], grace)
        assert deletions[pod][1:] in ([], [(f"system:node:{scheduled(jobs[job])[1][0]}", 0)]), deletions[pod]
    assert set(pods) - stopped == set(expected) - stopped, sorted(pods)
    assert all(pods[name]["metadata"].get("deletionTimestamp") for name in stopped & set(pods)), pods
    for name, pod in pods.items():
        if name in stopped:
            continue
        node, job, attempt = expected[name]
        assert pod["spec"]["nodeName"] == node and pod["spec"]["schedulerName"] == "horizon"
        notes = pod["metadata"]["annotations"]
        assert (notes[core.ANNOTATION_JOB], notes[core.ANNOTATION_ATTEMPT]) == (job, str(attempt))
        [state] = pod["status"]["containerStatuses"]
        exit_code = 3 if job == failing else 0
        assert (pod["status"]["phase"], state["state"]["terminated"]["exitCode"]) == \
            ("Failed" if exit_code else "Succeeded", exit_code), (name, pod["status"])
        assert state["restartCount"] == 0

    # 4. the containers ran: their output, through horizon logs (the first pod's) and kubectl logs
    for i, job in enumerate(plain, 1):
        node = scheduled(jobs[job])[1][0]
        said = logs(person, job)
        assert said.startswith(f"plain {i} on {node}\n"), said
        if i == 3:  # no --image: the default image, busybox:1.35
            assert said.splitlines()[1].startswith("BusyBox v1.35"), said
        assert pods[core.pod_name(install, job, 1, node)]["spec"]["containers"][0]["image"] == "busybox:1.35"
    gang_nodes = scheduled(jobs[gang])[1]
    assert logs(person, gang) == f"gang node 0 of 2 on {gang_nodes[0]}\n"
    assert k.kubectl_run("logs", "-n", NAMESPACE, core.pod_name(install, gang, 1, gang_nodes[1], 1)) == \
        f"gang node 1 of 2 on {gang_nodes[1]}\n"
    assert logs(person, failing) == "about to fail\n"
    said = person.run(f"horizon logs --data-dir k8s --attempt 1 {low}", ok=False)
    assert "no output of job" in said.err and "pod is deleted" in said.err, said
    said = person.run(f"horizon logs --data-dir k8s --err {failing}", ok=False)
    assert "standard output and error as one log" in said.err, said

    # 5. the Lease is renewed by the same holder; check and audit pass over the whole log
    person.until(f"{k.kubectl} --kubeconfig {k.kubeconfig} get lease horizon-{install} -n {NAMESPACE} "
                 "-o jsonpath={.spec.renewTime}", lambda r: r.out.strip() > first_lease["renewTime"], timeout=30)
    renewed = lease(k, install)
    assert (renewed["holderIdentity"], renewed["acquireTime"]) == \
        (first_lease["holderIdentity"], first_lease["acquireTime"])
    for command in ("check", "audit"):
        done = person.run(f"horizon {command} --data-dir k8s", ok=None)
        assert done.rc == 0, done
    assert up.bg.interrupt() == 0, up.bg.err
    print(f"the journey took {time.monotonic() - began:.1f} s")


def _holds_the_lease(k: KubernetesCluster, install: str, up: Up) -> dict[str, Any]:
    """The backend's Lease ``horizon-<installation>`` names this ``horizon up`` (host and PID)."""
    deadline = time.monotonic() + 30
    while True:
        found = k.kubectl_run("get", "lease", f"horizon-{install}", "-n", NAMESPACE, "-o", "json", check=False)
        if found:
            spec: dict[str, Any] = json.loads(found)["spec"]
            break
        assert time.monotonic() < deadline, "no Lease"
        time.sleep(0.5)
    host, _, pid = spec["holderIdentity"].rpartition("/")
    assert host == socket.gethostname(), spec
    # bash -c runs `horizon up` in its own process (exec) or as its child
    assert int(pid) == up.bg.proc.pid or _parent(int(pid)) == up.bg.proc.pid, (spec, up.bg.proc.pid)
    assert b"up" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert spec["leaseDurationSeconds"] == 30 and spec["renewTime"] >= spec["acquireTime"]
    return spec


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rpartition(")")[2].split()[1])


