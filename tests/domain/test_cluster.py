"""A 3-node JetStream cluster (deploy/nats/cluster/*.conf): replicated stream, a server SIGKILLed
under a workload and brought back, nothing lost, `horizon check` passes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from events.subjects import STREAM
from services.front.bench.cluster import ClusterRun, run_workload
from services.runtime.jetstream import JetStreamLog, StreamSettings
from services.runtime.log import Outgoing
from services.runtime.natscluster import NatsCluster

pytestmark = pytest.mark.timeout(180)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def cluster(tmp_path):
    c = NatsCluster(tmp_path / "cluster").start()
    try:
        yield c
    finally:
        c.stop()


async def test_replicated_stream_survives_a_follower_crash_and_catches_it_up(tmp_path):
    cluster = NatsCluster(tmp_path / "cluster").start()
    pids = [m.server.pid for m in cluster.members]
    try:
        assert cluster.meta_leader() in {"horizon-n1", "horizon-n2", "horizon-n3"}
        log = await JetStreamLog.open(cluster.url, name="test", settings=StreamSettings(replicas=3))
        try:
            info = await log.js.stream_info(STREAM)
            assert info.config.num_replicas == 3 and len(info.cluster.replicas) == 2
            submit = "horizon.in.acme.submit"
            await log.publish_many([Outgoing(submit, b"{}", f"a{i}") for i in range(50)])
            leader = cluster.stream_leader(STREAM)
            follower = next(i for i, m in enumerate(cluster.members) if m.name != leader)
            cluster.kill(follower)
            acks = await log.publish_many([Outgoing(submit, b"{}", f"b{i}") for i in range(50)])
            assert [a.seq for a in acks] == list(range(51, 101))  # two of three servers store
            cluster.restart(follower)
            for _ in range(100):
                state = cluster.stream_state(follower, STREAM)
                if state and state["last_seq"] == 100:
                    break
                await asyncio.sleep(0.1)
            assert state is not None and state["last_seq"] == 100 and state["messages"] == 100
        finally:
            await log.close()
    finally:
        cluster.stop()
    assert all(gone(p) for p in pids)


async def test_workload_survives_killing_the_stream_leader(cluster, tmp_path):
    cfg = ClusterRun(jobs=40, nodes=2, runtime_s=0.5, rate=40.0, faults=("leader",), down_s=1.5, timeout_s=120)
    report = await run_workload(cluster, tmp_path / "data", cfg)
    assert report["stream_replicas"] == 3
    assert report["states"] == {"SUCCEEDED": 40}, report
    (fault,) = report["faults"]
    assert fault["was_stream_leader"] and fault["stream_leader_after"]
    assert fault["new_stream_leader_after_s"] is not None and fault["caught_up_after_restart_s"] is not None
    assert all(fault["reconnected"].values()), fault  # the parts it served moved on their own
    assert report["parts_failed"] == [] and all(report["parts_connected"].values()), report
    check = report["check"]
    assert check["problems"] == [] and check["mismatches"] == 0 and check["reproduced"] == check["decisions"] > 0
    # And `horizon check` itself, given the three servers as --nats.
    out = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "services.front.cli.main", "check", "--nats", cluster.url, "--json"],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    body = json.loads(out.stdout)
    assert body["problems"] == [] and body["ended"] == 40 and body["audit"]["mismatches"] == 0


@pytest.mark.slow
async def test_long_workload_survives_two_server_crashes(cluster, tmp_path):
    """The run recorded in docs/reliability.md (python -m services.front.bench.cluster is the same, printed)."""
    cfg = ClusterRun(jobs=300, faults=("leader", "busiest"), down_s=5.0)
    report = await run_workload(cluster, tmp_path / "data", cfg)
    assert report["states"] == {"SUCCEEDED": 300}, report
    assert all(all(f["reconnected"].values()) for f in report["faults"]), report["faults"]
    assert report["parts_failed"] == [] and all(report["parts_connected"].values())
    assert report["check"]["problems"] == [] and report["check"]["mismatches"] == 0
