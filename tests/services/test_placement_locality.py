"""Placement's ``locality`` and ``cost`` scores (services/domain/fit/scores/data.py): the worked
arithmetic, the node events that say what a node holds (inventory's answer to ``add-datasets`` /
``remove-datasets``), gangs scored node by node, and replay of the decisions."""

from __future__ import annotations

import msgspec
import pytest

from events import catalogue as c
from services.domain.cluster import Cluster, request_of
from services.domain.fit.context import Context
from services.domain.fit.cycle import Overlay
from services.domain.fit.framework import DEFAULT_WEIGHTS
from services.domain.fit.node import fit_node
from services.domain.fit.profile import Profile
from services.domain.fit.scores.data import price_score
from services.inventory.core import InventoryCore
from services.placement.core import PlacementCore
from services.runtime.replay import replay_decisions
from tests.helpers import Feed, accepted, node, placement_cycle, ready


def _priced(name: str, gpus: int = 8, datasets: tuple[str, ...] = (), **labels: str) -> c.NodeRegistered:
    return msgspec.structs.replace(node(name, gpus=gpus), labels=labels)


def _cluster(*regs: c.NodeRegistered, held: dict[str, list[str]] | None = None) -> Cluster:
    cluster = Cluster()
    for i, reg in enumerate(regs, 1):
        cluster.apply(reg, i)
        cluster.apply(c.NodeReady(node=reg.node), 100 + i)
    for i, (name, names) in enumerate(sorted((held or {}).items()), 200):
        cluster.apply(c.NodeDatasetsChanged(node=name, datasets=names), i)
    return cluster


def _fit(cluster: Cluster, name: str, spec: c.JobSpec, profile: Profile | None = None):
    return fit_node(cluster.nodes[name], request_of(spec), Overlay(), Context(profile or Profile()))


def _spec(**kw) -> c.JobSpec:
    kw.setdefault("cpus_milli", 1000)
    return c.JobSpec(tenant="t", **kw)


# ----------------------------------------------------------------------------------- the arithmetic


@pytest.mark.parametrize(("wanted", "held", "locality"), [
    ((), ("imagenet",), 0.0),  # names none: 0 on every node, adds nothing
    (("imagenet",), (), 0.0),
    (("imagenet",), ("imagenet", "laion"), 1.0),
    (("imagenet", "laion"), ("imagenet",), 0.5),  # 1 of 2
    (("a", "b", "c", "d"), ("a", "c", "d"), 0.75),  # 3 of 4
])
def test_locality_is_the_fraction_of_the_jobs_datasets_the_node_holds(wanted, held, locality):
    cluster = _cluster(node("n"), held={"n": list(held)})
    assert _fit(cluster, "n", _spec(gpus=1, datasets=wanted)).parts["locality"] == pytest.approx(locality)


@pytest.mark.parametrize(("labels", "cost"), [
    ({}, 0.0),  # no price: as the dearest
    ({"horizon.io/price": "0"}, 1.0),
    ({"horizon.io/price": "1"}, 0.5),  # 1 / (1 + 1)
    ({"price": "3"}, 0.25),  # 1 / (1 + 3)
    ({"horizon.io/price": "1", "price": "3"}, 0.5),  # horizon.io/price first
    ({"price": "2.5"}, 1 / 3.5),
    ({"price": "cheap"}, 0.0),  # not a number: no price
    ({"price": "-2"}, 0.0),
])
def test_cost_is_one_over_one_plus_the_price(labels, cost):
    cluster = _cluster(_priced("n", **labels))
    assert _fit(cluster, "n", _spec(gpus=1)).parts["cost"] == pytest.approx(cost)


def test_the_weighted_sum_with_locality_and_cost_by_hand():
    """Two idle 8-GPU nodes, a 2-GPU job of datasets imagenet and laion. The default weights give both
    10*0.25 + 2*1 + 2*0 + 5*0.5 + 20*1 + 5*1 = 32.0 before locality; "z" holds imagenet only:
    + 10*0.5 = 37.0, "a" holds neither: + 0 = 32.0, so "z" wins although the name alone would take "a".
    Cost: a profile of cost 20 and locality 0, "z" at price 1 (20*0.5 = 10), "a" at price 3 (20*0.25 = 5):
    z 42.0 against a 37.0, the cheaper node."""
    assert DEFAULT_WEIGHTS["locality"] == 10.0 and DEFAULT_WEIGHTS["cost"] == 0.0
    cluster = _cluster(node("a"), node("z"), held={"z": ["imagenet"]})
    job = _spec(gpus=2, datasets=("imagenet", "laion"))
    a, z = _fit(cluster, "a", job), _fit(cluster, "z", job)
    assert a.score == (-32.0, "a") and z.score == (-37.0, "z") and z.score < a.score
    # without datasets both score 32.0 and the name decides: a
    assert _fit(cluster, "a", _spec(gpus=2)).score == (-32.0, "a")
    assert _fit(cluster, "z", _spec(gpus=2)).score == (-32.0, "z")

    priced = _cluster(_priced("a", price="3"), _priced("z", **{"horizon.io/price": "1"}))
    cheap = Profile("cheap", {**DEFAULT_WEIGHTS, "cost": 20.0, "locality": 0.0})
    pa, pz = _fit(priced, "a", _spec(gpus=2), cheap), _fit(priced, "z", _spec(gpus=2), cheap)
    assert pa.score == (-37.0, "a") and pz.score == (-42.0, "z") and pz.score < pa.score
    # the default profile weighs cost 0: the name decides
    assert _fit(priced, "a", _spec(gpus=2)).score == (-32.0, "a")


def test_the_data_outweighs_a_little_packing_but_not_a_full_node():
    """Locality weight 10 is binpack's: a 2-GPU job, node "busy" with 4 GPUs used (binpack 0.75,
    fragmentation 1: 10*0.75 + 2 + 5 + 20 + 5 = 39.5) against idle "data" holding its dataset
    (10*0.25 + 2 + 2.5 + 20 + 5 + 10*1 = 42.0): the data wins. Against "full" with 6 used (filled:
    10*1 + 2 + 5 + 20 + 5 = 42.0) it ties at 42.0 and the name decides ("data" < "full")."""
    cluster = _cluster(node("busy"), node("data"), node("full"), held={"data": ["imagenet"]})
    for name, used in (("busy", 4), ("full", 6)):
        n = cluster.nodes[name]
        for i in range(used):
            n.used_devices[f"gpu{i}"] = "other"
        n.used_cpus_milli += 1000 * used
        n.jobs["other"] = c.NodeAllocation(node=name, device_ids=[f"gpu{i}" for i in range(used)], cpus_milli=1000 * used)
    job = _spec(gpus=2, datasets=("imagenet",))
    scores = {n: _fit(cluster, n, job).score for n in ("busy", "data", "full")}
    assert scores == {"busy": (-39.5, "busy"), "data": (-42.0, "data"), "full": (-42.0, "full")}
    assert min(scores.values())[1] == "data"


def test_price_score_is_pure_and_cached():
    assert price_score("1") == 0.5 and price_score("inf") == 0.0 and price_score("nan") == 0.0


# ----------------------------------------------------------------------------------- inventory


def _inventory() -> Feed:
    f = Feed(InventoryCore())
    f.evt("agent", node("n1"))
    f.evt("agent", node("n2"))
    f.settle()
    return f


def test_operators_say_which_datasets_a_node_holds():
    f = _inventory()
    f.admin("node", c.NodeCommandIssued(node="n1", action="add-datasets", datasets=["laion", "imagenet"], user="op"))
    [ev] = f.settle()
    assert isinstance(ev, c.NodeDatasetsChanged) and ev.datasets == ["imagenet", "laion"]
    assert ev.reason == "add imagenet, laion by op"
    assert f.state.cluster.nodes["n1"].datasets == {"imagenet", "laion"}
    f.admin("node", c.NodeCommandIssued(node="n1", action="add-datasets", datasets=["c4"]))
    f.admin("node", c.NodeCommandIssued(node="n1", action="remove-datasets", datasets=["imagenet"]))
    first, second = f.settle()  # two commands in one round compose
    assert first.datasets == ["c4", "imagenet", "laion"] and second.datasets == ["c4", "laion"]
    # refusals: a dataset it does not hold, a bad name, none at all, an unknown node
    for cmd in (c.NodeCommandIssued(node="n1", action="remove-datasets", datasets=["imagenet"]),
                c.NodeCommandIssued(node="n1", action="add-datasets", datasets=["bad name"]),
                c.NodeCommandIssued(node="n1", action="add-datasets"),
                c.NodeCommandIssued(node="n9", action="add-datasets", datasets=["x"])):
        f.admin("node", cmd)
    why = [e.reason for e in f.settle()]
    assert why[0] == "node n1 holds no dataset imagenet (it holds: c4, laion)"
    assert "'bad name' is not a dataset name" in why[1]
    assert why[2] == "datasets: name at least one dataset" and why[3] == "no node 'n9'"
    # an agent's re-registration keeps them, as it keeps taints
    f.evt("agent", node("n1"))
    assert f.state.cluster.nodes["n1"].datasets == {"c4", "laion"}
    report = replay_decisions(InventoryCore(), f.records)
    assert report.decisions and report.reproduced == report.decisions and not report.mismatches


# ----------------------------------------------------------------------------------- placement


def _placement() -> Feed:
    return Feed(PlacementCore())




def test_a_gang_takes_the_nodes_holding_its_data_node_by_node_and_replays():
    """Four nodes, two holding the dataset: a 2-node gang takes those two (each node scored by what it
    holds), a job without data takes the first by name; with a cost profile the cheaper priced node
    (p2 at price 1: 100*0.5 = 50, p1 at 4: 100*0.2 = 20, the unpriced 0)."""
    f = _placement()
    ready(f, node("n1"), node("n2"), node("n3"), node("n4"),
           _priced("p1", gpus=8, price="4"), _priced("p2", gpus=8, price="1"))
    f.evt("inventory", c.NodeDatasetsChanged(node="n2", datasets=["imagenet"]))
    f.evt("inventory", c.NodeDatasetsChanged(node="n4", datasets=["imagenet", "laion"]))
    f.admin("profile", c.ProfileConfigured(name="cheap", weights={"cost": 100}))
    f.evt("submission", accepted("gang", gpus=8, nodes=2, datasets=("imagenet",)))
    f.evt("submission", accepted("plain", gpus=8))
    f.evt("submission", accepted("thrifty", gpus=8, profile="cheap"))
    out = placement_cycle(f, 1, ["gang", "plain", "thrifty"])
    nodes = {e.job_id: sorted(a.node for a in e.allocations) for e in out if isinstance(e, c.JobScheduled)}
    assert nodes == {"gang": ["n2", "n4"], "plain": ["n1"], "thrifty": ["p2"]}
    report = replay_decisions(PlacementCore(), f.records)
    assert report.decisions and report.reproduced == report.decisions and not report.mismatches


# ----------------------------------------------------------------------------------- over NATS


async def test_the_real_services_put_a_job_by_its_data_and_by_price(running_horizon):
    """Two nodes, node-00 at price 5, node-01 at price 1; an operator says node-00 holds imagenet
    (``horizon node add-datasets``) and sets a profile weighing cost (``horizon profile set``).
    "thrifty" (profile cheap, 1 GPU) goes to the cheaper node-01, where the default profile would take
    node-00 by name; then "reader" (--dataset imagenet) goes to node-00, where packing alone would
    take node-01 (it has a job). Every decision replays."""
    import asyncio
    import dataclasses

    from services.nodes.spec import local_nodes
    from tests.e2e import assert_replays, horizon, wait_until

    nodes = [dataclasses.replace(n, labels={"horizon.io/price": price})
             for n, price in zip(local_nodes(2, gpus_per_node=4), ("5", "1"))]
    h = await running_horizon(nodes=nodes, executor="sim")
    url, tally = h.url, h.tally
    code, out, err = await horizon(url, "node", "add-datasets", "node-00", "imagenet,laion")
    assert code == 0 and out.strip() == "node-00: datasets imagenet, laion", err
    code, out, err = await horizon(url, "node", "remove-datasets", "node-00", "laion")
    assert code == 0 and out.strip() == "node-00: datasets imagenet", err
    code, out, err = await horizon(url, "node", "remove-datasets", "node-01", "laion")
    assert code == 1 and "node-01 holds no dataset laion (it holds: none)" in err
    code, out, err = await horizon(url, "profile", "set", "cheap", "--weight", "cost=100")
    assert code == 0, err
    code, out, err = await horizon(url, "submit", "--tenant", "acme", "--job-id", "thrifty", "--gpus", "1",
                                   "--profile", "cheap", "--sim-runtime", "600")
    assert code == 0, err
    await wait_until(lambda: tally.has("JobStarted", "thrifty"), 20, "thrifty to start")
    code, out, err = await horizon(url, "submit", "--tenant", "acme", "--job-id", "reader", "--gpus", "1",
                                   "--dataset", "imagenet", "--sim-runtime", "600")
    assert code == 0, err
    await wait_until(lambda: tally.has("JobStarted", "reader"), 20, "reader to start")
    assert tally.last[("JobStarted", "thrifty")]["node"] == "node-01"
    assert tally.last[("JobStarted", "reader")]["node"] == "node-00"
    await asyncio.sleep(0)
    await h.stop()
    records = await h.records()
    assert_replays(records)


def test_sbatch_names_datasets_on_the_command_line(tmp_path):
    """``horizon sbatch --dataset`` (Horizon's option, repeatable, names joined by commas) sends the sorted
    set, as ``horizon submit --dataset`` does (run over NATS above); ``#SBATCH --dataset`` is not Slurm's,
    and Horizon's own options are not directives."""
    import json

    from click.testing import CliRunner

    from services.front.cli.main import cli

    runner = CliRunner()
    result = runner.invoke(cli, ["sbatch", "--dry-run", "--dataset", "laion,imagenet", "--dataset", "c4",
                                 "--wrap", "hostname"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["datasets"] == ["c4", "imagenet", "laion"]
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --dataset=imagenet\nhostname\n")
    result = runner.invoke(cli, ["sbatch", "--dry-run", str(script)])
    assert result.exit_code != 0 and "--dataset" in result.stderr
