"""Every benchmark stage under a deadline: budgets derived from the stage's size, waits that say
what they waited for, and tasks that stop for sure.

A stage waits on things it counts (``JobScheduled`` read from the stream, ``JobAccepted`` ...).
``wait_for`` polls such a count until it is reached, checking meanwhile that the services it
started are alive (``processes.check_alive``: one that died ends the stage with its last log
lines), and fails with ``StageFailed`` once the budget is spent: the message names the stage,
what it waited for and how far it got (``scheduling: waited 300 s (budget 300 s) for 50,000
JobScheduled: 49,812 of 50,000 JobScheduled; 3 of 3 services alive; log at seq 150,114; 1,000
NodeLost seen; 41 cycles``).

``run_stage`` is the outer guard: the stage runs as a task; if it has not ended within its
budget (plus a grace for its own waits to fail first with the better message), it is cancelled
(``cancel_and_wait``: Python 3.11's ``asyncio.wait_for`` can swallow a cancellation, which is
what hung ``horizon bench`` in issue 35) and every process the harness started is stopped by
its PID. ``status`` is what the stage says it is doing, for that message.

Budgets: ``budget(base_s, per_item_s, n)`` = (``base_s`` + ``n`` x ``per_item_s``) x the budget
factor (``$HORIZON_BENCH_BUDGET``, default 1; tests use a small one to see a stage fail fast).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from services.runtime.cancel import cancel_and_wait

__all__ = ["StageFailed", "budget", "budget_factor", "wait_for", "run_stage", "status", "stop_tasks", "close_within"]

T = TypeVar("T")


class StageFailed(RuntimeError):
    """A stage did not finish within its budget, or a service it ran died; the message says which and why."""


def budget_factor() -> float:
    raw = os.environ.get("HORIZON_BENCH_BUDGET", "").strip()
    if not raw:
        return 1.0
    try:
        factor = float(raw)
    except ValueError:
        raise StageFailed(f"HORIZON_BENCH_BUDGET={raw!r} is not a number (a factor on every stage's budget)") from None
    if factor <= 0:
        raise StageFailed(f"HORIZON_BENCH_BUDGET={raw!r} must be above 0")
    return factor


def budget(base_s: float, per_item_s: float = 0.0, n: int = 0) -> float:
    """Seconds a wait may take: ``base_s`` plus ``per_item_s`` for each of ``n`` items, times the factor."""
    return (base_s + per_item_s * n) * budget_factor()


_status: dict[str, str] = {}


def status(stage: str, text: str) -> None:
    """What ``stage`` is doing now (the outer guard's message if its budget runs out there)."""
    _status[stage] = text


async def wait_for(stage: str, what: str, reached: Callable[[], bool], budget_s: float,
                   progress: Callable[[], Awaitable[str] | str] | None = None, *, every_s: float = 0.01) -> float:
    """Until ``reached()``; seconds waited. ``StageFailed`` naming ``stage`` and ``what`` (with
    ``progress()``: how far it got) once ``budget_s`` has passed, or at once if a service died."""
    from services.front.bench.processes import check_alive

    status(stage, f"waiting for {what}")
    started = time.monotonic()
    while not reached():
        waited = time.monotonic() - started
        try:
            check_alive()
        except RuntimeError as exc:
            raise StageFailed(f"{stage}: waiting for {what}: {exc}") from None
        if waited > budget_s:
            told = progress() if progress is not None else ""
            if told is not None and not isinstance(told, str):
                try:
                    told = await asyncio.wait_for(told, 10.0)
                except Exception as exc:  # noqa: BLE001 - the message goes out with what is known
                    told = f"(progress unknown: {type(exc).__name__})"
            raise StageFailed(f"{stage}: waited {waited:.0f} s (budget {budget_s:.0f} s) for {what}"
                              + (f": {told}" if told else ""))
        await asyncio.sleep(every_s)
    return time.monotonic() - started


async def stop_tasks(*tasks: asyncio.Task[Any] | None) -> None:
    """Cancel each task and wait until it has ended, whatever it swallows (``cancel_and_wait``)."""
    for task in tasks:
        if task is not None:
            await cancel_and_wait(task, every_s=0.5)


async def close_within(*closing: Awaitable[Any], timeout_s: float = 10.0) -> None:
    """Close connections without letting a stuck close hold the stage (the figures are taken)."""
    for aw in closing:
        task = asyncio.ensure_future(aw)
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
        if not done:
            await cancel_and_wait(task, every_s=0.5)
        elif not task.cancelled():
            task.exception()  # retrieved: an error closing is not the benchmark's


async def run_stage(stage: str, work: Callable[[], Awaitable[T]], budget_s: float, grace_s: float = 30.0) -> T:
    """``work()`` as a task; ``StageFailed`` if it has not ended ``budget_s`` + ``grace_s`` after its
    start (cancelled, its processes stopped by PID). Its own ``StageFailed`` passes through; any other
    error becomes one naming the stage."""
    from services.front.bench.processes import stop_all

    _status.pop(stage, None)
    task = asyncio.ensure_future(work())
    started = time.monotonic()
    try:
        done, _ = await asyncio.wait({task}, timeout=budget_s + grace_s)
        if not done:
            doing = _status.get(stage, "running")
            await asyncio.wait({asyncio.ensure_future(cancel_and_wait(task, every_s=0.5))}, timeout=60.0)
            raise StageFailed(f"{stage}: not finished {time.monotonic() - started:.0f} s after its start "
                              f"(budget {budget_s:.0f} s); it was {doing}")
        try:
            return task.result()
        except StageFailed:
            raise
        except (asyncio.TimeoutError, TimeoutError) as exc:
            raise StageFailed(f"{stage}: timed out ({exc or 'no detail'}); it was {_status.get(stage, 'running')}") from None
        except Exception as exc:  # noqa: BLE001 - one stage's failure is reported; the others still run
            raise StageFailed(f"{stage}: {type(exc).__name__}: {exc}") from exc
    finally:
        stop_all()
