"""A small decision round goes as a chain of fenced messages (services/runtime/service.py, ``_publish_fenced``).

A real-time service's round of up to ``CHAIN_MAX`` decisions is published one
fenced message after another, each fenced on the one before, instead of as
an atomic batch (which JetStream syncs to disk as it commits it). Against a
real nats-server, with a toy core that answers every submission with two
decisions:

1. the round is stored whole, in order, and the runner folds both back;
2. a successor's claim (services/runtime/claim.py) and decision landing between the chain's
   messages cut the chain: the part stored stays (a decision made at its basis), the rest is
   refused by the fence, and the runner, once it has read the log, decides
   what the state still calls for, the missing decision included.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest

from events import catalogue as c
from events.base import Event
from events.codec import encode
from events.subjects import WHOLE_LOG, event_subject, input_subject
from services.domain.protocol import CoreState, Record
from services.runtime.claim import LeaderClaim
from services.runtime.jetstream import JetStreamLog
from services.runtime.lease import Lease
from services.runtime.log import LogUnavailable
from services.runtime.service import CHAIN_MAX, ServiceRunner
from tests.e2e import events_of, read_log, wait_until

pytestmark = pytest.mark.timeout(60)


class _State(CoreState):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []
        self.answered: set[str] = set()


class _TwoAnswers:
    """Answers each submitted job with ``JobRejected`` twice, under ids ``chain/a/J`` and ``chain/b/J``."""

    name: ClassVar[str] = "chain"
    subjects: tuple[str, ...] = WHOLE_LOG
    virtual_time = False

    def initial(self) -> _State:
        return _State()

    def evolve(self, state: _State, event: Event, record: Record) -> _State:
        if isinstance(event, c.JobSubmitted):
            state.seen.append(event.job_id)
        elif isinstance(event, c.JobRejected):
            state.answered.add(event.id)
        return state

    def decide(self, state: _State) -> list[Event]:
        return [c.JobRejected(id=f"chain/{part}/{job}", correlation_id=job, source=self.name, job_id=job, tenant="acme",
                              reason=part, basis_seq=state.seq)
                for job in state.seen for part in ("a", "b") if f"chain/{part}/{job}" not in state.answered]


async def _leader(url: str, log: Any) -> ServiceRunner[Any]:
    runner = ServiceRunner(log, _TwoAnswers(), lease=Lease(log.nc, "chain", ttl_s=5, holder="one"))
    await runner.start()
    await wait_until(lambda: runner.leading, 10, "the lease")
    return runner


async def _submit(log: JetStreamLog, job: str) -> None:
    body = c.JobSubmitted(job_id=job, tenant="acme", resources=c.ResourceRequest(cpus=1))
    await log.publish(input_subject("acme", "submit"), encode(body), msg_id=job)


def _answers(records: list[Record]) -> list[str]:
    return [e.id for e in events_of(records) if isinstance(e, c.JobRejected)]


async def test_a_round_of_two_is_stored_whole_and_in_order(nats_server: Any) -> None:
    assert CHAIN_MAX >= 2
    log = await JetStreamLog.open(nats_server.url, name="chain")
    runner = await _leader(nats_server.url, log)
    try:
        await _submit(log, "j1")
        await wait_until(lambda: len(runner.state.answered) == 2, 10, "both answers folded back")
        assert _answers(await read_log(nats_server.url)) == ["chain/a/j1", "chain/b/j1"]
        assert runner.stats.fenced == 0 and runner.stats.decisions == 2
    finally:
        await runner.stop()
        await log.close()


class _Interloper:
    """The runner's log, but after the chain's first message a successor claims the lead and its decision lands."""

    def __init__(self, inner: JetStreamLog) -> None:
        self.inner = inner
        self.cut = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def publish_fenced(self, items: Any, fence: Any) -> Any:
        acks = await self.inner.publish_fenced(items, fence)
        if not self.cut and items[0].msg_id == "chain/a/j1":
            self.cut = True
            assert await LeaderClaim("chain", "successor").take(self.inner)  # a successor claims, then decides
            other = c.JobRejected(id="chain/other/j0", correlation_id="j0", source="chain", job_id="j0", tenant="acme",
                                  reason="a successor's decision", basis_seq=1)
            await self.inner.publish(event_subject("chain", other), encode(other), msg_id=other.id)
        return acks


@contextlib.asynccontextmanager
async def _j1_answered(url: str, wrap: Any) -> AsyncIterator[tuple[Any, ServiceRunner[Any]]]:
    """A leader on ``wrap(log)``, once it has answered a submission of j1 both ways."""
    inner = await JetStreamLog.open(url, name="chain")
    log = wrap(inner)
    runner = await _leader(url, log)
    try:
        await _submit(inner, "j1")
        await wait_until(lambda: {"chain/a/j1", "chain/b/j1"} <= runner.state.answered, 10, "both answers")
        yield log, runner
    finally:
        await runner.stop()
        await inner.close()


async def test_a_chain_cut_by_a_successor_keeps_its_first_part_and_the_rest_is_decided_again(nats_server: Any) -> None:
    async with _j1_answered(nats_server.url, _Interloper) as (log, runner):
        await asyncio.sleep(0.2)
        assert log.cut and runner.stats.fenced == 1
        # a/j1 was stored before the successor's decision; b/j1 was refused then, and decided again after it
        assert _answers(await read_log(nats_server.url)) == ["chain/a/j1", "chain/other/j0", "chain/b/j1"]


class _Unanswering:
    """The runner's log, but the first two questions about the claim subject time out (a server restarting)."""

    def __init__(self, inner: JetStreamLog) -> None:
        self.inner = inner
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def last_seq(self, subject: str | None = None) -> int:
        if subject is not None and subject.endswith(".LeadershipClaimed.lease") and self.refused < 2:
            self.refused += 1
            raise LogUnavailable(f"last message on {subject}: TimeoutError")
        return await self.inner.last_seq(subject)


async def test_a_claim_the_log_cannot_answer_is_asked_again_and_the_leader_decides(nats_server: Any) -> None:
    async with _j1_answered(nats_server.url, _Unanswering) as (log, runner):
        assert log.refused == 2 and runner.claim is not None and runner.claim.claims == 1
        assert _answers(await read_log(nats_server.url)) == ["chain/a/j1", "chain/b/j1"]
