"""Fairness at the intake: each tenant's inputs in a queue of their own, served in turn, and a
token bucket per tenant in front of them (docs/tenants.md, Limits and fairness).

The intake stores inputs in the log one writer at a time, about 5,000 a second on a 2-core
machine. With one queue for everyone, a tenant that sends 60,000 inputs at once puts every other
tenant's next input behind all of them (measured before this: 12 s). Here:

* **one queue per tenant, served round robin** (``FairQueue``): the writer takes one input of each
  tenant that has any, in turn, so another tenant's input waits for at most one input of each
  tenant with a backlog, not for the backlog;
* **a token bucket per tenant** (``TokenBuckets``): a tenant may send ``burst`` inputs at once,
  then ``max_inputs_per_s`` a second on average (``TenantLimits``; 0: no limit). An input over it
  is answered at once with an error naming the limit and is not stored: the log, which every
  service reads in order and where no fairness can be restored afterwards, stays short. The bucket
  reads the clock, which is why it is the edge's to decide and no decision core's.
* **an array costs its tasks** (``input_cost``): one submission of a 1,000-task array becomes
  1,000 jobs that every service folds, so it takes 1,000 tokens, and the work a tenant can put in
  the log at once is bounded, not only its messages. Measured before this: twenty 1,000-task
  arrays sent at once delayed another tenant's job by 2.2 s (docs/tenants.md).

Pure: the caller passes the time (``loop.time()``). Each intake instance keeps its own buckets, so
with N submission instances answering a tenant may get up to N times its rate (the queue group
spreads its requests over them).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec

from events.arrays import parse_array
from events.vocabulary import Limits, TenantLimits

__all__ = ["FairQueue", "TokenBuckets", "input_cost", "rate_refusal", "backlog_refusal"]

T = TypeVar("T")


class FairQueue(Generic[T]):
    """FIFO queues, one per tenant, served round robin: ``get`` takes the oldest item of the next
    tenant in turn that has one. A tenant's items keep their order."""

    def __init__(self) -> None:
        self._queues: dict[str, deque[T]] = {}
        self._turns: deque[str] = deque()  # the tenants with items, in the order they are served
        self._ready = asyncio.Event()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def queued(self, tenant: str) -> int:
        queue = self._queues.get(tenant)
        return len(queue) if queue is not None else 0

    def put(self, tenant: str, item: T) -> None:
        queue = self._queues.get(tenant)
        if queue is None:
            queue = self._queues[tenant] = deque()
        if not queue:
            self._turns.append(tenant)
        queue.append(item)
        self._size += 1
        self._ready.set()

    def get_nowait(self) -> T:
        """The next item in turn; ``IndexError`` when there is none."""
        tenant = self._turns.popleft()
        queue = self._queues[tenant]
        item = queue.popleft()
        self._size -= 1
        if queue:
            self._turns.append(tenant)  # its next item waits for one of every other tenant's
        else:
            del self._queues[tenant]
        if not self._size:
            self._ready.clear()
        return item

    async def get(self) -> T:
        while not self._size:
            await self._ready.wait()
        return self.get_nowait()


@dataclass(slots=True)
class _Bucket:
    tokens: float
    time: float


class TokenBuckets:
    """A token bucket per tenant: it holds up to ``burst`` tokens (``max_inputs_per_s`` when burst is
    0), refills at ``max_inputs_per_s``, and each input takes its cost (``input_cost``: 1, or an
    array's tasks). An input costing more than the bucket holds passes when the bucket is full and
    leaves it in debt. A tenant seen first starts full.

    Worked through, at the defaults (100 a second, a burst of 1,000): 60,000 inputs sent in 2 s are
    taken 1,000 + 2 x 100 = 1,200, and the other 58,800 are refused; after a quiet 10 s the bucket
    is full again. Twenty 1,000-task arrays sent at once: one is taken, then one every 10 s."""

    def __init__(self) -> None:
        self._buckets: dict[str, _Bucket] = {}

    def take(self, tenant: str, limits: TenantLimits, now: float, cost: int = 1) -> bool:
        """Whether ``tenant`` may send an input costing ``cost`` at ``now`` (and take its tokens if so)."""
        rate = limits.max_inputs_per_s
        if rate <= 0:
            return True
        capacity = float(limits.burst) if limits.burst > 0 else max(1.0, rate)
        bucket = self._buckets.get(tenant)
        if bucket is None:
            bucket = self._buckets[tenant] = _Bucket(capacity, now)
        bucket.tokens = min(capacity, bucket.tokens + max(0.0, now - bucket.time) * rate)
        bucket.time = now
        if bucket.tokens < min(float(cost), capacity):
            return False
        bucket.tokens -= cost
        return True


class _Peek(msgspec.Struct):
    array: Any = None


_peek = msgspec.json.Decoder(_Peek)
_MAX_TASKS = Limits().max_array_tasks


def input_cost(verb: str, data: bytes, limits: TenantLimits) -> int:
    """What an input costs in a tenant's bucket: an array's submission its tasks (the jobs it will
    make), anything else 1. An array the tenant may not submit (over ``max_array_tasks``) or that
    is not valid costs 1: the submission core rejects it, which costs it a parse."""
    if verb != "submit":
        return 1
    try:
        array = _peek.decode(data).array
        if not isinstance(array, str):
            return 1
        tasks = len(parse_array(array, max_tasks=_MAX_TASKS).indices)
    except Exception:  # noqa: BLE001 - not JSON, not an object, not an array: the core's verdict says why
        return 1
    if limits.max_array_tasks and tasks > limits.max_array_tasks:
        return 1
    return max(1, tasks)


def rate_refusal(tenant: str, limits: TenantLimits) -> str:
    """What a tenant over its rate is told (the input was not stored)."""
    burst = limits.burst if limits.burst > 0 else max(1, int(limits.max_inputs_per_s))
    return (f"max_inputs_per_s: tenant {tenant!r} sent more than {burst:,} inputs at once and "
            f"{limits.max_inputs_per_s:g} a second since, each array task counting as one (its limits "
            f"max_inputs_per_s={limits.max_inputs_per_s:g}, burst={burst}); this input was not stored: send it "
            f"again in a moment (an operator raises them: horizon tenant set {tenant} --max-inputs-per-s N --burst N)")


def backlog_refusal(tenant: str, queued: int) -> str:
    """What a tenant is told when the intake already holds as many of its inputs as it keeps."""
    return (f"the intake holds {queued:,} inputs of tenant {tenant!r} not yet stored, as many as it keeps for one "
            f"tenant; this input was not stored: send it again in a moment")
