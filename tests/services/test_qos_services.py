"""QoS classes and overcommit through the real services on a real nats-server (issue 19).

1. Overcommit, simulated jobs: an operator sets a node's CPU ratio from the CLI (``horizon node set``);
   burstable jobs are packed past its CPUs, a guaranteed one waits with the reason, a best-effort one
   starts; ``horizon queue`` and ``horizon show`` name the classes; lowering the ratio below what the
   node holds is refused; a memory-pressure measure published as an agent would evicts the best-effort
   job first. Every decision replays.
2. Real processes in real cgroups (v1 here): a burstable job's cgroup gets its limit, not its request;
   a node whose jobs use more memory than it gives them has its best-effort job killed by the agent's
   own measure and inventory's eviction, while the guaranteed job runs on.
"""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from events import catalogue as c
from events.codec import encode
from events.subjects import event_subject
from services.nodes.backends.process.cgroups import probe
from services.nodes.spec import local_nodes
from services.front.host.check import check_log
from tests.e2e import assert_replays, events_of, horizon, wait_until
from tests.helpers import job_file

pytestmark = pytest.mark.timeout(150)
MiB = 2**20
needs_cgroups = pytest.mark.skipif(not probe().usable, reason=f"no writable cgroups: {probe().describe()}")


async def _submit(url: str, job_id: str, *args: str, command: tuple[str, ...] = ()) -> None:
    options = [*args, "--nats", url, "--", *command] if command else list(args)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.front.cli.main", "submit", "--tenant", "acme", "--job-id", job_id, *options,
        *(() if command else ("--nats", url)), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()


async def test_overcommit_classes_and_a_pressure_eviction_over_nats(running_horizon):
    """One node of 4 CPUs at CPU ratio 2: b1..b4 (2 CPUs, limit 4: burstable) take 8 of 4 x 2 = 8, the
    guaranteed g (1 CPU) waits (8 + 1 > 4), the best-effort e starts. A measure of 3 GiB used of 4 GiB
    less 512 MiB kept free evicts e (1 GiB), which is enough: b1..b4 stay."""
    h = await running_horizon(nodes=local_nodes(1, gpus_per_node=0, cpus=4, memory_bytes=4 * 2**30), executor="sim")
    url, tally = h.url, h.tally
    code, out, err = await horizon(url, "node", "set", "node-00", "--cpu-overcommit", "2")
    assert code == 0 and out.strip() == "node-00: overcommit cpu x2, memory x1", err
    code, out, err = await horizon(url, "node", "set", "node-00")
    assert code == 2 and "node set needs --cpu-overcommit or --mem-overcommit" in err
    for i in range(1, 5):
        await _submit(url, f"b{i}", "--cpus", "2", "--cpu-limit", "4", "--mem", "256M", "--sim-runtime", "600")
    await wait_until(lambda: all(tally.has("JobStarted", f"b{i}") for i in range(1, 5)), 20, "b1..b4 to start")
    await _submit(url, "g", "--cpus", "1", "--mem", "256M", "--sim-runtime", "600")
    await _submit(url, "e", "--cpus", "0", "--mem", "0", "--sim-runtime", "600", "--restart-policy", "on-failure",
                  "--max-retries", "1")
    await wait_until(lambda: tally.has("JobStarted", "e") and tally.has("PlacementBlocked", "g"), 20,
                     "e to start and g to wait")
    assert not tally.has("JobStarted", "g")
    blocked = tally.last[("PlacementBlocked", "g")]
    assert blocked["reasons"][0]["reason"] == "too few free CPUs (needs 1)"

    code, out, err = await horizon(url, "queue")
    assert code == 0 and "QOS CLASS" in out, err
    code, out, err = await horizon(url, "queue", "--json")
    assert [(r["job_id"], r["qos"]) for r in json.loads(out)] == [("g", "guaranteed")], err
    code, out, err = await horizon(url, "jobs", "--json")
    rows = {r["job_id"]: r for r in json.loads(out)}
    assert (rows["b1"]["qos"], rows["g"]["qos"], rows["e"]["qos"]) == ("burstable", "guaranteed", "best-effort")
    assert (rows["b1"]["cpu_limit_milli"], rows["b1"]["memory_limit_bytes"]) == (4000, 0)
    code, out, err = await horizon(url, "show", "b1")
    assert code == 0 and "qos burstable, limits 4 CPUs per task" in out, err
    code, out, err = await horizon(url, "show", "e")
    assert code == 0 and "qos best-effort" in out, err

    code, out, err = await horizon(url, "nodes", "--json")
    [row] = json.loads(out)
    assert (row["cpu_overcommit"], row["memory_overcommit"], row["cpus_used_milli"]) == (2.0, 1.0, 8000), err
    code, out, err = await horizon(url, "nodes")
    assert "8/4 x2" in out, out
    code, out, err = await horizon(url, "node", "set", "node-00", "--cpu-overcommit", "1.5")
    assert code == 1 and "jobs hold 8 CPUs of requests on 4: a CPU ratio of 1.5 leaves room for 6" in err

    pressure = c.NodeMemoryPressure(
        id="agent/NodeMemoryPressure/node-00/t1", source="agent/node-00", correlation_id="node-00",
        node="node-00", memory_bytes=4 * 2**30, reserve_bytes=512 * MiB, used_bytes=3 * 2**30 + 768 * MiB,
        jobs=[c.JobMemoryUse(job_id=j, attempt=1, used_bytes=u)
              for j, u in (("b1", 512 * MiB), ("b2", 512 * MiB), ("b3", 640 * MiB), ("b4", 128 * MiB),
                           ("e", 2**30))])
    await h.js.publish(event_subject("agent", pressure), encode(pressure), headers={"Nats-Msg-Id": pressure.id})
    await wait_until(lambda: tally.has("JobFailed", "e"), 20, "e to be evicted")
    failed = tally.last[("JobFailed", "e")]
    assert failed["evicted"] is True and failed["source"] == "inventory"
    assert failed["reason"] == ("evicted: node-00 ran short of memory (its jobs used 3.8Gi, more than the 3.5Gi it "
                                "gives them); best-effort, using 1Gi").replace("node-00", "node node-00", 1)
    # its restart policy requeues it, as any failure; the measure named attempt 1, so attempt 2 stays
    await wait_until(lambda: tally.last.get(("JobStarted", "e"), {}).get("attempt") == 2, 20, "e to run again")
    await asyncio.sleep(0.5)
    assert not any(tally.has("JobFailed", f"b{i}") for i in range(1, 5))
    assert tally.by_job[("JobFailed", "e")] == 1
    await h.stop()
    records = await h.records()
    assert_replays(records)
    assert check_log(records).problems == []


def _allocate(mib: int, seconds: int = 60) -> tuple[str, ...]:
    """A job holding ``mib`` MiB of touched memory for ``seconds``."""
    return (sys.executable, "-c", f"import time; x = b'\\x01' * ({mib} * 2**20); print('holding', flush=True); "
                                  f"time.sleep({seconds})")


@needs_cgroups
async def test_real_cgroups_take_the_limits_and_memory_pressure_evicts_the_best_effort_job(
        running_horizon, tmp_path, monkeypatch):
    """A node of 600 MiB keeping 100 MiB free (HORIZON_MEMORY_RESERVE): the line is 500 MiB.
    "burst" (--cpus 0.5 --cpu-limit 1.5 --mem 64M --mem-limit 256M) holds 150 MiB and ends well: its
    cgroup's memory limit is 256 MiB, its CPU quota 150 ms per 100 ms, its shares 512 (its request).
    Then "g" (guaranteed, --mem 300M) holds 250 MiB and "e" (best-effort) 300 MiB: over 550 MiB in all,
    so the agent reports the pressure, inventory evicts e, the agent kills it, and g runs on."""
    monkeypatch.setenv("HORIZON_MEMORY_RESERVE", "100Mi")
    h = await running_horizon(nodes=local_nodes(1, gpus_per_node=0, cpus=2, memory_bytes=600 * MiB),
                              executor="process")
    url, tally = h.url, h.tally
    parent = probe().parent  # horizon (or this pytest-xdist worker's own: tests/conftest.py)
    limit_file = f"/sys/fs/cgroup/memory/{parent}/node-00/burst.1/memory.limit_in_bytes"
    cpu_dir = f"/sys/fs/cgroup/cpu/{parent}/node-00/burst.1"
    report = (f"x = b'\\x01' * (150 * 2**20); print(open('{limit_file}').read().strip()); "
              f"print(open('{cpu_dir}/cpu.cfs_quota_us').read().strip()); print(open('{cpu_dir}/cpu.shares').read().strip())")
    await _submit(url, "burst", "--cpus", "0.5", "--cpu-limit", "1.5", "--mem", "64M", "--mem-limit", "256M",
                  command=(sys.executable, "-c", report))
    await wait_until(lambda: tally.has("JobSucceeded", "burst") or tally.has("JobFailed", "burst"), 30,
                     "burst to end")
    assert tally.has("JobSucceeded", "burst"), tally.last.get(("JobFailed", "burst"))
    assert job_file(tmp_path / "jobs", "burst", 1, "stdout").read_text().split() == [str(256 * MiB), "150000", "512"]

    await _submit(url, "g", "--cpus", "1", "--mem", "300M", command=_allocate(250))
    await wait_until(lambda: tally.has("JobStarted", "g"), 20, "g to start")
    await _submit(url, "e", "--cpus", "0", "--mem", "0", command=_allocate(300))
    await wait_until(lambda: tally.has("JobFailed", "e"), 40, "e to be evicted")
    failed = tally.last[("JobFailed", "e")]
    assert failed["evicted"] is True and failed["source"] == "inventory"
    assert failed["reason"].startswith("evicted: node node-00 ran short of memory") and "best-effort" in failed[
        "reason"]
    assert tally.has("NodeMemoryPressure", "node-00")
    await asyncio.sleep(3)  # the next measures: g is within its request and stays
    assert not tally.has("JobFailed", "g") and not tally.has("JobSucceeded", "g")
    code, out, err = await horizon(url, "cancel", "--tenant", "acme", "g")
    assert code == 0, err
    await wait_until(lambda: tally.has("JobCancelled", "g"), 20, "g to be cancelled")
    await h.stop()
    records = await h.records()
    events = events_of(records)
    measures = [e for e in events if isinstance(e, c.NodeMemoryPressure)]
    assert measures and measures[0].reserve_bytes == 100 * MiB and measures[0].memory_bytes == 600 * MiB
    assert measures[0].used_bytes > 500 * MiB and {u.job_id for u in measures[0].jobs} == {"g", "e"}
    assert_replays(records)
    assert check_log(records).problems == []
