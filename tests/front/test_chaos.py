"""Chaos, short: every part its own process; the five services and the agent each SIGKILLed once and
restarted, nats-server restarted once, under a 300-job workload; every job accounted for, no duplicate
decision, ``horizon check`` passes.

The long run (20,000 jobs, every part killed 5 times, two server restarts) is
``python -m services.front.bench.chaos``, recorded in docs/reliability.md §Chaos.
"""

from __future__ import annotations

import random

import pytest

import msgspec

from events import catalogue as c
from events.codec import decode, encode
from events.subjects import event_subject
from services.nodes.agent.app import NodeAgent
from services.nodes.backends.process.executors import SimExecutor
from services.nodes.spec import local_nodes
from services.front.bench.chaos import DECIDERS, ChaosConfig, fault_plan, make_parts, run_chaos, workload
from services.front.bench.chaos_verdict import duplicates
from services.domain.protocol import Record
from services.runtime.memory_log import MemoryLog

pytestmark = pytest.mark.timeout(240)


def _record(seq: int, event: c.Event, service: str) -> Record:
    return Record(seq, f"horizon.evt.{service}.{type(event).__name__}.x", encode(event), float(seq), None)


def test_duplicates_are_counted_by_meaning_not_only_by_id():
    alloc = [c.NodeAllocation(node="n1", device_ids=["gpu0"])]
    first = c.JobScheduled(id="placement/JobScheduled/j/1", job_id="j", attempt=1, allocations=alloc)
    again = c.JobScheduled(id="placement/JobScheduled/j/1/again", job_id="j", attempt=1, allocations=alloc)
    ended = c.JobFailed(id="agent/JobFailed/j/1", job_id="j", attempt=1, reason="x")
    lost = c.JobFailed(id="inventory/JobFailed/j/1", job_id="j", attempt=1, reason="node lost")
    reg = c.NodeRegistered(id="agent/NodeRegistered/n1/abc", node="n1", cpus_milli=1000, memory_bytes=1 << 30)
    records = [_record(1, reg, "agent"), _record(2, first, "placement"), _record(3, first, "placement"),
               _record(4, again, "placement"), _record(5, ended, "agent"), _record(6, lost, "inventory"),
               _record(7, reg, "agent")]
    dup = duplicates(records)
    # seq 3: the same id again (and the same attempt); seq 4: the same attempt under another id;
    # seq 6: a second JobFailed for attempt 1; seq 7: a re-registration, which is by design.
    assert dup["same_id"] == 1 and dup["attempt_scheduled_twice"] == 2 and dup["ended_twice"] == 1
    assert dup["total"] == 4


def test_the_plan_kills_every_part_as_often_as_asked_and_is_the_same_for_a_seed(tmp_path):
    cfg = ChaosConfig(jobs=10, kills=3, server_restarts=2, agents=2, nodes=4)
    parts = make_parts(cfg, "nats://127.0.0.1:1", tmp_path)
    plan = fault_plan(cfg, parts, random.Random("faults/1"))
    assert {p.name: plan.count(p.name) for p in parts} == {p.name: 3 for p in parts}
    assert plan.count("nats-server") == 2 and len(plan) == 3 * len(parts) + 2
    assert plan == fault_plan(cfg, parts, random.Random("faults/1"))
    assert workload(cfg) == workload(cfg)


@pytest.mark.slow  # ~35 s of kills and a server restart: run with -m slow (docs/benchmarks.md)
async def test_kill_every_part_and_restart_the_server_under_a_workload(tmp_path):
    cfg = ChaosConfig(jobs=300, kills=1, kill=(*DECIDERS, "agent-0"), server_restarts=1, seed=7, agents=1, nodes=4,
                      gpus_per_node=8, runtime_s=(0.1, 0.8), gap_s=(0.2, 0.5), max_down_s=0.5, timeout_s=150.0)
    report = await run_chaos(cfg, tmp_path)
    summary = {k: report[k] for k in ("jobs", "kills", "server_restarts", "unexpected_exits", "duplicates", "check")}
    assert report["jobs"]["ok"] and report["jobs"]["submitted"] == 300, summary
    assert sum(report["jobs"]["states"].values()) == 300
    assert all(report["kills"].get(name, 0) >= 1 for name in DECIDERS), summary
    assert report["kills"].get("agent-0") == 1 and "projections" not in report["kills"]
    assert report["server_restarts"] == 1
    assert report["unexpected_exits"] == [], summary
    assert report["duplicates"]["total"] == 0, report["duplicates"]
    assert report["check"]["exit_code"] == 0 and report["check"]["problems"] == 0, report["check"]
    assert report["check"]["audit"]["mismatches"] == 0
    assert all(f["recover_s"] is not None for f in report["faults"] if f["fault"] == "kill")
    assert report["ok"]


async def test_a_restarted_agent_reports_one_ending_when_stop_requests_race_its_report():
    """Found by the chaos run: an agent restarted with a job RUNNING reports it lost (``JobFailed``);
    a preemption and a cancel decided before that report was folded then found nothing running and
    were reported too (``JobPreempted``, ``JobCancelled``): three endings for one attempt."""
    log = MemoryLog()

    def put(service: str, event: c.Event) -> None:
        event = msgspec.structs.replace(event, id=event.id or f"test/{len(log.records)}", correlation_id="j",
                                        source=service)
        log.append(event_subject(service, event), encode(event), msg_id=event.id)

    put("submission", c.JobAccepted(job_id="j", spec=c.JobSpec(tenant="acme", sim_runtime_s=60)))
    put("placement", c.JobScheduled(job_id="j", attempt=1, allocations=[
        c.NodeAllocation(node="n-00", cpus_milli=1000, memory_bytes=2**30)]))
    put("agent", c.JobStarted(id="agent/JobStarted/j/1", job_id="j", attempt=1, node="n-00"))
    agent = NodeAgent(log, local_nodes(1, prefix="n"), SimExecutor())  # the old agent was SIGKILLed
    agent._fold(list(log.records))  # its catch-up: j RUNNING here, and no process
    await agent._resume()  # reports JobFailed: the process was lost
    late = [c.PreemptionRequested(id="p", job_id="j", attempt=1, for_job="vip", grace_period_s=5.0, basis_seq=3),
            c.JobStopRequested(id="s", job_id="j", attempt=1, reason="user cancel")]
    racing = [Record(4 + i, event_subject("preemption" if i == 0 else "submission", e), encode(e), 4.0 + i, None)
              for i, e in enumerate(late)]  # stored before the report, folded after it
    await agent._on_batch(racing)
    endings = [type(e).__name__ for e in map(decode, (r.data for r in log.records))
               if isinstance(e, (c.JobSucceeded, c.JobFailed, c.JobCancelled, c.JobPreempted))]
    assert endings == ["JobFailed"]
