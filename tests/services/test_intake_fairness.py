"""The intake's fairness, pure (services/submission/intake_fairness.py): one queue per tenant served
in turn, a token bucket per tenant, and what an input costs in it. The time is passed in."""

from __future__ import annotations

import asyncio

from events import catalogue as c
from events.codec import encode
from events.vocabulary import TenantLimits
from services.submission.intake_fairness import FairQueue, TokenBuckets, input_cost, rate_refusal

DEFAULTS = TenantLimits()


def test_a_tenants_backlog_delays_another_tenants_input_by_one_of_its_own():
    queue: FairQueue[str] = FairQueue()
    for i in range(1, 6):
        queue.put("acme", f"a{i}")
    queue.put("globex", "g1")  # sent after acme's five
    queue.put("initech", "i1")
    queue.put("globex", "g2")
    assert queue.queued("acme") == 5 and len(queue) == 8
    got = [queue.get_nowait() for _ in range(len(queue))]
    assert got == ["a1", "g1", "i1", "a2", "g2", "a3", "a4", "a5"]  # in turn; each tenant's in its order
    queue.put("globex", "g3")
    assert asyncio.run(queue.get()) == "g3"


def test_the_bucket_worked_through_sixty_thousand_inputs_in_two_seconds():
    buckets = TokenBuckets()
    taken = sum(buckets.take("acme", DEFAULTS, now=i * 2.0 / 60_000) for i in range(60_000))
    assert 1_195 <= taken <= 1_200  # the burst, then 100 a second for 2 s
    assert buckets.take("globex", DEFAULTS, now=2.0)  # another tenant's bucket is its own
    assert not buckets.take("acme", DEFAULTS, now=2.0)
    assert sum(buckets.take("acme", DEFAULTS, now=12.0) for _ in range(3_000)) == 1_000  # full again, no more


def test_an_array_costs_its_tasks_and_one_larger_than_the_bucket_leaves_it_in_debt():
    buckets = TokenBuckets()
    assert [buckets.take("acme", DEFAULTS, 0.0, cost=1_000) for _ in range(2)] == [True, False]
    assert not buckets.take("acme", DEFAULTS, 9.9, cost=1_000)
    assert buckets.take("acme", DEFAULTS, 10.0, cost=1_000)  # 100 a second: one more every 10 s
    raised = TenantLimits(max_array_tasks=10_000)
    assert buckets.take("globex", raised, 0.0, cost=10_000)  # full, so it passes, and owes 9,000
    assert not buckets.take("globex", raised, 89.9)  # 9,000 at 100 a second: 90 s
    assert buckets.take("globex", raised, 90.1)
    assert all(TokenBuckets().take("acme", TenantLimits(max_inputs_per_s=0), 0.0) for _ in range(10_000))


def test_what_an_input_costs():
    def cost(verb: str, **kw: object) -> int:
        event = c.JobSubmitted(job_id="x", tenant="acme", **kw) if verb == "submit" else c.JobCancelRequested(
            job_id="x", tenant="acme")
        return input_cost(verb, encode(event), DEFAULTS)

    assert cost("submit") == 1 and cost("cancel") == 1
    assert cost("submit", array="0-999") == 1_000
    assert cost("submit", array="0-999%10") == 1_000
    assert cost("submit", array="0-1000") == 1  # over max_array_tasks: the core rejects it for a parse
    assert cost("submit", array="9-2") == 1  # not valid: the core says why
    assert input_cost("submit", b"not json", DEFAULTS) == 1
    assert input_cost("submit", b'{"array": ["0-999"]}', DEFAULTS) == 1


def test_the_refusal_names_the_limit_and_the_command_that_raises_it():
    words = rate_refusal("acme", DEFAULTS)
    assert words.startswith("max_inputs_per_s: tenant 'acme' sent more than 1,000 inputs at once and 100 a second")
    assert "this input was not stored" in words
    assert "horizon tenant set acme --max-inputs-per-s N --burst N" in words


class _Wire:
    """What the intake publishes, without a server (its writer is not started: inputs stay queued)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []

    async def publish(self, subject: str, data: bytes, **_: object) -> None:
        self.sent.append((subject, data))


class _Msg:
    def __init__(self, tenant: str, n: int) -> None:
        self.subject, self.reply, self.headers = f"horizon.intake.{tenant}.cancel", f"_INBOX.{tenant}.{n}", None
        self.data = encode(c.JobCancelRequested(job_id=f"j-{n}", tenant=tenant))


def test_the_intake_answers_at_once_past_a_tenants_rate_or_backlog_and_queues_the_others():
    import json

    from services.submission.intake import IntakeServer

    limits = {"acme": TenantLimits(max_inputs_per_s=0), "globex": TenantLimits(burst=2, max_inputs_per_s=0.001)}
    wire = _Wire()
    intake = IntakeServer(wire, limits=limits.__getitem__, max_queued=3)

    async def send() -> None:
        for n in range(5):
            await intake._take(_Msg("acme", n))
            await intake._take(_Msg("globex", n))

    asyncio.run(send())
    answers = {subject: json.loads(data)["error"] for subject, data in wire.sent}
    assert sorted(answers) == ["_INBOX.acme.3", "_INBOX.acme.4", "_INBOX.globex.2", "_INBOX.globex.3",
                               "_INBOX.globex.4"]
    assert {a["code"] for a in answers.values()} == {429}
    assert answers["_INBOX.acme.3"]["description"].startswith("the intake holds 3 inputs of tenant 'acme' not yet "
                                                              "stored")
    assert answers["_INBOX.globex.2"]["description"].startswith("max_inputs_per_s: tenant 'globex' sent more than 2")
    assert (intake._queue.queued("acme"), intake._queue.queued("globex")) == (3, 2)
    assert intake.throttled == {"acme": 2, "globex": 3}
