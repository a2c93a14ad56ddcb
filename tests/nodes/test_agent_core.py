"""The node agent's pure core (``services/nodes/agent/core.py``), driven with log records, no NATS, no processes.

Records are built as the log stores them (subject, encoded event, stored time)
and decoded as the agent decodes them (``readable``), so what the core sees
here is what it sees live.
"""

from __future__ import annotations

import ast
from pathlib import Path

import msgspec

from events import catalogue as c
from events.codec import encode
from events.subjects import event_subject
from services.nodes.agent.core import Action, AgentCore
from services.nodes.spec import NodeSpec, local_nodes
from services.domain.jobs import JobState
from services.domain.protocol import Record
from services.runtime.consume import readable

ROOT = Path(__file__).resolve().parents[2]


class Log:
    """A list of records and an agent core following it."""

    def __init__(self, *nodes: str) -> None:
        self.core = AgentCore(nodes or ("n-00",))
        self.records: list[Record] = []

    def record(self, service: str, event: c.Event) -> Record:
        event = msgspec.structs.replace(event, id=event.id or f"test/{len(self.records) + 1}",
                                        correlation_id=getattr(event, "job_id", "") or "x", source=service)
        seq = len(self.records) + 1
        record = Record(seq, event_subject(service, event), encode(event), 1000.0 + seq, {"Nats-Msg-Id": event.id})
        self.records.append(record)
        return record

    def fold(self, *records: Record) -> list[Action]:
        return self.core.fold(readable(list(records), self.core.seq))

    def put(self, service: str, event: c.Event) -> list[Action]:
        """Append one event and fold it: the actions it calls for."""
        return self.fold(self.record(service, event))

    # the usual events

    def accepted(self, job: str, **spec: object) -> list[Action]:
        return self.put("submission", c.JobAccepted(job_id=job, spec=c.JobSpec(tenant="acme", **spec)))

    def scheduled(self, job: str, *nodes: str, attempt: int = 1) -> list[Action]:
        allocs = [c.NodeAllocation(node=n, cpus_milli=1000, memory_bytes=2**30) for n in nodes or ("n-00",)]
        return self.put("placement", c.JobScheduled(job_id=job, attempt=attempt, allocations=allocs))

    def started(self, job: str, attempt: int = 1, node: str = "n-00") -> list[Action]:
        return self.put("agent", c.JobStarted(job_id=job, attempt=attempt, node=node))

    def running(self, job: str, *nodes: str) -> list[Action]:
        self.accepted(job)
        self.scheduled(job, *nodes)
        return self.started(job, node=(nodes or ("n-00",))[0])


# ---------------------------------------------------------------------- start


def test_a_placement_on_this_agents_node_starts_the_job_once():
    log = Log("n-00")
    assert log.accepted("j") == []
    assert log.scheduled("j") == [Action("start", "j")]
    assert log.core.jobs.get("j").state is JobState.SCHEDULED
    # a reader restart repeats the tail: folded already, nothing to do
    assert log.fold(*log.records) == []
    # the same decision stored again (another sequence): the job is no longer pending, no second start
    assert log.scheduled("j") == []
    assert log.started("j") == []


def test_actions_unpack_as_action_and_job():
    log = Log("n-00")
    log.accepted("j")
    [(action, job_id)] = log.scheduled("j")
    assert (action, job_id) == ("start", "j")


def test_a_placement_on_another_node_is_not_this_agents():
    log = Log("n-00")
    log.accepted("j")
    assert log.scheduled("j", "n-01") == []
    assert log.started("j", node="n-01") == []
    assert log.put("submission", c.JobStopRequested(job_id="j", attempt=1)) == []
    assert log.put("preemption", c.PreemptionRequested(job_id="j", attempt=1, for_job="vip")) == []
    assert log.put("agent", c.JobSucceeded(job_id="j", attempt=1)) == []
    assert log.core.stop_requests == {} and log.core.preemptions == {}
    assert log.core.jobs.get("j").state is JobState.SUCCEEDED  # the core still follows every job
    assert log.core.resume() == []


def test_a_multi_node_job_is_launched_by_the_agent_of_its_first_node():
    first, second = Log("n-00"), Log("n-01")
    for log in (first, second):
        log.accepted("wide")
        log.scheduled("wide", "n-00", "n-01")
    assert first.core.mine(first.core.jobs.get("wide").allocations).node == "n-00"
    assert second.core.mine(second.core.jobs.get("wide").allocations) is None
    third = Log("n-01")
    third.accepted("wide")
    assert third.scheduled("wide", "n-00", "n-01") == []


def test_an_agent_with_many_nodes_starts_jobs_on_each():
    log = Log("a-00", "a-01")
    log.accepted("x")
    log.accepted("y")
    assert log.scheduled("x", "a-00") == [Action("start", "x")]
    assert log.scheduled("y", "a-01") == [Action("start", "y")]


def test_a_batch_yields_its_actions_in_log_order():
    log = Log("n-00")
    records = [log.record("submission", c.JobAccepted(job_id=j, spec=c.JobSpec(tenant="acme"))) for j in "ab"]
    records += [log.record("placement", c.JobScheduled(job_id=j, attempt=1, allocations=[
        c.NodeAllocation(node="n-00", cpus_milli=1000, memory_bytes=2**30)])) for j in "ba"]
    records.append(log.record("submission", c.JobStopRequested(job_id="b", attempt=1, reason="user")))
    assert log.fold(*records) == [Action("start", "b"), Action("start", "a"), Action("stop", "b")]
    assert log.core.seq == len(records)


def test_an_undecodable_record_only_moves_the_position():
    log = Log("n-00")
    log.accepted("j")
    junk = Record(2, "horizon.evt.placement.JobScheduled.j", b"not an event", 1002.0)
    log.records.append(junk)
    assert log.fold(junk) == []
    assert log.core.seq == 2
    assert log.scheduled("j") == [Action("start", "j")]


# ---------------------------------------------------------------------- stop


def test_a_stop_request_for_a_job_here_is_a_stop():
    log = Log("n-00")
    log.running("j")
    request = c.JobStopRequested(job_id="j", attempt=1, reason="user cancel", grace_period_s=3.0)
    assert log.put("submission", request) == [Action("stop", "j")]
    assert log.core.stop_requests["j"].reason == "user cancel"
    assert log.core.stop_requests["j"].grace_period_s == 3.0


def test_a_stop_request_for_a_scheduled_job_not_yet_started_is_a_stop():
    log = Log("n-00")
    log.accepted("j")
    log.scheduled("j")
    assert log.put("submission", c.JobStopRequested(job_id="j", attempt=1)) == [Action("stop", "j")]


def test_a_stop_request_for_a_job_that_holds_nothing_is_ignored():
    log = Log("n-00")
    assert log.put("submission", c.JobStopRequested(job_id="ghost", attempt=1)) == []
    log.accepted("j")
    assert log.put("submission", c.JobStopRequested(job_id="j", attempt=1)) == []  # pending
    log.scheduled("j")
    log.started("j")
    log.put("agent", c.JobSucceeded(job_id="j", attempt=1))
    assert log.put("submission", c.JobStopRequested(job_id="j", attempt=1)) == []  # ended
    assert log.core.stop_requests == {}


def test_a_cancel_decided_before_the_attempt_was_scheduled_stops_it():
    """The job table leaves the attempt running for a stale cancel; the agent stops it and reports the cancel."""
    log = Log("n-00")
    log.running("j")
    assert log.put("submission", c.JobCancelled(job_id="j", attempt=0, reason="user cancel")) == [Action("stop", "j")]
    request = log.core.stop_requests["j"]
    assert (request.job_id, request.attempt, request.reason) == ("j", 1, "user cancel")
    assert log.core.jobs.get("j").state is JobState.RUNNING
    log.accepted("k")
    log.scheduled("k")
    log.put("submission", c.JobCancelled(job_id="k", attempt=0))
    assert log.core.stop_requests["k"].reason == "cancelled"  # no reason given


def test_a_cancel_of_this_attempt_ends_it():
    log = Log("n-00")
    log.running("j")
    assert log.put("agent", c.JobCancelled(job_id="j", attempt=1, reason="user")) == [Action("ended", "j")]


# ---------------------------------------------------------------------- preemption


def test_a_preemption_of_the_current_attempt_is_carried_out_once():
    log = Log("n-00")
    log.running("j")
    request = c.PreemptionRequested(job_id="j", attempt=1, for_job="vip", grace_period_s=5.0)
    assert log.put("preemption", request) == [Action("preempt", "j")]
    assert log.core.preemptions["j"].for_job == "vip"
    assert log.put("inventory", c.PreemptionRequested(job_id="j", attempt=1, for_job="")) == []
    assert log.core.preemptions["j"].for_job == "vip"  # the first request stands


def test_a_preemption_of_another_attempt_or_of_a_job_holding_nothing_is_ignored():
    log = Log("n-00")
    log.running("j")
    assert log.put("preemption", c.PreemptionRequested(job_id="j", attempt=2, for_job="vip")) == []
    log.accepted("p")
    assert log.put("preemption", c.PreemptionRequested(job_id="p", attempt=0, for_job="vip")) == []
    assert log.core.preemptions == {}


def test_a_preemption_is_one_per_attempt_so_the_next_attempt_can_be_preempted_again():
    log = Log("n-00")
    log.running("j")
    assert log.put("preemption", c.PreemptionRequested(job_id="j", attempt=1, for_job="vip")) == [
        Action("preempt", "j")]
    assert log.put("agent", c.JobPreempted(job_id="j", attempt=1, for_job="vip")) == [Action("ended", "j")]
    assert log.core.preemptions == {}
    assert log.put("scheduling", c.JobRequeued(job_id="j", attempt=1)) == []
    assert log.scheduled("j", attempt=2) == [Action("start", "j")]
    assert log.put("preemption", c.PreemptionRequested(job_id="j", attempt=2, for_job="vip")) == [
        Action("preempt", "j")]


# ---------------------------------------------------------------------- endings


def test_an_ending_forgets_the_attempts_requests_and_reported_ending():
    log = Log("n-00")
    log.running("j")
    log.put("submission", c.JobStopRequested(job_id="j", attempt=1))
    log.put("preemption", c.PreemptionRequested(job_id="j", attempt=1, for_job="vip"))
    log.core.reporting(c.JobCancelled, "j", 1)
    assert log.core.ending_reported("j", 1)
    assert log.put("agent", c.JobCancelled(job_id="j", attempt=1)) == [Action("ended", "j")]
    assert log.core.stop_requests == {} and log.core.preemptions == {} and log.core.reported_end == {}
    assert not log.core.ending_reported("j", 1)


def test_every_way_out_of_a_running_attempt_is_an_ending():
    endings = [
        c.JobSucceeded(job_id="j", attempt=1),
        c.JobFailed(job_id="j", attempt=1, reason="exit code 1"),
        c.JobFailed(job_id="j", attempt=1, reason="node n-00 lost", node_lost=True, basis_seq=1),
        c.JobCancelled(job_id="j", attempt=1),
        c.JobPreempted(job_id="j", attempt=1),
    ]
    for ending in endings:
        log = Log("n-00")
        log.running("j")
        assert log.put("agent", ending) == [Action("ended", "j")], ending
        assert log.put("agent", ending) == [], ending  # stored twice: ended once


def test_only_the_reports_that_end_an_attempt_are_remembered():
    core = AgentCore(["n-00"])
    core.reporting(c.JobStarted, "j", 1)
    core.reporting(c.JobCheckpointed, "j", 1)
    assert core.reported_end == {}
    for kind in (c.JobSucceeded, c.JobFailed, c.JobCancelled, c.JobPreempted):
        core.reporting(kind, "j", 2)
        assert core.ending_reported("j", 2) and not core.ending_reported("j", 1)


# ---------------------------------------------------------------------- checkpoints


def test_checkpoints_are_remembered_by_attempt():
    log = Log("n-00")
    log.running("j")
    assert log.put("agent", c.JobCheckpointed(job_id="j", attempt=1, checkpoint_ref="s3://ck/1")) == []
    assert log.core.latest_checkpoint("j") == "s3://ck/1"
    assert log.core.checkpoint_of("j", 1) == "s3://ck/1"
    assert log.core.checkpoint_of("j", 2) is None
    log.put("agent", c.JobPreempted(job_id="j", attempt=1, checkpoint_ref="s3://ck/2"))
    log.put("scheduling", c.JobRequeued(job_id="j", attempt=1, checkpoint_ref="s3://ck/2"))
    log.scheduled("j", attempt=2)
    assert log.core.latest_checkpoint("j") == "s3://ck/2"  # the next attempt restarts from it
    assert log.core.checkpoint_of("j", 2) is None
    assert log.core.latest_checkpoint("other") is None


def test_a_preemption_without_a_reference_keeps_the_last_one():
    log = Log("n-00")
    log.running("j")
    log.put("agent", c.JobCheckpointed(job_id="j", attempt=1, checkpoint_ref="s3://ck/1"))
    log.put("agent", c.JobPreempted(job_id="j", attempt=1))
    assert log.core.latest_checkpoint("j") == "s3://ck/1"


# ---------------------------------------------------------------------- start-up


def test_resume_after_catching_up_says_what_to_do_for_each_job_here():
    log = Log("n-00")
    log.running("a-lost")  # the log says it runs: its process died with the old agent
    log.accepted("b-new")
    log.scheduled("b-new")  # scheduled, never started
    log.running("c-cancel")
    log.put("submission", c.JobStopRequested(job_id="c-cancel", attempt=1, reason="user"))
    log.running("d-preempt")
    log.put("preemption", c.PreemptionRequested(job_id="d-preempt", attempt=1, for_job="vip"))
    log.running("e-both")
    log.put("preemption", c.PreemptionRequested(job_id="e-both", attempt=1, for_job="vip"))
    log.put("submission", c.JobStopRequested(job_id="e-both", attempt=1))  # a cancel overrides a preemption
    log.running("f-done")
    log.put("agent", c.JobSucceeded(job_id="f-done", attempt=1))
    log.running("g-elsewhere", "n-01")
    log.accepted("h-pending")

    fresh = AgentCore(["n-00"])  # a restarted agent replays the log from the first record
    fresh.fold(readable(log.records, fresh.seq))
    assert fresh.resume() == log.core.resume() == [
        Action("lost", "a-lost"),
        Action("start", "b-new"),
        Action("cancelled", "c-cancel"),
        Action("preempted", "d-preempt"),
        Action("cancelled", "e-both"),
    ]
    assert fresh.seq == log.core.seq == len(log.records)


def test_a_restart_replays_to_the_same_state_whatever_the_batching():
    log = Log("n-00")
    log.running("j")
    log.put("agent", c.JobCheckpointed(job_id="j", attempt=1, checkpoint_ref="ck"))
    log.put("preemption", c.PreemptionRequested(job_id="j", attempt=1, for_job="vip"))
    log.running("k")
    one, many = AgentCore(["n-00"]), AgentCore(["n-00"])
    whole = one.fold(readable(log.records, 0))
    pieces = []
    for i in range(0, len(log.records), 3):
        pieces += many.fold(readable(log.records[: i + 3], many.seq))  # each batch repeats what came before
    assert whole == pieces == [Action("start", "j"), Action("preempt", "j"), Action("start", "k")]
    for core in (one, many):
        assert core.preemptions.keys() == {"j"} and core.checkpoints == {"j": (1, "ck")}
        assert core.resume() == [Action("preempted", "j"), Action("lost", "k")]


def test_a_restarted_agent_reports_one_ending_when_requests_race_its_report():
    """As in tests/front/test_chaos.py: the lost job's report comes first, so the core answers later requests
    with actions the adapter finds already reported (no second ending)."""
    log = Log("n-00")
    log.running("j")
    [lost] = log.core.resume()
    assert lost == Action("lost", "j")
    log.core.reporting(c.JobFailed, "j", 1)  # the adapter reports it
    assert log.put("preemption", c.PreemptionRequested(job_id="j", attempt=1, for_job="vip")) == [
        Action("preempt", "j")]
    assert log.put("submission", c.JobStopRequested(job_id="j", attempt=1)) == [Action("stop", "j")]
    assert log.core.ending_reported("j", 1)  # the adapter reports neither
    assert log.put("agent", c.JobFailed(job_id="j", attempt=1)) == [Action("ended", "j")]
    assert not log.core.ending_reported("j", 1)


# ---------------------------------------------------------------------- the node model


def test_local_nodes_and_their_registration():
    nodes = local_nodes(3, gpus_per_node=4, gpu_type="h100-sxm", cpus=8, prefix="n")
    assert [n.name for n in nodes] == ["n-00", "n-01", "n-02"]
    assert nodes[0].cpus_milli == 8000
    assert [(g.id, g.type, g.variant, g.numa_node) for g in nodes[0].gpus] == [
        ("gpu0", "h100", "sxm", 0), ("gpu1", "h100", "sxm", 0), ("gpu2", "h100", "sxm", 1), ("gpu3", "h100", "sxm", 1)]
    reg = nodes[1].registration("agent-a")
    assert (reg.node, reg.agent, reg.cpus_milli, len(reg.gpus)) == ("n-01", "agent-a", 8000, 4)
    assert reg.id.startswith("agent/NodeRegistered/n-01/") and reg.ts == 0.0  # the agent stamps the time
    assert reg.id == nodes[1].registration("agent-a").id  # deterministic: a restart registers it once
    changed = NodeSpec("n-01", 16000, nodes[1].memory_bytes, nodes[1].gpus)
    assert changed.registration("agent-a").id != reg.id  # a changed node registers the change
    assert len(local_nodes(100)[0].name) == len("node-00")


def test_the_core_and_the_node_model_import_no_io():
    impure = {"asyncio", "nats", "aiosqlite", "sqlite3", "socket", "subprocess", "random", "uuid", "os",
              "threading", "time", "services.runtime", "services.nodes.agent.app", "services.nodes.backends"}
    for name in ("agent/core.py", "spec.py"):
        tree = ast.parse((ROOT / "services" / "nodes" / name).read_text(encoding="utf-8"))
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        bad = {m for m in imported if any(m == p or m.startswith(p + ".") for p in impure)}
        assert not bad, (name, bad)
