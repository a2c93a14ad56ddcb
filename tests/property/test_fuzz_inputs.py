"""Bad input, fuzzed: every input gets its answer or a dead letter, and nothing crashes.

Two levels (strategies in ``tests/fuzz_inputs.py``):

1. **The pure cores**, many examples: one fuzzed message is folded, as a stored record, into
   the five cores (seeded with two nodes and a few jobs) and they decide until they rest. Every
   input yields a dead letter (it does not decode for its subject) or its answer: a submission
   one ``JobRejected`` or its ``JobAccepted`` (one per array task), a request about a job at
   least one answer, a node command one, an operator's configuration at most one
   ``ConfigRejected`` per service. Nothing raises, every decision encodes to a message the
   server accepts (headers included) and the cores rest.
2. **The real services** on a real nats-server: a fuzzed batch is published, then every input
   has exactly that answer or its dead letter on ``horizon.dlq.submission``, no part stopped,
   the whole-log checker passes and every decision replays.

And oversized messages: the server refuses them before they reach the log, and the CLI says so
in one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections import Counter, defaultdict
from typing import Any

import nats
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from events import catalogue as c
from events.codec import DecodeError, encode
from events.subjects import RELAYED_VERBS, event_subject, parse_subject, valid_job_key, valid_token
from services.nodes.spec import local_nodes
from services.inventory.core import InventoryCore
from services.placement.core import PlacementCore
from services.preemption.core import PreemptionCore
from services.front.host.check import check_log
from services.runtime.consume import decode_record
from services.runtime.jetstream import JetStreamLog
from services.domain.protocol import MSG_ID, Record
from services.runtime.replay import replay_decisions
from services.runtime.service import fold_record
from services.front.host.stack import Stack
from services.scheduling.core import SchedulingCore
from services.domain.quoting import bounded_id
from services.submission.core import SubmissionCore
from tests.e2e import read_log, wait_until
from tests.fuzz_inputs import SEED_NODES, messages
from tests.helpers import node

MAX_PAYLOAD = 1 << 20  # nats-server's default max_payload, and the HORIZON stream's max_msg_size
REQUEST_VERBS = ("cancel", "hold", "release", "update")
CONFIG_VERBS = ("account", "fairshare", "policy", "profile", "preemption", "reservation", "partition", "partition-policy",
                "license")


# ------------------------------------------------------------------ level 1: the pure cores


def _cores() -> list[Any]:
    # as the services run: submission marks the log's layout, then relays operator inputs (relay.py)
    return [SubmissionCore(mark_layout=True), SchedulingCore(), PlacementCore(), PreemptionCore(), InventoryCore()]


class World:
    """The five cores folding one log, as the runners do (decode, fold, decide, publish, fold back)."""

    def __init__(self) -> None:
        self.cores = [(core, core.initial()) for core in _cores()]
        self.records: list[Record] = []
        self.ids: set[str] = set()
        self.time = 1_700_000_000.0

    def fold(self, subject: str, data: bytes, msg_id: str) -> str | None:
        """Store and fold one message; the decode error if it does not decode (the same for every core)."""
        self.time += 0.001
        record = Record(len(self.records) + 1, subject, data, self.time, {MSG_ID: msg_id})
        self.records.append(record)
        errors = set()
        for i, (core, state) in enumerate(self.cores):
            state, _event, error = fold_record(core, state, record)
            self.cores[i] = (core, state)
            errors.add(error)
        assert len(errors) == 1, errors
        return errors.pop()

    def settle(self, rounds: int = 30) -> list[c.Event]:
        """Decide until every core rests; each decision is checked to be publishable, then folded."""
        out: list[c.Event] = []
        for _ in range(rounds):
            quiet = True
            for core, state in list(self.cores):
                for event in core.decide(state):
                    quiet = False
                    assert event.id not in self.ids, f"{core.name} decided {event.id!r} again"
                    self.ids.add(event.id)
                    data, subject = encode(event), event_subject(core.name, event)
                    assert publishable(subject, data, event.id), (core.name, event.event_type, len(data))
                    assert self.fold(subject, data, event.id) is None
                    out.append(event)
            if quiet:
                return out
        raise AssertionError("the cores did not come to rest")


def publishable(subject: str, data: bytes, msg_id: str) -> bool:
    """What the server takes: a subject of plain tokens (the last a job's key, which may be
    ``<tenant>:<id>``), a one-line msg id, all within max_payload."""
    header = len(MSG_ID) + len(msg_id.encode("utf-8", "replace")) + 64
    *head, last = subject.split(".")
    return (all(valid_token(t) for t in head) and valid_job_key(last)
            and "\r" not in msg_id and "\n" not in msg_id and len(msg_id) <= 1024
            and len(data) + header <= MAX_PAYLOAD)


def _seeded() -> list[Record]:
    world = World()
    for name in SEED_NODES:
        world.fold(f"horizon.evt.agent.NodeRegistered.{name}", encode(node(name, gpus=4)), f"reg/{name}")
    seeds = [
        c.JobSubmitted(job_id="seed-pending", tenant="acme", resources=c.ResourceRequest(gpus=1, gpu_type="a100"),
                       command=["true"]),
        # fits no node, whatever runs: a selector no node matches (64 GPUs on 4-GPU nodes are refused at submission)
        c.JobSubmitted(job_id="seed-big", tenant="acme", resources=c.ResourceRequest(gpus=4), priority_class="high",
                       node_selector={"zone": "nowhere"}, command=["true"]),
        c.JobSubmitted(job_id="seed-array", tenant="acme", array="0-2", resources=c.ResourceRequest(gpus=4),
                       command=["true"]),
    ]
    for sub in seeds:
        world.fold("horizon.in.acme.submit", encode(sub), sub.job_id)
    world.settle()
    return world.records


SEED = _seeded()


def fresh_world() -> World:
    world = World()
    for record in SEED:
        world.fold(record.subject, record.data, record.msg_id or "")
    world.settle()  # nothing: every seed input is answered in SEED
    world.ids = {r.msg_id for r in SEED if r.msg_id}
    return world


def known_before(seq: int, inputs: list[tuple[int, str, bytes]], events: list[c.Event]) -> set[str]:
    """Job ids a submission stored at ``seq`` finds taken (so it is the same job and gets no verdict):
    those submitted earlier, and the tasks of arrays submitted earlier."""
    known = set()
    for s, subject, data in inputs:
        if s < seq and subject.endswith(".submit"):
            try:
                known.add(bounded_id(decode_record(Record(s, subject, data, 0.0)).job_id))  # type: ignore[attr-defined]
            except DecodeError:
                pass
    known.update(e.job_id for e in events if isinstance(e, c.JobAccepted) and e.submitted_seq < seq)
    return known


def expect_answer(subject: str, data: bytes, seq: int, error: str | None, answers: list[c.Event],
                  verdicts: set[str]) -> None:
    """The rule every input obeys, at both levels. ``answers``: decisions caused by ``seq``.
    ``verdicts``: job ids taken before it (a resubmission is answered "already submitted")."""
    parsed = parse_subject(subject)
    assert parsed is not None
    # a relay (layout 2) is no answer: an operator input of a relayed verb, relayed at most once
    relays = [e for e in answers if isinstance(e, c.InputRelayed)]
    answers = [e for e in answers if not isinstance(e, c.InputRelayed)]
    assert not relays or (len(relays) == 1 and error is None and parsed.kind == "admin"
                          and parsed.name in RELAYED_VERBS and relays[0].request_seq == seq), relays
    by = Counter((e.source, e.event_type) for e in answers)
    if error is not None:
        if parsed.kind == "input":  # a client's: its verdict, on its feed (the dead letter is the operators')
            [verdict] = answers
            assert isinstance(verdict, c.InputRejected), (error, answers)
            assert verdict.tenant == bounded_id(parsed.owner) and verdict.input_seq == seq and verdict.reason
        else:
            assert answers == [], (error, answers)
        return
    if parsed.name == "submit":
        sub = decode_record(Record(seq, subject, data, 0.0))
        accepted = by[("submission", "JobAccepted")]
        rejected = by[("submission", "JobRejected")]
        if bounded_id(sub.job_id) in verdicts and not accepted + rejected:  # type: ignore[attr-defined]
            assert [(e.event_type, e.verb) for e in answers] == [("RequestRejected", "submit")], by
            return  # the same job again: answered, no second verdict
        assert (rejected == 1 and not accepted) or (accepted >= 1 and not rejected), by
        assert set(by) <= {("submission", "JobAccepted"), ("submission", "JobRejected")}, by
    elif parsed.name in REQUEST_VERBS:
        # submission's verdicts, once per job; an agent's JobCancelled with the same causation is the
        # cancel of a started job carried out (after its JobStopRequested), not a second verdict
        said = [e for e in answers if e.source == "submission"]
        carried = [e for e in answers if e.source != "submission"]
        assert said and len({getattr(e, "job_id", None) for e in said}) == len(said), by  # once per job
        stopped = {e.job_id for e in said if e.event_type == "JobStopRequested"}  # type: ignore[attr-defined]
        assert all(e.event_type == "JobCancelled" and e.source.startswith("agent/")
                   and e.job_id in stopped for e in carried), by  # type: ignore[attr-defined]
    elif parsed.name == "node":
        # one answer about the node; a drain with --migrate also plans each of its running jobs' move, once each
        about_node = [e for e in answers if e.event_type != "JobDrainPlanned"]
        planned = [e.job_id for e in answers if e.event_type == "JobDrainPlanned"]
        assert len(about_node) == 1 and all(e.source == "inventory" for e in answers), by
        assert len(set(planned)) == len(planned), by
    else:
        assert parsed.name in CONFIG_VERBS
        assert all(e.event_type == "ConfigRejected" for e in answers), by
        assert all(n == 1 for n in by.values()), by  # at most one per service


def caused_by(seq: int, events: list[c.Event]) -> list[c.Event]:
    return [e for e in events if e.causation_id == f"seq:{seq}"]


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(message=messages())
def test_a_fuzzed_input_gets_its_answer_or_a_dead_letter_from_the_pure_cores(message):
    check_one(*message)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(message=messages(typed=True))
# a job id shaped like a tenant's key: its answer's subject ends in a key with ':' (found by CI)
@example(message=("horizon.in._admin.cancel", b'{"type": "JobCancelRequested", "job_id": "0:0", "tenant": "_admin"}'))
def test_a_well_typed_input_with_bad_values_gets_its_answer_from_the_pure_cores(message):
    """Well-typed JSON, most with a good job id: odd values reach validation and, accepted, every core."""
    check_one(*message)


def check_one(subject: str, data: bytes) -> None:
    world = fresh_world()
    verdicts = set(world.cores[0][1].verdicts)
    error = world.fold(subject, data, "fuzz")
    seq = len(world.records)
    out = world.settle()
    if error is not None:
        assert isinstance(error, str) and error
    expect_answer(subject, data, seq, error, caused_by(seq, out), verdicts)
    result = check_log(world.records)
    assert result.ok, result.problems[:3]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(batch=st.lists(messages(), min_size=2, max_size=8))
def test_a_fuzzed_sequence_keeps_every_answer_and_the_cores_replay_it(batch):
    """Several inputs in a row (later ones can name what earlier ones created), then replay."""
    world = fresh_world()
    seeded = set(world.cores[0][1].verdicts)
    inputs = []
    for i, (subject, data) in enumerate(batch):
        error = world.fold(subject, data, f"fuzz-{i}")
        inputs.append((len(world.records), subject, data, error))
    out = world.settle()
    for seq, subject, data, error in inputs:
        known = seeded | known_before(seq, [(s, j, d) for s, j, d, _ in inputs], out)
        expect_answer(subject, data, seq, error, caused_by(seq, out), known)
    assert check_log(world.records).ok
    for core in _cores():
        report = replay_decisions(core, world.records)
        assert report.mismatches == [], (core.name, report.mismatches[:2])


# ------------------------------------------------------------------ level 2: the real services


async def _quiet(stack: Stack, log: JetStreamLog, timeout_s: float = 120.0) -> None:
    """Until every service has applied the whole log and has nothing more to decide."""
    runners = [getattr(p.obj, "runner", p.obj) for name, p in stack.parts.items()
               if name in ("submission", "scheduling", "placement", "preemption", "inventory")]
    while True:
        end = await log.last_seq()
        await wait_until(lambda: all(r.idle_seq >= end for r in runners) or bool(stack.failed()), timeout_s,
                         f"every service to rest at seq {end}")
        assert stack.failed() == []
        if await log.last_seq() == end:
            return


def fuzzed_batch(n: int, typed: bool | None = None) -> list[tuple[str, bytes]]:
    """``n`` messages as hypothesis generates them one example after another (so they are as
    varied as the examples of the tests above, not the variations of one list)."""
    batch: list[tuple[str, bytes]] = []

    @settings(max_examples=n, deadline=None, phases=[Phase.generate], database=None,
              suppress_health_check=list(HealthCheck))
    @given(message=messages(typed=typed))
    def collect(message: tuple[str, bytes]) -> None:
        batch.append(message)

    collect()
    return batch


async def test_a_fuzzed_batch_through_the_real_services_gets_one_answer_or_dead_letter_each(nats_server, tmp_path):
    batch = fuzzed_batch(100) + fuzzed_batch(100, typed=True)
    stack = Stack(nats_server.url, tmp_path / "stack", nodes=local_nodes(2, gpus_per_node=4), executor="sim",
                  tick_interval_s=None)
    await stack.start()
    log = await JetStreamLog.open(nats_server.url, name="fuzzer", create=False)
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream(timeout=10)
        for record in SEED:  # the seed jobs, so that requests name real ones
            if record.subject.startswith("horizon.in."):
                await js.publish(record.subject, record.data, headers={MSG_ID: record.msg_id})
        await _quiet(stack, log)
        inputs: list[tuple[int, str, bytes]] = []
        for i, (subject, data) in enumerate(batch):
            ack = await js.publish(subject, data, headers={MSG_ID: f"fuzz-{i}"})
            inputs.append((ack.seq, subject, data))
        await _quiet(stack, log)
        records = await read_log(nats_server.url)
        letters = await log.dead_letters()
    finally:
        await nc.close()
        await log.close()
        await stack.stop()
    events = []
    for record in records:
        try:
            events.append(decode_record(record))
        except DecodeError:
            pass
    by_cause: dict[str, list[c.Event]] = defaultdict(list)
    for event in events:
        by_cause[event.causation_id or ""].append(event)
    assert {d.service for d in letters} <= {"submission"}, letters[:3]
    parked = Counter(d.seq for d in letters)
    assert set(parked.values()) <= {1}, parked
    seeds = {"seed-pending", "seed-big", "seed-array", "seed-array_0", "seed-array_1", "seed-array_2"}
    outcomes: Counter[str] = Counter()
    for seq, subject, data in inputs:
        try:
            decode_record(Record(seq, subject, data, 0.0))
            error = None
        except DecodeError as exc:
            error = str(exc)
        answers = by_cause[f"seq:{seq}"]
        if error is None and parse_subject(subject).kind == "admin" and parse_subject(subject).name in RELAYED_VERBS:
            assert [type(e) for e in answers].count(c.InputRelayed) == 1, (seq, subject)  # past the marker
        if error is not None:
            assert parked[seq] == 1, (seq, subject, error)
            outcomes["dead letter"] += 1
        else:
            assert parked[seq] == 0, (seq, subject)
            outcomes[",".join(sorted({e.event_type for e in answers if not isinstance(e, c.InputRelayed)}))
                     or "applied"] += 1
        expect_answer(subject, data, seq, error, answers, seeds | known_before(seq, inputs, events))
    print(f"{len(inputs)} fuzzed inputs: {dict(outcomes.most_common())}")
    assert outcomes["dead letter"] < len(inputs)  # the batch reached validation, not just the decoder
    result = check_log(records)
    assert result.ok, result.problems[:5]
    for core in _cores():
        report = replay_decisions(core, records)
        assert report.mismatches == [], (core.name, report.mismatches[:2])


# ------------------------------------------------------------------ oversized messages


async def test_garbage_as_large_as_the_server_takes_is_dead_lettered_whole_or_cut(nats_server, tmp_path):
    """The dead letter carries the message plus headers (error, subject, seq): for a message near
    max_payload that is more than the server takes, so the letter keeps the start of the body and
    says how long it was (the whole message stays in the log at its sequence)."""
    stack = Stack(nats_server.url, tmp_path / "stack", executor="sim", tick_interval_s=None)
    await stack.start()
    log = await JetStreamLog.open(nats_server.url, name="fuzzer", create=False)
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream(timeout=10)
        big = b"\xff" * (nc.max_payload - 100)  # with its 30 bytes of headers, just under the limit
        small = b"\x00 not json"
        acks = [await js.publish("horizon.in.acme.submit", data, headers={MSG_ID: f"g{i}"})
                for i, data in enumerate([big, small])]
        await _quiet(stack, log, timeout_s=30)
        letters = {d.seq: d for d in await log.dead_letters("submission")}
        assert stack.failed() == []
    finally:
        await nc.close()
        await log.close()
        await stack.stop()
    assert sorted(letters) == [a.seq for a in acks]
    cut, whole = letters[acks[0].seq], letters[acks[1].seq]
    assert whole.data == small and "not a JSON object" in whole.error
    assert big.startswith(cut.data) and len(cut.data) < len(big)
    assert f"{len(big):,} bytes" in cut.error and "not a JSON object" in cut.error


async def test_the_server_refuses_a_message_over_max_payload_and_nothing_is_stored(nats_server):
    """Below every client: a raw PUB of 2 MB gets the server's error and the log stays empty."""
    log = await JetStreamLog.open(nats_server.url, name="setup")
    try:
        reader, writer = await asyncio.open_connection(nats_server.host, nats_server.port)
        info = await reader.readline()
        assert info.startswith(b"INFO ") and b'"max_payload":1048576' in info
        writer.write(b'CONNECT {"verbose":false,"pedantic":false}\r\n')
        # The size comes first, in the control line: the server refuses there, before the body.
        writer.write(b"PUB horizon.in.acme.submit 2000000\r\n")
        await writer.drain()
        answer = b""
        with contextlib.suppress(ConnectionError):
            while b"-ERR" not in answer:
                line = await asyncio.wait_for(reader.readline(), 10)
                if not line:
                    break
                answer += line
        writer.close()
        assert b"Maximum Payload" in answer
        assert await log.last_seq() == 0
    finally:
        await log.close()


def test_horizon_submit_with_a_huge_command_says_why_in_one_line_and_stores_nothing(nats_server):
    async def setup_and_last_seq(create: bool) -> int:
        log = await JetStreamLog.open(nats_server.url, name="setup", create=create)
        try:
            return await log.last_seq()
        finally:
            await log.close()

    assert asyncio.run(setup_and_last_seq(True)) == 0
    words = ["x" * 110_000] * 11  # 1.2 MB of arguments (the kernel takes 128 KiB per argument)
    out = subprocess.run([sys.executable, "-m", "services.front.cli.main", "submit", "--nats", nats_server.url,
                          "--tenant", "acme", "--", *words], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    assert "1,048,576 bytes" in out.stderr and "too large" in out.stderr, out.stderr
    assert asyncio.run(setup_and_last_seq(False)) == 0
