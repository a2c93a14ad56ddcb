"""Partitions, pure: host lists, the fold, which partition a job gets with its defaults and limits,
the unknown-name rule, placement on a partition's nodes, priority tiers, snapshots and replay."""

from __future__ import annotations

import msgspec
import pytest

from events import catalogue as c
from services.domain.hostlist import HostlistError, NodePattern, compress, expand
from services.domain.partitions import Partitions
from services.placement.core import PlacementCore
from services.scheduling.core import SchedulingCore
from services.submission.core import SubmissionCore
from tests.helpers import Feed, accepted, node

GiB = 2**30


# ----------------------------------------------------------------------------------- host lists


def test_host_lists_expand_as_slurm_writes_them():
    assert expand("node[01-04,07],gpu-1") == ["node01", "node02", "node03", "node04", "node07", "gpu-1"]
    assert expand("n[8-11]") == ["n8", "n9", "n10", "n11"]  # no padding unless the low end has it
    assert expand("rack[1-2]-n[1-2]") == ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]
    assert expand("a,a,b") == ["a", "b"]
    assert compress(expand("node[01-04,07],gpu-1")) == "gpu-1,node[01-04,07]"
    for bad, words in (("n[1-", "not closed"), ("n[4-2]", "goes down"), ("n[x]", "not a number"),
                       ("n[0-99999999]", "more than")):
        with pytest.raises(HostlistError, match=words):
            expand(bad)


def test_a_node_pattern_takes_host_lists_globs_and_all():
    p = NodePattern(["node[01-02]", "gpu-*"])
    assert [p.matches(n) for n in ("node01", "node03", "gpu-x", "cpu-1")] == [True, False, True, False]
    assert NodePattern(["ALL"]).matches("anything") and NodePattern(["*"]).matches("x")


# ----------------------------------------------------------------------------------- the fold


def part(name: str, nodes: list[str] | None = None, **kw) -> c.PartitionConfigured:
    return c.PartitionConfigured(name=name, nodes=["ALL"] if nodes is None else nodes, **kw)


def test_the_scheduler_answers_a_partition_it_cannot_apply_and_no_fold_applies_it():
    f = Feed(SchedulingCore())
    f.admin("partition", part("bad", ["n[1-"]))
    f.admin("partition", part("p", profile="fast"))  # no such profile yet
    f.admin("profile", c.ProfileConfigured(name="fast"))
    f.admin("partition", part("p", profile="fast", max_time_s=60, default_time_s=120))
    f.admin("partition", part("p", profile="fast", max_time_s=60, default=True))
    f.admin("partition", part("gone", removed=True))
    f.admin("partition-policy", c.PartitionPolicyConfigured(unknown="maybe"))
    out = f.settle()
    reasons = {e.request_seq: (e.verb, e.reason) for e in out if isinstance(e, c.ConfigRejected)}
    assert reasons == {
        1: ("partition", "nodes: 'n[1-': '[' is not closed"),
        2: ("partition", "profile: 'fast' is not a configured placement profile (profiles: default); configure it "
                         "first: horizon profile set fast"),
        4: ("partition", "default_time_s: 2:00 is above the partition's max_time_s 1:00"),
        6: ("partition", "name: no partition 'gone' to remove"),
        7: ("partition-policy", "unknown: 'maybe' is not one of default, reject"),
    }
    assert f.state.partitions.names() == ["p"] and f.state.partitions.default == "p"


def test_membership_follows_the_nodes_and_their_labels():
    p = Partitions()
    admin = "horizon.in._admin.partition"
    for n in ("cpu-01", "cpu-02", "gpu-01"):
        p.apply(msgspec.structs.replace(node(n), labels={"kind": n[:3]}), "horizon.evt.agent.NodeRegistered." + n)
    assert p.apply(part("gpu", ["gpu-[01-04]"]), admin) is None
    assert p.apply(part("cpu", [], node_labels={"kind": "cpu"}), admin) is None
    assert p.apply(part("all", default=True), admin) is None
    assert p.members("gpu") == ("gpu-01",) and p.members("cpu") == ("cpu-01", "cpu-02")
    assert p.memberships()["gpu-01"] == frozenset({"gpu", "all"})
    p.apply(node("gpu-02"), "horizon.evt.agent.NodeRegistered.gpu-02")  # registers later: joins
    assert p.members("gpu") == ("gpu-01", "gpu-02") and p.view("gpu").nodes == {"gpu-01", "gpu-02"}
    p.apply(c.NodeRemoved(node="gpu-01"), "horizon.evt.inventory.NodeRemoved.gpu-01")
    assert p.members("gpu") == ("gpu-02",)
    assert p.view("nope") is not None and not p.view("nope").exists and p.view("") is None
    assert p.apply(part("evil"), "horizon.in.acme.partition") is not None  # only an operator configures them


# ----------------------------------------------------------------------------------- admission


def cluster(f: Feed) -> None:
    """Two CPU nodes and two 8-GPU nodes, a stock pair of partitions: main (default, all) and gpu."""
    for n in ("cpu-01", "cpu-02"):
        f.evt("agent", node(n, gpus=0, cpus=32, memory=128 * GiB))
    for n in ("gpu-01", "gpu-02"):
        f.evt("agent", node(n, gpus=8, cpus=64))
    f.admin("partition", part("main", default=True))
    f.admin("partition", part("gpu", ["gpu-[01-02]"]))


def submit(job_id: str, tenant: str = "acme", **kw) -> c.JobSubmitted:
    kw.setdefault("command", ["true"])
    return c.JobSubmitted(job_id=job_id, tenant=tenant, **kw)


def verdict(f: Feed, sub: c.JobSubmitted) -> c.Event:
    f.input(sub.tenant, "submit", sub)
    out = [e for e in f.settle() if isinstance(e, (c.JobAccepted, c.JobRejected))]
    assert len(out) == 1, out
    return out[0]


def test_a_job_gets_the_default_partition_or_the_one_it_names():
    f = Feed(SubmissionCore())
    cluster(f)
    plain = verdict(f, submit("plain"))
    assert isinstance(plain, c.JobAccepted) and plain.spec.partition == "main" and plain.warnings == []
    gpu = verdict(f, submit("g", partitions=["gpu"], resources=c.ResourceRequest(gpus=2)))
    assert gpu.spec.partition == "gpu" and gpu.warnings == []


def test_an_unknown_partition_runs_in_the_default_one_with_a_warning_or_is_refused_by_the_rule():
    f = Feed(SubmissionCore())
    cluster(f)
    a = verdict(f, submit("a", partitions=["gpu_a100"]))
    assert isinstance(a, c.JobAccepted) and a.spec.partition == "main"
    assert a.warnings == ["partition 'gpu_a100' is not defined here; the job runs in 'main'"]
    b = verdict(f, submit("b", partitions=["debug", "gpu"]))  # a known one listed: it is taken
    assert b.spec.partition == "gpu" and b.warnings == ["partition 'debug' is not defined here; the job runs in 'gpu'"]
    f.admin("partition-policy", c.PartitionPolicyConfigured(unknown="reject"))
    r = verdict(f, submit("r", partitions=["nonexistent"]))
    assert isinstance(r, c.JobRejected) and r.field == "partitions"
    assert r.reason == "partitions: invalid partition specified: 'nonexistent' (partitions here: gpu, main)"


def test_without_partitions_a_job_runs_anywhere_and_a_named_one_gets_a_warning():
    f = Feed(SubmissionCore())
    f.evt("agent", node("n1"))
    plain = verdict(f, submit("plain"))
    assert plain.spec.partition == "" and plain.warnings == [] and plain.spec.memory_bytes == GiB
    named = verdict(f, submit("named", partitions=["gpu"]))
    assert named.spec.partition == "" and named.warnings == [
        "partition 'gpu' is not defined here (this cluster defines no partitions); the job runs on any node"]
    f.admin("partition-policy", c.PartitionPolicyConfigured(unknown="reject"))
    assert isinstance(verdict(f, submit("strict", partitions=["gpu"])), c.JobRejected)


def test_a_partitions_defaults_apply_only_where_the_job_gave_nothing():
    f = Feed(SubmissionCore())
    cluster(f)
    f.admin("partition", part("main", default=True, default_time_s=600, max_time_s=3600,
                              default_mem_per_cpu=2 * GiB, default_mem_per_gpu=10 * GiB))
    cpu = verdict(f, submit("cpu", resources=c.ResourceRequest(cpus=4, memory=None)))
    assert (cpu.spec.time_limit_s, cpu.spec.memory_bytes) == (600.0, 8 * GiB)
    half = verdict(f, submit("half", resources=c.ResourceRequest(cpus="500m", memory=None)))
    assert half.spec.memory_bytes == GiB  # in proportion to the CPUs
    gpu = verdict(f, submit("gpu", resources=c.ResourceRequest(cpus=4, gpus=2, memory=None)))
    assert gpu.spec.memory_bytes == 20 * GiB  # per GPU for a job with GPUs
    given = verdict(f, submit("given", time_limit_s=60, resources=c.ResourceRequest(cpus=4, memory="3Gi")))
    assert (given.spec.time_limit_s, given.spec.memory_bytes) == (60.0, 3 * GiB)
    old = verdict(f, submit("old", resources=c.ResourceRequest(cpus=4)))  # an old client's default: 1 GiB
    assert old.spec.memory_bytes == GiB
    f.admin("partition", part("long", max_time_s=7200))
    assert verdict(f, submit("max", partitions=["long"])).spec.time_limit_s == 7200.0  # no DefaultTime: MaxTime


@pytest.mark.parametrize(("config", "job", "field", "words"), [
    ({"max_time_s": 3600}, {"time_limit_s": 7200}, "time_limit_s",
     "2:00:00 is above partition 'debug''s time limit of 1:00:00 (MaxTime)"),
    ({"max_nodes": 1}, {"nodes": 2}, "nodes", "2 nodes is above partition 'debug''s limit of 1 (MaxNodes)"),
    ({"allowed_accounts": ["physics"]}, {"account": "chem"}, "account",
     "account 'chem' may not use partition 'debug' (AllowAccounts: physics)"),
    ({"allowed_qos": ["high"]}, {}, "qos", "QOS 'normal' may not use partition 'debug' (AllowQos: high)"),
    ({"state": "drain"}, {}, "partitions", "partition 'debug' is draining: it takes no new jobs"),
    ({"nodes": ["cpu-[01-02]"]}, {"resources": c.ResourceRequest(gpus=1)}, "resources.gpus",
     "partition 'debug' (2 nodes): no registered node has GPUs"),
])
def test_a_partitions_limits_refuse_a_job_naming_the_partition_and_the_limit(config, job, field, words):
    f = Feed(SubmissionCore())
    cluster(f)
    f.admin("partition", part("debug", **config))
    out = verdict(f, submit("j", partitions=["debug"], **job))
    assert isinstance(out, c.JobRejected) and out.field == field and words in out.reason, out


def test_of_a_b_the_first_that_can_run_it_is_taken_and_none_names_each():
    f = Feed(SubmissionCore())
    cluster(f)
    f.admin("partition", part("short", max_time_s=600))
    ok = verdict(f, submit("ok", partitions=["short", "gpu"], time_limit_s=3600))
    assert ok.spec.partition == "gpu"
    no = verdict(f, submit("no", partitions=["short", "gpu"], time_limit_s=3600, nodes=3))
    assert isinstance(no, c.JobRejected) and no.field == "partitions"
    assert no.reason.startswith("partitions: no partition of short,gpu can run it: time_limit_s: 1:00:00 is above "
                                "partition 'short''s time limit of 10:00")
    assert "nodes: partition 'gpu' (2 nodes): 3 nodes of" in no.reason


def test_a_down_partition_takes_jobs_that_wait_with_a_warning_and_a_profile_comes_with_it():
    f = Feed(SubmissionCore())
    cluster(f)
    f.admin("profile", c.ProfileConfigured(name="packed", backfill="conservative"))
    f.admin("partition", part("big", state="down", profile="packed"))
    out = verdict(f, submit("j", partitions=["big"]))
    assert out.spec.partition == "big" and out.spec.profile == "packed"
    assert out.warnings == ["partition 'big' is down: the job waits until an operator brings it up"]
    own = verdict(f, submit("own", partitions=["big"], profile="default"))
    assert own.spec.profile == "packed"  # "default" is no choice of the job's
    f.admin("profile", c.ProfileConfigured(name="mine"))
    assert verdict(f, submit("mine", partitions=["big"], profile="mine")).spec.profile == "mine"


def test_a_cluster_without_a_default_partition_refuses_a_job_that_names_none():
    f = Feed(SubmissionCore())
    f.evt("agent", node("n1"))
    f.admin("partition", part("a"))
    out = verdict(f, submit("j"))
    assert isinstance(out, c.JobRejected)
    assert out.reason == "partitions: no partition named, and this cluster has no default partition; name one of: a"


# ----------------------------------------------------------------------------------- placement


def cycle(n: int, candidates: list[str]) -> c.SchedulingCycleCompleted:
    return c.SchedulingCycleCompleted(id=f"scheduling/SchedulingCycleCompleted/{n}", cycle=n, candidates=candidates,
                                      queued=len(candidates), correlation_id=str(n), source="scheduling", basis_seq=1)


def placement_feed() -> Feed:
    f = Feed(PlacementCore())
    for n in ("a1", "a2", "b1", "b2"):  # four identical nodes: only their partitions tell them apart
        f.evt("agent", node(n, gpus=8))
        f.evt("inventory", c.NodeReady(node=n, basis_seq=1))
    f.admin("partition", part("a", ["a[1-2]"]))
    f.admin("partition", part("b", ["b*"]))
    return f


def test_a_job_runs_only_on_its_partitions_nodes():
    f = placement_feed()
    f.evt("submission", accepted("in-b", gpus=8, partition="b"))
    f.evt("submission", accepted("in-b-2", gpus=8, partition="b"))
    f.evt("submission", accepted("in-b-3", gpus=8, partition="b"))
    f.evt("submission", accepted("anywhere", gpus=8))
    f.evt("scheduling", cycle(1, ["in-b", "in-b-2", "in-b-3", "anywhere"]))
    out = f.settle()
    placed = {e.job_id: e.allocations[0].node for e in out if isinstance(e, c.JobScheduled)}
    assert placed == {"in-b": "b1", "in-b-2": "b2", "anywhere": "a1"}
    [blocked] = [e for e in out if isinstance(e, c.PlacementBlocked)]
    assert blocked.job_id == "in-b-3" and not blocked.fits_nowhere
    assert [(r.filter, r.nodes, r.reason) for r in blocked.reasons] == [
        ("GpuFree", 2, "too few free GPUs (needs 8)"), ("Partition", 2, "not in partition b")]


def test_a_down_or_removed_partition_holds_its_jobs_as_fitting_nowhere():
    f = placement_feed()
    f.admin("partition", part("a", ["a[1-2]"], state="down"))
    f.evt("submission", accepted("in-a", gpus=1, partition="a"))
    f.evt("submission", accepted("lost", gpus=1, partition="gone"))
    f.evt("scheduling", cycle(1, ["in-a", "lost"]))
    out = f.settle()
    why = {e.job_id: (e.fits_nowhere, [r.reason for r in e.reasons]) for e in out if isinstance(e, c.PlacementBlocked)}
    assert why == {"in-a": (True, ["not in partition a", "partition a is down"]),
                   "lost": (True, ["partition gone is not defined (removed since the job was accepted)"])}


# ----------------------------------------------------------------------------------- tiers


def test_a_higher_tiers_jobs_go_first_and_equal_tiers_change_nothing():
    def order(tiers: dict[str, int]) -> list[str]:
        f = Feed(SchedulingCore())
        f.evt("agent", node("n1"))
        for name, tier in tiers.items():
            f.admin("partition", part(name, priority_tier=tier))
        f.evt("submission", accepted("low-crit", priority_class="critical", partition="low"))
        f.evt("submission", accepted("high-norm", partition="high"))
        f.evt("submission", accepted("none"))
        f.evt("submission", accepted("high-crit", priority_class="critical", partition="high"))
        [cyc] = f.settle()
        return cyc.candidates

    plain = order({})
    assert plain == ["low-crit", "high-crit", "high-norm", "none"]
    assert order({"low": 1, "high": 1}) == order({"low": 0, "high": 0}) == plain
    assert order({"low": 1, "high": 2}) == ["high-crit", "high-norm", "low-crit", "none"]


# ----------------------------------------------------------------------------------- snapshots and replay


def test_a_scheduling_snapshot_keeps_the_partitions():
    core = SchedulingCore()
    f = Feed(core)
    f.evt("agent", msgspec.structs.replace(node("gpu-1"), labels={"x": "y"}))
    f.admin("partition", part("p", ["gpu-*"], default=True, priority_tier=3))
    f.admin("partition-policy", c.PartitionPolicyConfigured(unknown="reject"))
    restored = core.load(core.dump(f.state))
    assert restored is not None
    p, q = f.state.partitions, restored.partitions
    assert (q.names(), q.default, q.unknown, q.members("p"), q.tier("p")) == (["p"], "p", "reject", ("gpu-1",), 3)
    assert p.data() == q.data()


def test_admission_replays_to_the_same_verdicts():
    from services.runtime.service import fold_record

    f = Feed(SubmissionCore())
    cluster(f)
    f.admin("partition", part("main", default=True, default_mem_per_cpu=GiB))
    for i, parts in enumerate((["gpu"], ["x"], [], ["gpu", "main"])):
        f.input("acme", "submit", submit(f"j{i}", partitions=parts, resources=c.ResourceRequest(memory=None)))
    inputs = list(f.records)
    first = f.settle()
    core = SubmissionCore()
    state = core.initial()
    for record in inputs:
        state, _, _ = fold_record(core, state, record)
    assert [msgspec.json.encode(e) for e in core.decide(state)] == [msgspec.json.encode(e) for e in first]
    assert [e.spec.partition for e in first] == ["gpu", "main", "main", "gpu"]


# ----------------------------------------------------------------------------------- horizon up's own


def test_a_stock_up_has_main_and_by_the_kinds_of_its_nodes_gpu_and_cpu():
    from services.nodes.spec import local_nodes
    from services.front.host.partitions import stock_partitions

    only_gpus = stock_partitions(local_nodes(3, gpus_per_node=4))
    assert [(p.name, p.nodes, p.default) for p in only_gpus] == [("main", ["ALL"], True),
                                                                ("gpu", ["node-[00-02]"], False)]
    mixed = stock_partitions(local_nodes(2, gpus_per_node=8, prefix="g") + local_nodes(3, gpus_per_node=0, prefix="c"))
    assert [(p.name, p.nodes) for p in mixed] == [("main", ["ALL"]), ("gpu", ["g-[00-01]"]), ("cpu", ["c-[00-02]"])]
    assert [p.name for p in stock_partitions(local_nodes(2, gpus_per_node=0))] == ["main"]


def test_sinfo_groups_a_partitions_nodes_by_state_default_first():
    from services.front.slurm.sinfo_format import DEFAULT_FORMAT, NODE_FORMAT, sinfo_lines, sinfo_rows

    parts = [{"name": "gpu", "default": False, "state": "down", "max_time_s": 7200.0, "members": ["n2", "n3"]},
             {"name": "main", "default": True, "state": "up", "max_time_s": None, "members": ["n1", "n2", "n3"]}]
    nodes = [{"node": "n1", "state": "idle"}, {"node": "n2", "state": "mixed"}, {"node": "n3", "state": "lost"}]
    assert sinfo_lines(sinfo_rows(parts, nodes), DEFAULT_FORMAT) == [
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST",
        "main*     up      infinite      1   idle n1",
        "main*     up      infinite      1    mix n2",
        "main*     up      infinite      1  down* n3",
        "gpu       down     2:00:00      1    mix n2",
        "gpu       down     2:00:00      1  down* n3"]
    assert sinfo_lines(sinfo_rows(parts, nodes, node_oriented=True), NODE_FORMAT, header=False)[:2] == [
        "n1      1 main*     idle", "n2      1 main*     mix"]
    assert sinfo_lines(sinfo_rows([], nodes, summarize=True), "%P %D %F") == ["PARTITION NODES NODES(A/I/O/T)",
                                                                              "N/A 3 1/1/1/3"]


def test_a_preemptor_of_a_partition_preempts_only_on_its_nodes():
    from services.preemption.core import PreemptionCore
    from tests.services.test_preemption import _running

    f = Feed(PreemptionCore())
    for name in ("a1", "b1"):
        f.evt("agent", node(name, gpus=8))
        f.evt("inventory", c.NodeReady(node=name, basis_seq=1))
    f.admin("partition", part("a", ["a1"]))
    f.admin("partition", part("b", ["b1"]))
    _running(f, "on-a", "a1", 0, 8, priority_class="low", dt=10_000.0)  # dear
    _running(f, "on-b", "b1", 0, 8, priority_class="low")  # cheap, but outside the preemptor's partition
    f.evt("submission", accepted("anywhere", gpus=8, priority_class="critical"))
    f.evt("submission", accepted("in-a", gpus=8, priority_class="critical", partition="a"))
    assert f.core.plan(f.state, "anywhere").victims == ["on-b"]
    plan = f.core.plan(f.state, "in-a")
    assert (plan.victims, plan.nodes) == (["on-a"], ["a1"])


async def test_an_older_jobs_database_gets_the_partition_column(tmp_path):
    import aiosqlite

    from projections.jobs import JobsProjection

    path = tmp_path / "jobs.sqlite"
    async with aiosqlite.connect(path) as db:  # the table as it was before partitions
        await db.execute("CREATE TABLE jobs (job_id TEXT PRIMARY KEY, tenant TEXT, account TEXT, user TEXT, name TEXT, "
                         "state TEXT NOT NULL, priority_class TEXT, class_rank INTEGER, cpus_milli INTEGER, "
                         "memory_bytes INTEGER, gpus INTEGER, gpu_type TEXT, nodes INTEGER, tasks_per_node INTEGER, "
                         "time_limit_s REAL, attempt INTEGER NOT NULL DEFAULT 0, node TEXT, allocation TEXT, "
                         "submitted_ts REAL, accepted_seq INTEGER, scheduled_ts REAL, started_ts REAL, ended_ts REAL, "
                         "exit_code INTEGER, reason TEXT, spec BLOB, updated_seq INTEGER NOT NULL)")
        await db.execute("INSERT INTO jobs (job_id, state, updated_seq) VALUES ('old', 'SUCCEEDED', 1)")
        await db.commit()
    projection = JobsProjection(None, path)  # type: ignore[arg-type]
    await projection.open()
    try:
        body = await projection.query_jobs()
        assert [(r["job_id"], r["partition"]) for r in body["jobs"]] == [("old", None)]
        assert (await projection.query_jobs(partition="main"))["jobs"] == []
    finally:
        await projection.stop()


def test_a_partition_name_that_is_no_name_is_refused():
    f = Feed(SubmissionCore())
    cluster(f)
    out = verdict(f, submit("j", partitions=["gpu", "a/b"]))  # a dot is Slurm's (test.q): a slash is no name
    assert isinstance(out, c.JobRejected) and out.field == "partitions[1]"
    assert out.reason == "partitions[1]: 'a/b' is not a partition name (1-128 letters, digits, '_', '-' or '.')"
