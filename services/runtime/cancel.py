"""Stopping a task for sure.

``task.cancel(); await task`` can wait forever on Python 3.11: ``asyncio.wait_for`` (used by nats-py's
request and publish paths) swallows a cancellation that arrives in the same loop iteration as its
inner future's result (CPython gh-86296, fixed in 3.12), so a loop that runs until cancelled keeps
running. ``cancel_and_wait`` cancels again until the task has ended.
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["cancel_and_wait"]


async def cancel_and_wait(task: asyncio.Task[object] | asyncio.Future[object], every_s: float = 1.0) -> None:
    """Cancel ``task`` and wait until it has ended, cancelling it again every ``every_s`` in case a
    cancellation was swallowed. Its result or error is not raised (a stopped task's is not wanted); a
    cancellation of the caller is (after one more ``cancel`` of the task), unlike ``suppress(CancelledError)``
    around ``await task``, which would swallow it too."""
    while not task.done():
        task.cancel()
        try:
            await asyncio.wait({task}, timeout=every_s)  # returns when it ends, cancelled or not
        except asyncio.CancelledError:  # the caller itself is cancelled: so be it, and pass it on
            task.cancel()
            raise
    if not task.cancelled():
        with contextlib.suppress(BaseException):
            task.exception()
