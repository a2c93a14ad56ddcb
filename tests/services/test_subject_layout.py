"""One filter per service (issue 35; docs/architecture.md, "One filter per service"), on a real nats-server.

From the log's layout marker (``LogLayoutChanged``, decided once by submission) on, submission relays
every operator input as ``InputRelayed`` and the other services read ``horizon.evt.>`` alone: one
filter subject per consumer (JetStream's own consumer info says so). Each configuration is applied
once, at its relay, and answered as before (``ConfigRejected.request_seq``, inventory's answers: the
input's own sequence). A log written before the marker existed (the raw inputs, no relay) replays
through the audit with nothing amiss, a service of this version started on it applies those inputs,
and a log that changes layout half-way audits clean.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from events import catalogue as c
from events.codec import decode, encode
from events.subjects import EVENTS_ONLY, STREAM, WHOLE_LOG, admin_subject
from services.front.registry import make_core
from services.runtime.fanout import SharedReader
from services.runtime.jetstream import JetStreamLog
from services.runtime.replay import audit
from services.runtime.service import ServiceRunner
from services.submission.core import SubmissionCore
from tests.e2e import job_json, read_log, wait_until

pytestmark = pytest.mark.timeout(120)

SERVICES = ("submission", "scheduling", "placement", "preemption", "inventory")


def _node(name: str) -> c.NodeRegistered:
    return c.NodeRegistered(id=f"agent/NodeRegistered/{name}/1", source=f"agent/{name}", correlation_id=name, node=name,
                            cpus_milli=8000, memory_bytes=32 << 30, simulated=True)


class Services:
    """The five decision services, each a ``ServiceRunner`` on its own connection, as ``horizon service``
    runs one (``new``: this version's submission, which marks the layout; else the version before)."""

    def __init__(self, url: str, new: bool = True, shared: bool = False) -> None:
        self.url = url
        self.shared = shared  # one reader for all five, as in horizon up (services/runtime/fanout.py)
        self.reader: SharedReader | None = None
        self.cores = [make_core(name) for name in SERVICES]
        if not new:
            self.cores[0] = SubmissionCore()  # no marker: what the version before wrote
        self.runners: dict[str, ServiceRunner[Any]] = {}
        self.logs: list[JetStreamLog] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def start(self) -> Services:
        if self.shared:
            reader_log = await JetStreamLog.open(self.url, name="layout-reader")
            self.logs.append(reader_log)
            self.reader = SharedReader(reader_log)
        for core in self.cores:
            log = await JetStreamLog.open(self.url, name=f"layout-{core.name}")
            runner = ServiceRunner(log, core)
            if self.reader is not None:
                runner.make_follower = self.reader.follow
            self.logs.append(log)
            self.runners[core.name] = runner
            self.tasks.append(asyncio.create_task(runner.run()))
            await wait_until(lambda r=runner: r.ready.is_set(), 20, f"{core.name} to start")
        return self

    async def quiet(self, log: JetStreamLog) -> int:
        """Until every service has applied the log to its end and has nothing to decide."""
        while True:
            end = await log.last_seq()
            await wait_until(lambda: all(r.idle_seq >= end for r in self.runners.values())
                             or any(t.done() for t in self.tasks), 30, f"every service to rest at {end}")
            assert not any(t.done() for t in self.tasks), [t.exception() for t in self.tasks if t.done()]
            if await log.last_seq() == end:
                return end

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for log in self.logs:
            await log.close()


async def _publish(log: JetStreamLog, subject: str, event: c.Event, msg_id: str) -> int:
    return (await log.publish(subject, encode(event), msg_id=msg_id)).seq


async def _filters(log: JetStreamLog) -> list[str]:
    """The filter subject of every consumer on the stream, as the server has them."""
    out = []
    for info in await log.js.consumers_info(STREAM):
        config = info.config
        out.append(config.filter_subject or ",".join(config.filter_subjects or []))
    return out


def _decisions(records: list[Any], kind: str) -> list[Any]:
    return [decode(r.data) for r in records if r.subject.split(".")[3:4] == [kind]]


def _audit_clean(records: list[Any]) -> int:
    report = audit(records, [make_core(name) for name in SERVICES])
    assert report.mismatches == [], report.mismatches[:3]
    assert report.reproduced == report.decisions
    return report.decisions


async def test_a_new_log_is_read_with_one_filter_and_each_configuration_applies_once(js_log, nats_server):
    services = await Services(nats_server.url).start()
    try:
        await _publish(js_log, "horizon.evt.agent.NodeRegistered.n1", _node("n1"), "n1")
        await services.quiet(js_log)
        records = await read_log(nats_server.url)
        [marker] = _decisions(records, "LogLayoutChanged")
        assert marker.id == "submission/LogLayoutChanged/2" and marker.basis_seq >= 1
        for name, runner in services.runners.items():
            wanted = WHOLE_LOG if name == "submission" else EVENTS_ONLY
            assert runner.layout.subjects == wanted, name
            assert tuple(runner._follower.subjects) == wanted, name
        # the server's view: four consumers on horizon.evt.> alone, one (submission's) on the whole log
        filters = sorted(await _filters(js_log))
        assert filters == sorted([*EVENTS_ONLY * 4, *WHOLE_LOG]), filters

        good = await _publish(js_log, admin_subject("policy"), c.PolicyConfigured(policy="fcfs"), "policy-1")
        bad = await _publish(js_log, admin_subject("policy"), c.PolicyConfigured(policy="nonsense"), "policy-2")
        part = await _publish(js_log, admin_subject("partition"), c.PartitionConfigured(name="gpu", nodes=["n1"]),
                              "partition-1")
        cordon = await _publish(js_log, admin_subject("node"), c.NodeCommandIssued(node="n1", action="cordon"),
                                "node-1")
        await _publish(js_log, "horizon.in.acme.submit", c.JobSubmitted(job_id="j1", tenant="acme",
                                                                         command=["true"]), "j1")
        await services.quiet(js_log)
        scheduling = services.runners["scheduling"].state
        assert scheduling.config.policy == "fcfs"
        assert scheduling.partitions.view("gpu") is not None and scheduling.partitions.view("gpu").exists
        assert scheduling.relayed_seq == cordon and scheduling.layout_seq == marker_seq(records)
        assert services.runners["inventory"].state.cluster.nodes["n1"].cordoned

        records = await read_log(nats_server.url)
        relays = _decisions(records, "InputRelayed")
        assert [(r.request_seq, r.verb) for r in relays] == [(good, "policy"), (bad, "policy"),
                                                               (part, "partition"), (cordon, "node")]
        assert all(r.id == f"submission/InputRelayed/{r.request_seq}" for r in relays)
        # the bad one is answered once, by the scheduler, naming the input's own seq
        rejected = _decisions(records, "ConfigRejected")
        assert [(r.source, r.request_seq) for r in rejected] == [("scheduling", bad)], rejected
        [cordoned] = _decisions(records, "NodeCordoned")
        assert cordoned.causation_id == f"seq:{cordon}"
        # a tenant's input is never relayed, and nothing past the marker is read raw
        assert not any(r.verb == "submit" for r in relays)
        _audit_clean(records)

        # an operator input no event follows (undecodable: submission dead-letters it): the services that
        # read horizon.evt.> alone still rest at the log's end (the probe), as a fold of the whole log would
        garbage = (await js_log.publish(admin_subject("account"), b'{"type": "AccountConfigured"}',
                                        msg_id="garbage")).seq
        await services.quiet(js_log)
        assert all(r.idle_seq >= garbage for r in services.runners.values())
    finally:
        await services.stop()


async def test_on_a_shared_reader_the_services_rest_past_trailing_inputs_without_asking_the_server(js_log,
                                                                                                  nats_server):
    """The probe of step 3 (services/runtime/layout.py) on a reader shared in the process: the reader
    knows what it has read, so an input no event follows moves every filtered service's state to
    the log's end without a request to the server (``next_seq``: none)."""
    services = await Services(nats_server.url, shared=True).start()
    try:
        await _publish(js_log, "horizon.evt.agent.NodeRegistered.n1", _node("n1"), "n1")
        await services.quiet(js_log)
        asked: dict[str, int] = {}
        for name, runner in services.runners.items():
            def counted(subject: str, after: int, name: str = name, inner: Any = runner.log.next_seq) -> Any:
                asked[name] = asked.get(name, 0) + 1
                return inner(subject, after)
            runner.log.next_seq = counted  # type: ignore[method-assign]
        garbage = (await js_log.publish(admin_subject("account"), b'{"type": "AccountConfigured"}',
                                        msg_id="garbage")).seq
        await services.quiet(js_log)
        assert all(r.idle_seq >= garbage for r in services.runners.values())
        filtered = [name for name in SERVICES if name != "submission"]
        assert all(services.runners[name].layout.filtered for name in filtered)
        assert not any(asked.get(name) for name in filtered), asked
        _audit_clean(await read_log(nats_server.url))
    finally:
        await services.stop()


def marker_seq(records: list[Any]) -> int:
    return next(r.seq for r in records if ".LogLayoutChanged." in r.subject)


async def test_an_old_layout_log_replays_and_a_new_service_applies_its_raw_inputs(js_log, nats_server):
    """The version before: no marker, the raw inputs folded where they are. Its log audits clean with this
    version's cores; this version started on it marks the layout, reads the raw inputs before the marker
    (the scheduler's policy), relays what follows, and the whole log, both layouts, audits clean."""
    old = await Services(nats_server.url, new=False).start()
    try:
        await _publish(js_log, "horizon.evt.agent.NodeRegistered.n1", _node("n1"), "n1")
        await _publish(js_log, admin_subject("policy"), c.PolicyConfigured(policy="sjf"), "policy-1")
        bad = await _publish(js_log, admin_subject("account"), c.AccountConfigured(account="a", parent="nowhere"),
                             "account-1")
        await _publish(js_log, admin_subject("node"), c.NodeCommandIssued(node="n1", action="cordon"), "node-1")
        await _publish(js_log, admin_subject("node"), c.NodeCommandIssued(node="n1", action="uncordon"), "node-2")
        for i in range(3):
            await js_log.publish("horizon.in.acme.submit", job_json(f"j{i}", command=["true"]), msg_id=f"j{i}")
        await old.quiet(js_log)
        assert old.runners["scheduling"].layout.subjects == WHOLE_LOG  # no marker: the whole log, as before
    finally:
        await old.stop()
    records = await read_log(nats_server.url)
    assert not _decisions(records, "LogLayoutChanged") and not _decisions(records, "InputRelayed")
    assert [r.request_seq for r in _decisions(records, "ConfigRejected")] == [bad]
    assert _decisions(records, "JobScheduled")
    assert _audit_clean(records) > 0

    new = await Services(nats_server.url).start()
    try:
        await new.quiet(js_log)
        scheduling = new.runners["scheduling"]
        assert scheduling.state.config.policy == "sjf"  # the raw input, folded where it is
        assert scheduling.state.layout == 2 and scheduling.layout.subjects == EVENTS_ONLY
        await _publish(js_log, admin_subject("policy"), c.PolicyConfigured(policy="fcfs"), "policy-2")
        bad2 = await _publish(js_log, admin_subject("fairshare"), c.FairShareConfigured(half_life_s=-1), "fs-1")
        await _publish(js_log, admin_subject("node"), c.NodeCommandIssued(node="n1", action="cordon"), "node-3")
        await js_log.publish("horizon.in.acme.submit", job_json("j9", command=["true"]), msg_id="j9")
        await new.quiet(js_log)
        assert scheduling.state.config.policy == "fcfs"
        assert new.runners["inventory"].state.cluster.nodes["n1"].cordoned
    finally:
        await new.stop()
    records = await read_log(nats_server.url)
    marker = marker_seq(records)
    assert [r.request_seq for r in _decisions(records, "ConfigRejected")] == [bad, bad2]
    assert all(r.request_seq > marker for r in _decisions(records, "InputRelayed"))
    _audit_clean(records)


async def test_a_snapshot_after_the_marker_resumes_on_the_filter(js_log, nats_server):
    """A scheduling snapshot taken after the marker holds the layout: a restart reads horizon.evt.> at once."""
    services = Services(nats_server.url)
    services.cores[1].snapshot_every = 5
    await services.start()
    try:
        await _publish(js_log, "horizon.evt.agent.NodeRegistered.n1", _node("n1"), "n1")
        for i in range(8):
            await js_log.publish("horizon.in.acme.submit", job_json(f"j{i}", command=["true"]), msg_id=f"j{i}")
        await services.quiet(js_log)
        await services.runners["scheduling"].flush_snapshots()
        assert services.runners["scheduling"].stats.snapshots_saved >= 1
    finally:
        await services.stop()
    records = await read_log(nats_server.url)
    log = await JetStreamLog.open(nats_server.url, name="layout-restart")
    core = make_core("scheduling")
    runner = ServiceRunner(log, core)
    try:
        await runner.start()
        assert runner.stats.restored_from_seq > marker_seq(records)
        assert runner.state.layout == 2 and tuple(runner._follower.subjects) == EVENTS_ONLY
        assert runner.layout.switches == 0  # read on the filter from the start
    finally:
        await runner.stop()
        await log.close()


async def test_on_the_replay_benchmarks_log_scheduling_reads_only_the_events(nats_server):
    """The replay benchmark's log (5 records a job, one the client's JobSubmitted) with the marker first:
    the scheduling runner replaying it from seq 1 reads the 4 events of each job and the marker, and
    folds the state a fold of the whole log gives (the same pending jobs and sequence)."""
    from events.subjects import event_subject
    from services.front.bench.restart import _publish_lifecycles
    from services.runtime.log import Outgoing

    log = await JetStreamLog.open(nats_server.url, name="layout-bench")
    marker = c.LogLayoutChanged(id="submission/LogLayoutChanged/2", correlation_id="log", source="submission")
    await log.publish_many([Outgoing(event_subject("submission", marker), encode(marker), marker.id)])
    await _publish_lifecycles(log, 0, 500)
    end = await log.last_seq()
    runner = ServiceRunner(log, make_core("scheduling"), snapshots=False)
    read = 0
    apply = runner._apply

    async def counting(batch: Any) -> None:
        nonlocal read
        read += len(batch)
        await apply(batch)

    runner._apply = counting  # type: ignore[method-assign]
    try:
        await runner.start()
        assert read == 1 + 4 * 500 and end == 1 + 5 * 500
        assert runner.state.seq == end and tuple(runner._follower.subjects) == EVENTS_ONLY
        whole = make_core("scheduling")
        state = whole.initial()
        from services.runtime.service import fold_record
        for record in await read_log(nats_server.url):
            state, _, _ = fold_record(whole, state, record)
        assert whole.dump(state) == runner.core.dump(runner.state)
    finally:
        await runner.stop()
        await log.close()


async def test_partition_leaders_read_the_one_filter_too(js_log, nats_server):
    """A scheduling and a placement leader of partition ``gpu`` (docs/scaling.md) fold the marker and read
    horizon.evt.> alone, as the whole cluster's leaders do; the partition configured after the marker
    reaches them relayed."""
    from services.front.registry import service_part
    from services.runtime.parts import PartSettings

    services = Services(nats_server.url)
    services.cores = [make_core("submission"), *(service_part(name, ("gpu",)).make_core(PartSettings())
                                                 for name in ("scheduling", "placement"))]
    await services.start()
    try:
        await _publish(js_log, "horizon.evt.agent.NodeRegistered.n1", _node("n1"), "n1")
        await services.quiet(js_log)
        part = await _publish(js_log, admin_subject("partition"), c.PartitionConfigured(name="gpu", nodes=["n1"]),
                              "partition-1")
        await services.quiet(js_log)
        for name in ("scheduling-gpu", "placement-gpu"):
            runner = services.runners[name]
            assert tuple(runner._follower.subjects) == EVENTS_ONLY and runner.layout.switches == 1, name
            assert runner.state.relayed_seq == part and runner.state.partitions.view("gpu").exists, name
        assert sorted(await _filters(js_log)) == sorted([*EVENTS_ONLY * 2, *WHOLE_LOG])
    finally:
        await services.stop()


def test_the_fold_applies_raw_inputs_before_the_marker_and_only_submissions_relays_after_it():
    """The rule of ``fold_event`` on a pure core: before the marker a raw input applies where it is; after
    it a raw input only moves ``seq`` (not "now"), a relay on submission's subject applies the input it
    carries at the relay's place (answers name the input's seq), and a relay anyone else publishes, or one
    carrying what its verb does not take, applies nothing."""
    import msgspec

    from services.domain.protocol import Record, fold_event

    core = make_core("scheduling")
    state = core.initial()
    seq = 0

    def fold(subject: str, event: c.Event, time: float = 0.0) -> None:
        nonlocal state, seq
        seq += 1
        state = fold_event(core, state, Record(seq, subject, encode(event), 1000.0 + seq + time), event)

    def relay(owner: str, request_seq: int, verb: str, event: c.Event) -> c.InputRelayed:
        return c.InputRelayed(id=f"{owner}/InputRelayed/{request_seq}", request_seq=request_seq, verb=verb,
                              input=msgspec.Raw(encode(event)), basis_seq=seq)

    fold(admin_subject("policy"), c.PolicyConfigured(policy="sjf"))
    assert state.config.policy == "sjf"  # no marker: the raw input applies
    fold("horizon.evt.submission.InputRelayed.seq-1", relay("submission", 1, "policy", c.PolicyConfigured(policy="fcfs")))
    assert state.config.policy == "sjf"  # a relay before the marker applies nothing
    fold("horizon.evt.submission.LogLayoutChanged.log", c.LogLayoutChanged(id="submission/LogLayoutChanged/2",
                                                                          basis_seq=seq))
    assert state.layout == 2 and state.layout_seq == seq
    now = state.now
    fold(admin_subject("policy"), c.PolicyConfigured(policy="fcfs"), time=100.0)
    raw = seq
    assert state.config.policy == "sjf" and state.seq == raw and state.now == now  # only seq moves
    fold("horizon.evt.agent.InputRelayed.seq-9", relay("agent", raw, "policy", c.PolicyConfigured(policy="fcfs")))
    fold("horizon.evt.submission.InputRelayed.seq-8", relay("submission", raw, "account", c.PolicyConfigured()))
    assert state.config.policy == "sjf"  # forged, or not what the verb takes
    fold("horizon.evt.submission.InputRelayed.seq-4", relay("submission", raw, "policy", c.PolicyConfigured(policy="fcfs")))
    assert state.config.policy == "fcfs" and state.relayed_seq == raw and state.dirty_seq == seq
    fold("horizon.evt.submission.InputRelayed.seq-5", relay("submission", raw + 1, "policy",
                                                           c.PolicyConfigured(policy="nonsense")))
    assert list(state.config_rejections) == [raw + 1]  # answered under the input's seq, not the relay's


async def test_the_switch_to_the_filter_under_a_burst_loses_and_repeats_nothing(js_log, nats_server):
    """This version started on the version before's log while a burst of submissions arrives: the services
    read the whole log, fold the marker submission publishes, switch followers mid-burst, and every job
    gets one verdict and at most one placement, every decision replayed."""
    big = c.NodeRegistered(id="agent/NodeRegistered/big/1", source="agent/big", correlation_id="big", node="big",
                           cpus_milli=1_000_000, memory_bytes=4 << 40, simulated=True)
    old = await Services(nats_server.url, new=False).start()
    try:
        await _publish(js_log, "horizon.evt.agent.NodeRegistered.big", big, "big")
        await _publish(js_log, admin_subject("policy"), c.PolicyConfigured(policy="fcfs"), "policy-1")
        await old.quiet(js_log)
    finally:
        await old.stop()
    new = Services(nats_server.url)

    async def burst() -> None:
        for i in range(0, 300, 20):
            await asyncio.gather(*(js_log.publish("horizon.in.acme.submit", job_json(f"b{j}", command=["true"]),
                                                  msg_id=f"b{j}") for j in range(i, i + 20)))

    sending = asyncio.create_task(burst())
    await asyncio.sleep(0.05)  # the burst under way
    await new.start()
    try:
        await sending
        await _publish(js_log, admin_subject("node"), c.NodeCommandIssued(node="big", action="cordon"), "node-1")
        await new.quiet(js_log)
        assert all(new.runners[n].layout.subjects == EVENTS_ONLY for n in SERVICES[1:])
    finally:
        await new.stop()
    records = await read_log(nats_server.url)
    submitted = [r.seq for r in records if r.subject == "horizon.in.acme.submit"]
    assert submitted[0] < marker_seq(records)  # the burst began before (measured: the marker lands in its first third)
    accepted = [e.job_id for e in _decisions(records, "JobAccepted")]
    scheduled = [e.job_id for e in _decisions(records, "JobScheduled")]
    assert sorted(accepted) == sorted(f"acme:b{j}" if ":" in accepted[0] else f"b{j}" for j in range(300))
    assert len(scheduled) == len(set(scheduled)) and scheduled
    assert len(_decisions(records, "NodeCordoned")) == 1
    _audit_clean(records)
