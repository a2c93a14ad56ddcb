"""Prometheus: ``horizon up`` serves ``/metrics`` for the parts it runs (docs/observability.md), and the
Grafana dashboard in ``deploy/grafana/`` queries only metrics a scrape has."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from events.codec import encode
from events.subjects import event_subject
from services.runtime.jetstream import JetStreamLog
from tests.front.test_cli_up import HORIZON, free_port, horizon, interrupt
from tests.helpers import node

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "horizon-dashboard.json"


def _get(url: str, token: str | None = None) -> tuple[int, str, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status, reply.headers.get("Content-Type", ""), reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, "", exc.read().decode()


def _families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(families: dict, name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` (a family's name, or with its suffix: ``_total``,
    ``_count``) that have ``labels``."""
    return sum(s.value for f in families.values() for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    """A ``horizon up`` of two nodes of 4 GPUs with a 2-GPU job running, a 2-node job of 4 GPUs each
    waiting behind it (with a reservation on both nodes) and one submission rejected: its scrape."""
    data_dir = tmp_path_factory.mktemp("metrics") / "h"
    port = free_port()
    up = subprocess.Popen([*HORIZON, "up", "--port", str(port), "--data-dir", str(data_dir), "--nodes", "2",
                           "--gpus-per-node", "4", "--ui-port", "0"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"nats://127.0.0.1:{port}"
    try:
        assert up.stdout.readline().strip() == url
        line = ""
        while "http://127.0.0.1:" not in line:
            line = up.stderr.readline()
            assert line, "horizon up ended before printing its HTTP port"
        base = re.search(r"http://127\.0\.0\.1:\d+", line).group(0)
        running = horizon("submit", "--gpus", "2", "--json", "--", "sleep", "60", url=url)
        assert running.returncode == 0, running.stderr
        waiting = horizon("submit", "--gpus", "4", "--nodes", "2", "--json", "--", "true", url=url)
        assert waiting.returncode == 0, waiting.stderr
        rejected = horizon("submit", "--gpus", "1", "--gpu-type", "h100", "--", "true", url=url)
        assert rejected.returncode == 1
        deadline, families, text = time.time() + 30, {}, ""
        while time.time() < deadline:
            status, ctype, text = _get(f"{base}/metrics")
            assert status == 200 and ctype.startswith("text/plain; version=0.0.4"), (status, ctype)
            families = _families(text)
            if ("horizon_gpus_state" in families and _value(families, "horizon_gpus_state", state="busy") == 2
                    and _value(families, "horizon_queue_length") == 1 and "horizon_rejections" in families):
                break
            time.sleep(0.2)
        yield base, families, text
    finally:
        interrupt(up)


def test_up_serves_metrics_of_its_parts(scraped):
    base, families, _text = scraped
    # the families docs/observability.md lists, in Prometheus's names
    for name, kind in [("horizon_events_published", "counter"), ("horizon_events_applied", "counter"),
                       ("horizon_consumer_lag", "gauge"), ("horizon_rejections", "counter"),
                       ("horizon_decide_duration_milliseconds", "histogram"), ("horizon_scheduled", "counter"),
                       ("horizon_preemptions", "counter"), ("horizon_queue_depth", "gauge"),
                       ("horizon_queue_length", "gauge"), ("horizon_gpus", "gauge"), ("horizon_gpus_state", "gauge"),
                       ("horizon_cycle_latency_milliseconds", "histogram"), ("horizon_job_wait_seconds", "histogram")]:
        assert name in families, (name, sorted(families))
        assert families[name].type == kind, (name, families[name].type)
    # one queued job, in the stock partition main, of the default tenant
    assert _value(families, "horizon_queue_length", partition="main", tenant="default") == 1
    assert _value(families, "horizon_queue_depth", **{"class": "all", "account": "all"}) == 1
    # 8 GPUs: 2 busy; the waiting job's reservation names both nodes (4 GPUs each), so the 6 others
    # are reserved for it
    states = {s.labels["state"]: s.value for s in families["horizon_gpus_state"].samples}
    assert states == {"free": 0, "busy": 2, "reserved": 6, "held": 0, "cordoned": 0, "down": 0, "unhealthy": 0}
    assert _value(families, "horizon_gpus", what="utilisation") == 0.25
    assert _value(families, "horizon_scheduled_total", backfilled="false") == 1
    # the running job's wait, by log time: one placement in partition main, well under a minute
    assert _value(families, "horizon_job_wait_seconds_count", partition="main", priority_class="normal") == 1
    assert _value(families, "horizon_job_wait_seconds_bucket", partition="main", le="60.0") == 1
    assert _value(families, "horizon_rejections_total", event="JobRejected", field="resources.gpu_type") == 1
    # every service that decided something timed its rounds that published, with buckets (the agent's
    # two nodes made inventory's NodeReady); preemption decided nothing here, and a round that
    # publishes nothing is not timed
    for part in ("submission", "scheduling", "placement", "inventory"):
        assert _value(families, "horizon_decide_duration_milliseconds_count", part=part) >= 1, part
        buckets = [s for s in families["horizon_decide_duration_milliseconds"].samples
                   if s.name.endswith("_bucket") and s.labels["part"] == part]
        assert buckets[-1].labels["le"] == "+Inf" and len(buckets) > 10
    lag_parts = {s.labels["part"] for s in families["horizon_consumer_lag"].samples}
    assert {"submission", "scheduling", "placement", "preemption", "inventory", "projections", "agent"} <= lag_parts
    # anything else is not found, and says what is served
    status, _ctype, body = _get(f"{base}/nope")
    assert status == 404 and "/metrics" in body


def test_grafana_dashboard_queries_metrics_that_exist(scraped):
    _base, families, _text = scraped
    samples = {s.name for f in families.values() for s in f.samples}
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    assert len(exprs) >= 12
    for expr in exprs:
        names = set(re.findall(r"\bhorizon_[a-z_]+", expr))
        assert names, expr
        assert names <= samples, (expr, names - samples)


async def _register(url: str, event: Any) -> None:
    """A node's registration in the log, as its agent publishes it."""
    log = await JetStreamLog.open(url, name="metrics-agent", create=False)
    try:
        await log.publish(event_subject("agent", event), encode(event), msg_id=f"agent/NodeRegistered/{event.node}")
    finally:
        await log.close()


def test_a_service_alone_serves_its_metrics(nats_server, tmp_path):
    """``horizon service NAME --metrics-port 0`` (the distributed shape): the part's own metrics, the
    port printed; projections has the read-model gauges, a service its decision rounds (inventory's
    ``NodeReady`` for a node registered in the log). Inventory's with ``--metrics-token-file`` (as ``up --auth --processes`` runs its children): only for a bearer
    of that token."""
    procs, logs = {}, {}
    token = tmp_path / "metrics-token"
    token.write_text("s3cret-scrape\n")
    try:
        for name in ("projections", "inventory"):
            logs[name] = tmp_path / f"{name}.err"
            with logs[name].open("w") as err:  # a file, not a pipe nobody drains
                procs[name] = subprocess.Popen(
                    [*HORIZON, "service", name, "--nats", nats_server.url, "--data-dir", str(tmp_path / name),
                     "--metrics-port", "0", "--lease-ttl", "2",
                     *(["--metrics-token-file", str(token)] if name == "inventory" else [])],
                    stdout=subprocess.DEVNULL, stderr=err, text=True)
        bases = {}
        deadline = time.time() + 30
        while len(bases) < len(procs) and time.time() < deadline:
            for name, proc in procs.items():
                text = logs[name].read_text()
                found = re.search(r"http://127\.0\.0\.1:\d+", text)
                if found and "running against" in text:  # caught up with the log: its instruments exist
                    bases[name] = found.group(0)
                assert proc.poll() is None, text
            time.sleep(0.1)
        assert len(bases) == 2, {name: path.read_text() for name, path in logs.items()}
        families = _families(_get(f"{bases['projections']}/metrics")[2])
        assert {"horizon_gpus_state", "horizon_gpus", "horizon_queue_depth", "horizon_consumer_lag"} <= set(families)
        assert {s.labels["part"] for s in families["horizon_consumer_lag"].samples} == {"projections"}
        assert "horizon_decide_duration_milliseconds" not in families  # projections decides nothing
        assert _get(f"{bases['inventory']}/metrics")[0] == 401
        assert _get(f"{bases['inventory']}/metrics", "wrong")[0] == 401
        asyncio.run(_register(nats_server.url, node("metrics-n1")))
        deadline = time.time() + 20
        while time.time() < deadline:  # the inventory's round that decides the node ready, once it holds its lease
            families = _families(_get(f"{bases['inventory']}/metrics", "s3cret-scrape")[2])
            if _value(families, "horizon_decide_duration_milliseconds_count", part="inventory") >= 1:
                break
            time.sleep(0.2)
        assert _value(families, "horizon_decide_duration_milliseconds_count", part="inventory") >= 1
        assert "horizon_gpus_state" not in families  # the read models' gauges are the projections'
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGINT)
        for name, proc in procs.items():
            try:
                assert proc.wait(timeout=30) == 0, logs[name].read_text()
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise


def test_gpus_by_state_worked_example():
    """``gpu_states`` on a folded cluster of 4 nodes x 4 GPUs (16), each GPU in the first state that
    applies: n1 has a job on 2 GPUs and is held for a preemptor (2 busy, 2 held); n2 has one
    unhealthy GPU and a pending job's reservation of 2 GPUs (1 unhealthy, 2 reserved, 1 free); n3 is
    cordoned (4); n4 registered, never ready (4 down)."""
    import msgspec

    from events import catalogue as c
    from projections.scheduling_reports import gpu_states, queue_length
    from services.domain.preemption.planner import PreemptionPlanner
    from services.domain.queue.fold import QueueFold
    from tests.helpers import Feed, accepted, node

    sched, plan = Feed(QueueFold()), Feed(PreemptionPlanner())
    sick = node("n2", gpus=4)
    sick = msgspec.structs.replace(sick, gpus=[msgspec.structs.replace(sick.gpus[0], health="xid 79"), *sick.gpus[1:]])
    for feed in (sched, plan):
        for event in (node("n1", gpus=4), sick, node("n3", gpus=4), node("n4", gpus=4)):
            feed.evt("agent", event)
        for name in ("n1", "n2", "n3"):
            feed.evt("inventory", c.NodeReady(node=name, basis_seq=feed.seq))
        feed.evt("inventory", c.NodeCordoned(node="n3", reason="maintenance"))
        feed.evt("submission", accepted("j1", feed.seq, gpus=2))
        feed.evt("submission", accepted("j2", feed.seq, tenant="globex", gpus=1))
    # what the folds would hold after a placement and a preemption round: set here, the rule is what is tested
    plan.state.cluster.nodes["n1"].used_devices.update({"gpu0": "j0", "gpu1": "j0"})
    plan.state.held["n1"] = frozenset({"j9"})
    sched.state.pending["j1"].reserved_nodes = ("n2",)
    assert gpu_states(sched.state, plan.state) == {"free": 1, "busy": 2, "reserved": 2, "held": 2, "cordoned": 4,
                                                   "down": 4, "unhealthy": 1}
    assert sum(gpu_states(sched.state, plan.state).values()) == 16
    assert queue_length(sched.state) == {("none", "acme"): 1, ("none", "globex"): 1}
