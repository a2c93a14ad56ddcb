"""A graceful stop never cuts a decision round: what was decided at a basis is published whole.

``Stack.stop`` (Ctrl-C on ``horizon up``) cancels each part's task. When the cancel lands while a
round is between two of its publishes, the log used to keep the first decisions only, and
``horizon audit`` then reported the rest "decided by replay but missing from the log" (the flake
of ``test_sbatch``'s good scripts). The round is now published whole and the stop waits for it.
The log here is a real JetStream log; the wrapper only holds the round after its first message,
so the cancel lands exactly there every time.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest

from events import catalogue as c
from events.base import Event
from events.codec import encode
from events.subjects import WHOLE_LOG, input_subject
from services.domain.protocol import CoreState, Record
from services.runtime.jetstream import JetStreamLog
from services.runtime.log import Outgoing
from services.runtime.replay import replay_decisions
from services.runtime.service import ServiceRunner
from tests.e2e import read_log

pytestmark = pytest.mark.timeout(60)


class AnswerState(CoreState):
    def __init__(self) -> None:
        super().__init__()
        self.unanswered: dict[str, int] = {}  # job -> the seq of its submission


class AnswerCore:
    """Rejects every job submitted: one round answers all the jobs it has read."""

    name: ClassVar[str] = "toy"
    subjects = WHOLE_LOG
    virtual_time = False

    def initial(self) -> AnswerState:
        return AnswerState()

    def evolve(self, state: AnswerState, event: Event, record: Record) -> AnswerState:
        if isinstance(event, c.JobSubmitted):
            state.unanswered[event.job_id] = record.seq
        elif isinstance(event, c.JobRejected):
            state.unanswered.pop(event.job_id, None)
        return state

    def decide(self, state: AnswerState) -> list[Event]:
        return [c.JobRejected(id=f"toy/JobRejected/{job}", ts=state.now, correlation_id=job, source=self.name,
                              job_id=job, tenant="acme", reason=f"submitted at {seq}", basis_seq=state.seq)
                for job, seq in sorted(state.unanswered.items())]


class HeldAfterFirst:
    """A real log whose first round is held after its first message until ``go`` is set."""

    def __init__(self, inner: JetStreamLog) -> None:
        self.inner = inner
        self.first_stored = asyncio.Event()
        self.go = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def publish_many(self, items: Any) -> Any:
        if self.first_stored.is_set():
            return await self.inner.publish_many(items)
        acks = await self.inner.publish_many(items[:1])
        self.first_stored.set()
        await self.go.wait()
        return acks + await self.inner.publish_many(items[1:])


async def test_a_stop_during_a_round_publishes_the_whole_round_and_it_replays(nats_server):
    log = await JetStreamLog.open(nats_server.url, name="stop-mid-round")
    try:
        jobs = ["a", "b", "c"]
        await log.publish_many([Outgoing(input_subject("acme", "submit"),
                                         encode(c.JobSubmitted(job_id=j, tenant="acme", command=["true"])), j)
                                for j in jobs])
        held = HeldAfterFirst(log)
        runner = ServiceRunner(held, AnswerCore(), snapshots=False)  # type: ignore[arg-type]
        task = asyncio.create_task(runner.run())
        await asyncio.wait_for(held.first_stored.wait(), 20)
        task.cancel()  # as Stack.stop does, with the round between its first and second message
        await asyncio.sleep(0.2)
        assert not task.done(), "the stop did not wait for the round it interrupted"
        held.go.set()
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 20)

        records = await read_log(nats_server.url)
        answered = [r.msg_id for r in records if ".JobRejected." in r.subject]
        assert answered == [f"toy/JobRejected/{j}" for j in jobs]
        report = replay_decisions(AnswerCore(), records)
        assert report.decisions == report.reproduced == 3 and not report.mismatches, report
    finally:
        await log.close()
