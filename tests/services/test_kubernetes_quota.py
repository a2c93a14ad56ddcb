"""Kubernetes ResourceQuota as a quota provider (docs/backends.md, "Quota providers"): each namespace's
quotas become its Horizon account's.

The pure mapping is tested on ResourceQuota objects as the API server returns them; then against the
real test cluster (tests/kubernetes_cluster.py) and a running Horizon (the in-process stack, jobs on
the process executor: the quota is about admission, not where jobs run): a namespace's quota reaches
the log as its account's, and a job over it waits with the quota named; and ``horizon up
--quota-provider kubernetes`` and ``horizon quota sync --provider kubernetes`` as a person runs them.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from events import catalogue as c
from services.domain.fairshare import FairShare
from services.domain.quotas import BLOCKED, Amount, Quotas
from services.nodes.spec import local_nodes
from services.quota.app import KubernetesQuotaSource
from services.quota.kubernetes import PROVIDER, QuantityError, desired, plan
from tests.e2e import HorizonUp, assert_replays, events_of, horizon
from tests.helpers import spec as job_spec


def rq(namespace: str, name: str, hard: dict[str, str], **spec: object) -> dict:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name, "namespace": namespace},
            "spec": {"hard": hard, **spec}, "status": {"hard": hard, "used": {"pods": "7"}}}


QUOTAS = [
    rq("vision", "gpus", {"requests.nvidia.com/gpu": "4", "pods": "10"}),
    rq("ml", "compute", {"requests.cpu": "8", "requests.memory": "64Gi", "limits.cpu": "16", "pods": "5",
                         "services": "3", "requests.storage": "1Ti"}),
    rq("ml", "big-pods", {"pods": "2"}, scopes=["BestEffort"]),
    rq("ml", "another", {"cpu": "6500m", "memory": "128G"}),
    rq("infra", "objects", {"configmaps": "10"}),
]


def test_each_namespace_with_a_quota_that_maps_becomes_an_account_of_its_name():
    wanted, notes = desired(QUOTAS)
    assert [(w.account, w.parent, w.shares) for w in wanted] == [("ml", None, 1.0), ("vision", None, 1.0)]
    ml, vision = (w.quota for w in wanted)
    # the smallest of every key and every quota of the namespace holds, with the quota and key it came from
    assert ml.cpus_milli == 6500 and ml.sources["cpus_milli"] == "Kubernetes ResourceQuota ml/another cpu"
    assert ml.memory_bytes == 64 << 30 and ml.sources["memory_bytes"] == "Kubernetes ResourceQuota ml/compute requests.memory"
    assert ml.running_jobs == 5 and ml.sources["running_jobs"] == "Kubernetes ResourceQuota ml/compute pods"
    assert ml.gpus is None
    assert vision == c.Quota(gpus=4, running_jobs=10, sources={
        "gpus": "Kubernetes ResourceQuota vision/gpus requests.nvidia.com/gpu",
        "running_jobs": "Kubernetes ResourceQuota vision/gpus pods"})
    # what does not map is said; a scoped quota is left out whole; a namespace with nothing that maps is no account
    assert notes == [
        "namespace infra: ResourceQuota infra/objects configmaps=10: Horizon does not schedule configmaps; not mapped",
        "namespace ml: ResourceQuota ml/big-pods holds for some pods only (scopes); not mapped",
        "namespace ml: ResourceQuota ml/compute requests.storage=1Ti: Horizon does not schedule requests.storage; "
        "not mapped",
        "namespace ml: ResourceQuota ml/compute services=3: Horizon does not schedule services; not mapped"]


def test_quantities_are_kubernetes_own():
    wanted, _ = desired([rq("a", "q", {"requests.cpu": "1.5", "requests.memory": "1G", "pods": "1e1"}),
                         rq("b", "q", {"requests.cpu": "250m", "requests.memory": "512Mi"})])
    a, b = (w.quota for w in wanted)
    assert (a.cpus_milli, a.memory_bytes, a.running_jobs) == (1500, 10**9, 10)  # G is 10^9 in Kubernetes
    assert (b.cpus_milli, b.memory_bytes) == (250, 512 << 20)
    with pytest.raises(QuantityError, match="ResourceQuota a/q requests.cpu"):
        desired([rq("a", "q", {"requests.cpu": "lots"})])


def test_a_tie_names_the_requests_key():
    wanted, _ = desired([rq("a", "q", {"limits.cpu": "2", "requests.cpu": "2"})])
    assert wanted[0].quota.sources == {"cpus_milli": "Kubernetes ResourceQuota a/q requests.cpu"}


def test_plan_keeps_horizon_s_tree_and_publishes_only_what_differs():
    wanted, _ = desired(QUOTAS)
    first = plan(wanted, {}, now=100.0)
    assert [(p.event.account, p.change, p.event.source) for p in first] == [("ml", "new", PROVIDER),
                                                                           ("vision", "new", PROVIDER)]
    assert first[0].msg_id.startswith("account/kubernetes-quota/ml/") and first[0].msg_id.endswith("/after-0")
    current = {p.event.account: (i + 1, p.event) for i, p in enumerate(first)}
    assert plan(wanted, current, now=200.0) == []
    # the operator puts vision under ml with 3 shares: Kubernetes has no tree, so the sync keeps it
    vision = current["vision"][1]
    current["vision"] = (10, c.AccountConfigured(ts=150.0, account="vision", parent="ml", shares=3.0,
                                                 quota=vision.quota, tenants=["acme"], source="horizon-cli"))
    assert plan(wanted, current, now=200.0) == []
    # the namespace's quota changes: its quota is published, its place and tenants kept
    changed, _ = desired([q if q["metadata"]["namespace"] != "vision" else
                          rq("vision", "gpus", {"requests.nvidia.com/gpu": "6", "pods": "10"}) for q in QUOTAS])
    again = plan(changed, current, now=300.0)
    assert [(p.event.account, p.change, p.event.parent, p.event.shares, p.event.quota.gpus, p.event.tenants)
            for p in again] == [("vision", "quota", "ml", 3.0, 6, ["acme"])]
    assert again[0].msg_id.endswith("/after-10") and plan(changed, current, now=301.0)[0].msg_id == again[0].msg_id
    # the quota deleted: the account stays where it is, without Kubernetes' limits
    gone = plan([w for w in wanted if w.account != "ml"], current, now=400.0)
    assert [(p.event.account, p.event.quota, p.change) for p in gone] == [
        ("ml", c.Quota(), "no longer in Kubernetes: its Kubernetes limits are removed")]


def test_the_reason_names_the_resource_quota():
    fs = FairShare()
    wanted, _ = desired(QUOTAS)
    for w in wanted:
        fs.configure_account(c.AccountConfigured(ts=0.0, account=w.account, parent=w.parent, shares=w.shares,
                                                 quota=w.quota), 0.0)
    quotas = Quotas()
    leaf = fs.leaf_for(job_spec("t", 0, account="ml", user="alice"), 0.0).name
    quotas.charge(fs, leaf, Amount(cpus_milli=6000, running_jobs=1), +1)
    verdict, why = quotas.admit(fs, leaf, Amount(cpus_milli=1000, running_jobs=1), {})
    assert verdict == BLOCKED
    assert why == "account ml quota (Kubernetes ResourceQuota ml/another cpu): 6 CPUs in use + 1 CPUs > limit 6.5 CPUs"


# -- against the real Kubernetes test cluster and a running Horizon -----------------------------

async def _until(what: str, check, timeout_s: float = 30.0):  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.3)


def _quota(cpu: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "ResourceQuota",
                       "metadata": {"name": "compute", "namespace": "team-q"},
                       "spec": {"hard": {"requests.cpu": cpu, "pods": "10", "services": "2"}}})


@pytest.mark.timeout(1500)  # the first start of the cluster on a machine builds Kubernetes
async def test_a_namespace_quota_holds_a_job_back_naming_the_resource_quota(kubernetes_cluster, running_horizon):
    k = kubernetes_cluster
    k.kubectl_run("create", "namespace", "team-q")
    k.kubectl_run("apply", "-f", "-", input=_quota("1"))
    source = KubernetesQuotaSource(str(k.kubeconfig))
    h = await running_horizon(nodes=local_nodes(1, gpus_per_node=0, cpus=8), executor="process", quota=(source, 1.0))

    async def configured() -> list[c.AccountConfigured]:
        return [e for e in events_of(await h.records())
                if isinstance(e, c.AccountConfigured) and e.account == "team-q"]

    first = (await _until("team-q's account from its ResourceQuota", configured))[0]
    assert (first.source, first.parent, first.shares) == (PROVIDER, None, 1.0)
    assert first.quota == c.Quota(cpus_milli=1000, running_jobs=10, sources={
        "cpus_milli": "Kubernetes ResourceQuota team-q/compute requests.cpu",
        "running_jobs": "Kubernetes ResourceQuota team-q/compute pods"})

    async def submit() -> str:
        code, out, err = await horizon(h.url, "submit", "--account", "team-q", "--cpus", "1", "--json", "--",
                                       "sleep", "60")
        assert code == 0, err
        return str(json.loads(out)["job_id"])

    async def job(job_id: str) -> dict:
        code, out, err = await horizon(h.url, "show", job_id, "--json")
        assert code == 0, err
        body = json.loads(out)
        return {**(body["job"]["job"] or {}), "why": body["priority"].get("why")}

    running = await submit()
    await _until("the first job running", lambda: _state_is(job, running, "RUNNING"))
    held = await submit()  # after the first runs: in one cycle together, either could be the one to wait
    why = await _until("the second job's reason", lambda: _why(job, held))
    assert (await job(held))["state"] == "PENDING"
    assert why == "account team-q quota (Kubernetes ResourceQuota team-q/compute requests.cpu): 1 CPUs in use + " \
                  "1 CPUs > limit 1 CPUs"
    assert len(await configured()) == 1  # synced every second, published once

    # the namespace's quota is raised in Kubernetes: the next sync carries it over and the job starts
    k.kubectl_run("apply", "-f", "-", input=_quota("2"))
    await _until("the held job to start", lambda: _state_is(job, held, "RUNNING"))
    later = await configured()
    assert [e.quota.cpus_milli for e in later] == [1000, 2000]
    for job_id in (running, held):
        code, _, err = await horizon(h.url, "cancel", job_id)
        assert code == 0, err
    await _until("both cancelled", lambda: _all_ended(job, (running, held)))
    await h.stop()
    assert_replays(await h.records())


async def _state_is(job, job_id: str, state: str) -> bool:  # type: ignore[no-untyped-def]
    return bool((await job(job_id))["state"] == state)


async def _why(job, job_id: str) -> str | None:  # type: ignore[no-untyped-def]
    return (await job(job_id)).get("why")  # type: ignore[no-any-return]


async def _all_ended(job, ids) -> bool:  # type: ignore[no-untyped-def]
    states = [(await job(j))["state"] for j in ids]
    return all(state in ("CANCELLED", "SUCCEEDED", "FAILED") for state in states)


@pytest.mark.timeout(1500)
def test_up_and_quota_sync_take_the_namespaces_quotas(kubernetes_cluster, tmp_path):
    """``horizon up --quota-provider kubernetes --kubeconfig K``: the namespaces' quotas at start and a
    change at the next sync; ``horizon quota sync --provider kubernetes`` then finds nothing to do."""
    k = kubernetes_cluster
    k.kubectl_run("create", "namespace", "team-up")
    hard = {"requests.memory": "1Gi", "requests.nvidia.com/gpu": "2"}
    body = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus", "namespace": "team-up"},
            "spec": {"hard": hard}}
    k.kubectl_run("apply", "-f", "-", input=json.dumps(body))
    up = HorizonUp(tmp_path, "--nodes", "1", "--quota-provider", "kubernetes", "--kubeconfig", str(k.kubeconfig),
                   "--quota-every", "1s")

    def team_up() -> dict | None:
        rows = [r for r in up.json("usage")["rows"] if r["account"] == "team-up" and not r["user"]]
        return rows[0]["quota"] if rows and rows[0]["quota"] else None

    try:
        assert up.until("team-up from its ResourceQuota", team_up) == {
            "gpus": 2, "memory_bytes": 1 << 30,
            "sources": {"gpus": "Kubernetes ResourceQuota team-up/gpus requests.nvidia.com/gpu",
                        "memory_bytes": "Kubernetes ResourceQuota team-up/gpus requests.memory"}}
        body["spec"]["hard"] = {**hard, "requests.nvidia.com/gpu": "3"}
        k.kubectl_run("apply", "-f", "-", input=json.dumps(body))
        up.until("the new GPU limit", lambda: (team_up() or {}).get("gpus") == 3)
        done = up.run("quota", "sync", "--provider", "kubernetes", "--kubeconfig", str(k.kubeconfig), "--json")
        synced = json.loads(done.stdout)
        assert (synced["provider"], synced["published"]) == ("kubernetes", [])
        assert synced["cluster"].startswith("https://127.0.0.1:")
    finally:
        up.stop()
    assert up.proc.returncode == 0


def test_up_kubernetes_quota_provider_options_say_what_is_wrong(tmp_path):
    from click.testing import CliRunner

    from services.front.cli.main import cli

    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\n")
    for args, said, code in (
            (["--quota-provider", "kubernetes"], "give --kubeconfig", 2),
            (["--quota-provider", "kubernetes", "--kubeconfig", str(bad), "--processes"], "without --processes", 2),
            (["--quota-provider", "kubernetes", "--kubeconfig", str(bad)], "names no current-context", 1)):
        done = CliRunner().invoke(cli, ["up", "--data-dir", str(tmp_path / "d"), *args])
        assert done.exit_code == code and said in done.output, done.output
