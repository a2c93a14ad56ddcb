"""``cancel_and_wait`` ends a task even when a cancellation is swallowed (as ``asyncio.wait_for`` can on
Python 3.11, CPython gh-86296), where ``task.cancel(); await task`` would wait forever."""

from __future__ import annotations

import asyncio

import pytest

from services.runtime.cancel import cancel_and_wait


async def _swallows_once(swallowed: list[int]) -> None:
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if not swallowed:
                swallowed.append(1)  # a lost cancellation: the loop goes on
                continue
            raise


@pytest.mark.timeout(10)
async def test_a_swallowed_cancellation_is_repeated_until_the_task_ends():
    swallowed: list[int] = []
    task = asyncio.create_task(_swallows_once(swallowed))
    await asyncio.sleep(0)
    await cancel_and_wait(task, every_s=0.05)
    assert task.cancelled() and swallowed == [1]


@pytest.mark.timeout(10)
async def test_a_plain_await_would_not_have_ended_it():
    swallowed: list[int] = []
    task = asyncio.create_task(_swallows_once(swallowed))
    await asyncio.sleep(0)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=0.2)
    assert not done and swallowed == [1]
    await cancel_and_wait(task, every_s=0.05)
    assert task.done()


@pytest.mark.timeout(10)
async def test_a_task_that_failed_or_finished_is_left_as_it_ended():
    async def boom() -> None:
        raise RuntimeError("x")

    failed = asyncio.create_task(boom())
    await asyncio.sleep(0)
    await cancel_and_wait(failed)  # its error is not raised here
    assert isinstance(failed.exception(), RuntimeError)


@pytest.mark.timeout(10)
async def test_the_callers_own_cancellation_is_not_swallowed():
    never: list[int] = [1] * 1000  # swallows every cancellation but the last of many

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if never:
                    never.pop()
                    continue
                raise

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    stopper = asyncio.create_task(cancel_and_wait(task, every_s=5.0))
    await asyncio.sleep(0.05)
    stopper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopper
    never.clear()
    await cancel_and_wait(task, every_s=0.05)
