"""Refuse what can never run (issue 16): a job no registered node could ever hold is rejected at
once, naming the resource and the largest node's; an empty command is rejected. The pure core,
fed node events and submissions as the log would."""

from __future__ import annotations

import time

import pytest

from events import catalogue as c
from services.submission.capacity import Capacity, Need, Shape
from services.submission.core import SubmissionCore
from tests.helpers import Feed, node


def cluster(*nodes: c.NodeRegistered) -> Feed:
    f = Feed(SubmissionCore())
    for n in nodes:
        f.evt("agent", n)
    return f


def four_nodes() -> Feed:
    """4 nodes of 8 a100 (80Gi each), 64 CPUs, 512Gi."""
    return cluster(*(node(f"n{i}") for i in range(4)))


def job(job_id: str, **kw) -> c.JobSubmitted:
    kw.setdefault("command", ["train.py"])
    resources = kw.pop("resources", c.ResourceRequest(gpus=1))
    return c.JobSubmitted(job_id=job_id, tenant="acme", resources=resources, **kw)


def verdict(f: Feed, sub: c.JobSubmitted) -> c.Event:
    f.input("acme", "submit", sub)
    out = f.settle()
    assert out, "no verdict"
    return out[0]


def rejected(f: Feed, sub: c.JobSubmitted) -> c.JobRejected:
    v = verdict(f, sub)
    assert isinstance(v, c.JobRejected), v
    assert v.reason.startswith(f"{v.field}: ")
    return v


@pytest.mark.parametrize(
    ("kw", "field", "reason"),
    [
        ({"resources": c.ResourceRequest(gpus=99)}, "resources.gpus",
         "resources.gpus: 99 GPUs per node (99 per task x 1 task per node) is more than any node has: "
         "the largest has 8 a100 GPUs"),
        ({"resources": c.ResourceRequest(gpus=16)}, "resources.gpus", "the largest has 8 a100 GPUs"),
        # 3 per task x 3 tasks: 9 on one node
        ({"resources": c.ResourceRequest(gpus=3), "tasks_per_node": 3}, "resources.gpus",
         "9 GPUs per node (3 per task x 3 tasks per node) is more than any node has"),
        ({"resources": c.ResourceRequest(gpus=1), "nodes": 10}, "nodes",
         "nodes: 10 nodes of 1 GPU, 1 CPU and 1Gi memory each; only 4 registered nodes could hold one"),
        ({"resources": c.ResourceRequest(cpus=1000)}, "resources.cpus",
         "resources.cpus: 1000 CPUs per node (1000 per task x 1 task per node) is more than any node has: "
         "the largest has 64 CPUs"),
        ({"resources": c.ResourceRequest(memory="999999Ti")}, "resources.memory",
         "resources.memory: 976.6Pi memory per node (976.6Pi per task x 1 task per node) is more than any "
         "node has: the largest has 512Gi"),  # 999999Ti, as format_memory writes it
        ({"resources": c.ResourceRequest(gpus=1, gpu_memory="100Gi")}, "resources.gpu_memory",
         "resources.gpu_memory: 100Gi per GPU is more than any GPU has: the largest has 80Gi"),
        ({"resources": c.ResourceRequest(cpus=40), "tasks_per_node": 2}, "resources.cpus",
         "80 CPUs per node (40 per task x 2 tasks per node)"),
    ],
)
def test_what_no_node_could_ever_hold_is_rejected_naming_the_largest_node(kw, field, reason):
    f = four_nodes()
    v = rejected(f, job("big", **kw))
    assert v.field == field
    assert reason in v.reason


def test_what_fits_exactly_is_accepted():
    f = four_nodes()
    for i, kw in enumerate([{"resources": c.ResourceRequest(gpus=8, cpus=64, memory="512Gi")},
                            {"resources": c.ResourceRequest(gpus=2), "tasks_per_node": 4, "nodes": 4},
                            {"resources": c.ResourceRequest(gpus=1, gpu_memory="80Gi")},
                            {"resources": c.ResourceRequest(cpus=1), "nodes": 4}]):
        assert isinstance(verdict(f, job(f"ok{i}", **kw)), c.JobAccepted), kw


def test_gpus_of_another_model_or_variant_do_not_count():
    f = cluster(node("a", gpus=8, gpu_type="a100", variant="40gb"), node("h", gpus=4, gpu_type="h100"))
    v = rejected(f, job("h8", resources=c.ResourceRequest(gpus=8, gpu_type="h100")))
    assert v.field == "resources.gpus" and v.reason.endswith("the largest has 4 h100 GPUs")
    v = rejected(f, job("any9", resources=c.ResourceRequest(gpus=9)))  # any model: the a100 node has most
    assert v.reason.endswith("the largest has 8 a100-40gb GPUs")
    assert isinstance(verdict(f, job("any8", resources=c.ResourceRequest(gpus=8))), c.JobAccepted)
    v = rejected(f, job("two", resources=c.ResourceRequest(gpus=4, gpu_type="h100"), nodes=2))
    assert v.field == "nodes" and v.reason == (
        "nodes: 2 nodes of 4 h100 GPUs, 1 CPU and 1Gi memory each; only 1 registered node could hold one")


def test_resources_each_on_some_node_but_never_together():
    f = cluster(node("gpu", gpus=8, cpus=16), node("fat", gpus=0, cpus=128))
    v = rejected(f, job("both", resources=c.ResourceRequest(gpus=8, cpus=64)))
    assert v.field == "resources"
    assert v.reason.startswith("resources: 8 GPUs, 64 CPUs and 1Gi memory per node: no node has all of it at once")
    assert "16 CPUs, 512Gi memory, 8 GPUs (8 a100) (1 node)" in v.reason
    assert "128 CPUs, 512Gi memory, no GPUs (1 node)" in v.reason


def test_a_job_that_fits_a_cordoned_draining_or_lost_node_is_accepted():
    """It can run later: only a removed node stops counting."""
    f = cluster(node("up", gpus=4), node("big", gpus=8))
    f.evt("inventory", c.NodeCordoned(node="big", reason="maintenance"))
    assert isinstance(verdict(f, job("c1", resources=c.ResourceRequest(gpus=8))), c.JobAccepted)
    f.evt("inventory", c.NodeDraining(node="big"))
    f.evt("inventory", c.NodeLost(node="big", reason="no heartbeat"))
    assert isinstance(verdict(f, job("c2", resources=c.ResourceRequest(gpus=8))), c.JobAccepted)


def test_a_removed_node_no_longer_counts_and_one_registered_again_does():
    f = cluster(node("up", gpus=4), node("big", gpus=8))
    f.evt("inventory", c.NodeRemoved(node="big", reason="decommissioned"))
    v = rejected(f, job("r1", resources=c.ResourceRequest(gpus=8)))
    assert v.reason.endswith("the largest has 4 a100 GPUs")
    f.evt("agent", node("big", gpus=8))  # re-added
    assert isinstance(verdict(f, job("r2", resources=c.ResourceRequest(gpus=8))), c.JobAccepted)
    f.evt("agent", node("big", gpus=2))  # the agent restarted and found fewer GPUs: what it registers now
    v = rejected(f, job("r3", resources=c.ResourceRequest(gpus=8)))
    assert v.reason.endswith("the largest has 4 a100 GPUs")


def test_a_model_only_removed_nodes_had_is_named():
    f = cluster(node("a", gpus=8, gpu_type="a100"), node("h", gpus=8, gpu_type="h100"))
    f.evt("inventory", c.NodeRemoved(node="h"))
    v = rejected(f, job("h", resources=c.ResourceRequest(gpus=1, gpu_type="h100")))
    assert v.field == "resources.gpu_type"
    assert v.reason == "resources.gpu_type: no registered node has h100 GPUs; the nodes have a100"
    f.evt("inventory", c.NodeRemoved(node="a"))
    f.evt("agent", node("cpu", gpus=0))
    v = rejected(f, job("g", resources=c.ResourceRequest(gpus=1)))
    assert v.reason == "resources.gpus: no registered node has GPUs"


def test_broken_gpus_still_count():
    """A GPU with a health problem is repaired or replaced; the job waits for it (as placement's
    GpuCapacity counts it), it is not impossible."""
    registered = node("n", gpus=8)
    broken = [d if i < 6 else c.GpuDevice(id=d.id, type=d.type, memory_bytes=d.memory_bytes, health="XID 79")
              for i, d in enumerate(registered.gpus)]
    f = cluster(c.NodeRegistered(node="n", cpus_milli=64000, memory_bytes=2**39, gpus=broken))
    assert isinstance(verdict(f, job("eight", resources=c.ResourceRequest(gpus=8))), c.JobAccepted)


def test_with_no_node_registered_nothing_is_judged_yet():
    """A cluster starting: the agents have not registered. A CPU job is accepted and waits (as
    before); GPUs are refused by the vocabulary check unless the core knows the models."""
    f = Feed(SubmissionCore())
    assert isinstance(verdict(f, job("cpu", resources=c.ResourceRequest(cpus=1000))), c.JobAccepted)
    v = rejected(f, job("gpu", resources=c.ResourceRequest(gpus=99)))
    assert v.reason == "resources.gpus: no node with GPUs is registered in this cluster"
    f = Feed(SubmissionCore(gpu_vocabulary=("a100",)))
    assert isinstance(verdict(f, job("gpu", resources=c.ResourceRequest(gpus=99))), c.JobAccepted)
    f.evt("agent", node("n0"))  # the first node registers: from now on it is judged
    v = rejected(f, job("gpu2", resources=c.ResourceRequest(gpus=99)))
    assert v.field == "resources.gpus"


def test_an_array_is_judged_once_and_rejected_as_one():
    f = four_nodes()
    v = rejected(f, job("sweep", array="0-9999", resources=c.ResourceRequest(gpus=9)))
    assert v.job_id == "sweep" and v.field == "resources.gpus"
    f.input("acme", "submit", job("ok", array="0-9999", resources=c.ResourceRequest(gpus=8)))
    out = f.settle()
    assert len(out) == 10_000 and all(isinstance(e, c.JobAccepted) for e in out)


def test_an_empty_command_is_rejected_unless_the_job_is_simulated_or_has_a_payload():
    f = four_nodes()
    v = rejected(f, job("empty", command=[]))
    assert (v.field, v.reason) == ("command", "command: is empty: give the command to run")
    v = rejected(f, job("blank", command=[""]))
    assert v.field == "command"
    assert isinstance(verdict(f, job("sim", command=[], sim_runtime_s=5)), c.JobAccepted)
    assert isinstance(verdict(f, job("ext", command=[], payload={"task": "resize"})), c.JobAccepted)


def test_check_answers_what_the_leader_decides():
    """``horizon submit --check`` (validator_pool.py) calls ``admit`` on the same fold: the same reason."""
    from services.submission.normalise import Rejection, admit

    f = four_nodes()
    sub = job("big", resources=c.ResourceRequest(gpus=99))
    with pytest.raises(Rejection) as err:
        admit(sub, subject_tenant="acme", gpu_models=f.state.gpu_models, capacity=f.state.capacity)
    assert str(err.value) == rejected(f, sub).reason


# ---------------------------------------------------------------- the fold itself


def test_thousands_of_nodes_fold_into_a_few_shapes_and_a_verdict_is_remembered():
    cap = Capacity()
    for i in range(3000):
        cap.apply(node(f"n{i:04d}", gpus=8 if i % 3 else 4))
    assert len(cap.nodes) == 3000 and sorted(cap.shapes.values()) == [1000, 2000]
    need = Need(1000, 2**30, 8, None, None, 0, 2001, 1)
    assert cap.problem(need) == ("nodes", "2001 nodes of 8 GPUs, 1 CPU and 1Gi memory each; only 2000 registered "
                                          "nodes could hold one")
    started = time.perf_counter()
    for _ in range(10_000):
        cap.problem(need)
    assert time.perf_counter() - started < 0.5  # a dictionary lookup each, not a scan of 3,000 nodes
    cap.apply(c.NodeRemoved(node="n0001"))
    assert sorted(cap.shapes.values()) == [1000, 1999]
    cap.apply(c.NodeRemoved(node="n0001"))  # twice: nothing more
    assert len(cap.nodes) == 2999


def test_shapes_are_judged_in_one_order_whatever_order_the_nodes_came_in():
    a, b = Capacity(), Capacity()
    nodes = [node("x", gpus=8, cpus=16), node("y", gpus=0, cpus=128), node("z", gpus=4, gpu_type="h100")]
    for n in nodes:
        a.apply(n)
    for n in reversed(nodes):
        b.apply(n)
    need = Need(64000, 2**30, 8, None, None, 0, 1, 1)
    assert a.problem(need) == b.problem(need) and a.problem(need)[0] == "resources"
    assert [s for s, _ in a.sorted_shapes()] == sorted(Shape.of(n) for n in nodes)


# ---------------------------------------------------------------- through the CLI, against the services


@pytest.mark.timeout(120)
async def test_the_cli_is_refused_what_no_node_could_ever_run_and_told_why(running_horizon):
    """`horizon submit` against a live stack of 4 nodes x 8 GPUs: --gpus 99, --nodes 10, an empty command
    and `--check --gpus 99` all fail (exit 1, or 2 for the CLI's own usage error) naming the limit;
    what fits is accepted; and the log replays to the same decisions."""
    from services.nodes.spec import local_nodes
    from tests.e2e import assert_replays, horizon

    h = await running_horizon(nodes=local_nodes(4, gpus_per_node=8), executor="sim")
    url = h.url
    code, out, err = await horizon(url, "submit", "--job-id", "g99", "--gpus", "99", "--", "train.py")
    assert code == 1 and "Traceback" not in err, err
    assert ("resources.gpus: 99 GPUs per node (99 per task x 1 task per node) is more than any node has: "
            "the largest has 8 a100 GPUs") in err
    code, out, err = await horizon(url, "submit", "--job-id", "n10", "--gpus", "1", "--nodes", "10", "--",
                                   "train.py")
    assert code == 1 and ("nodes: 10 nodes of 1 GPU, 1 CPU and 1Gi memory each; only 4 registered nodes could "
                          "hold one") in err, err
    code, out, err = await horizon(url, "submit", "--job-id", "c1k", "--cpus", "1000", "--", "train.py")
    assert code == 1 and "resources.cpus: 1000 CPUs per node" in err and "the largest has" in err, err
    code, out, err = await horizon(url, "submit", "--check", "--gpus", "99", "--", "train.py")
    assert code == 1 and "would be rejected: resources.gpus: 99 GPUs per node" in err, err
    assert "the largest has 8 a100 GPUs" in err and "would be accepted" not in out
    code, out, err = await horizon(url, "submit", "--job-id", "empty", "--gpus", "1")
    assert code == 2 and "give the command to run" in err, err  # the CLI refuses it before publishing
    code, out, err = await horizon(url, "submit", "--job-id", "g8", "--gpus", "8", "--nodes", "4",
                                   "--sim-runtime", "0.1", "--", "train.py")
    assert code == 0, err
    await h.stop()
    records = await h.records()
    verdicts = {}
    for record in records:
        if ".JobRejected." in record.subject or ".JobAccepted." in record.subject:
            verdicts[record.subject.rsplit(".", 1)[1]] = record.subject.split(".")[3]
    assert verdicts == {"g99": "JobRejected", "n10": "JobRejected", "c1k": "JobRejected", "g8": "JobAccepted"}
    assert_replays(records)


@pytest.mark.timeout(60)
async def test_a_client_publishing_an_empty_command_is_rejected(running_horizon):
    """Another language's client is not the CLI: its empty command reaches submission, which refuses it."""
    from services.nodes.spec import local_nodes
    from tests.e2e import job_json, wait_until

    h = await running_horizon(nodes=local_nodes(1, gpus_per_node=8), executor="sim")
    tally, js = h.tally, h.js
    await js.publish("horizon.in.acme.submit", job_json("blank", resources={"gpus": 1}),
                     headers={"Nats-Msg-Id": "blank"})
    await js.publish("horizon.in.acme.submit", job_json("sim", resources={"gpus": 1}, sim_runtime_s=0.1),
                     headers={"Nats-Msg-Id": "sim"})
    await wait_until(lambda: tally.has("JobRejected", "blank") and tally.has("JobSucceeded", "sim"), 20,
                     "the verdicts")
    blank = tally.last[("JobRejected", "blank")]
    assert (blank["field"], blank["reason"]) == ("command", "command: is empty: give the command to run")
    await h.stop()
