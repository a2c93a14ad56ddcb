"""One filter per service: what a runner reads, and its switch to ``horizon.evt.>`` at the log's marker.

From the log's ``LogLayoutChanged`` (layout 2, published once by submission) on, every core
that declares ``layout_subjects`` (all but submission's) folds nothing of ``horizon.in.>``:
submission relays the operator inputs as ``InputRelayed`` events, and ``fold_event``
(``services/domain/protocol.py``) applies a relay as the input it carries and lets any other
input only move ``state.seq``. So such a core can read its one filter, ``horizon.evt.>``, and
fold exactly the state a fold of the whole log gives (the audit folds the whole log): nats-server
serves a consumer of one filter subject, and never two (docs/benchmarks.md section 2).

``LayoutReader`` is that part of ``ServiceRunner`` (``services/runtime/service.py``):

1. **Start.** A state that has folded the marker (a snapshot taken after it) reads the filter at
   once. Otherwise, if the log holds a marker at ``M``, the runner folds ``from..M`` of the whole
   log, then reads the filter from ``M + 1``; with no marker, the whole log, as before.
2. **Switch.** A runner that folds the marker while following (submission has just published it)
   replaces its follower by one on the filter, from its next sequence, between two batches (under
   the runner's lock: no batch is half-applied or half-decided when the old follower stops).
3. **The end of what it reads.** A filtered runner sees nothing of an input that no event follows
   (an operator input submission dead-letters), so its ``state.seq`` would stop short of the log's
   end, where waiters (the simulator's barrier, tests) expect "applied up to L". ``probe`` reads the
   log's end ``L`` and then the last event's sequence ``E``: when ``E <= state.seq``, every event up
   to ``L`` is applied and the records after the state are inputs, which would only move
   ``state.seq``; so ``state.seq = L``, as a fold of the whole log would have it, and the runner
   decides (or rests) there. It runs when the runner rests and once a second while it is idle.
   On a reader shared in the process (``fanout.py``) it asks the server nothing: every record the
   runner reads up to the follower's ``through`` is applied, so the state moves there (an input the
   reader reads after the runner rested is found by the probe a second later, or at the next rest).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from events.subjects import LAYOUT_MARKER
from services.domain.protocol import reads_events_only
from services.runtime.cancel import cancel_and_wait
from services.runtime.follow import read_through

__all__ = ["LayoutReader", "PROBE_EVERY_S"]

log = logging.getLogger("horizon.service")

PROBE_EVERY_S = 1.0  # an idle filtered runner checks the log's end this often (step 3)
PROBE_GAP_S = 0.1  # and at most this often when it rests often (a busy runner: two requests a probe)


class LayoutReader:
    """What ``runner`` reads (``subjects``), and the steps of the module docstring."""

    def __init__(self, runner: Any) -> None:  # a ServiceRunner (services/runtime/service.py imports this module)
        self.runner = runner
        self.switches = 0  # followers replaced by one on the filter (0 or 1)
        self._switch: asyncio.Task[None] | None = None
        self._probe: asyncio.Task[None] | None = None
        self._rested = asyncio.Event()

    @property
    def filtered(self) -> bool:
        """Whether the runner's state reads ``horizon.evt.>`` alone (the log's layout is 2)."""
        return reads_events_only(self.runner.core, self.runner.state)

    @property
    def subjects(self) -> tuple[str, ...]:
        core = self.runner.core
        return tuple(core.layout_subjects) if self.filtered else tuple(core.subjects)  # type: ignore[attr-defined]

    async def start_from(self, from_seq: int, end: int) -> int:
        """Step 1: fold the whole log up to the marker, if it is in ``from_seq..end``; where to read on."""
        runner = self.runner
        if self.filtered or not getattr(runner.core, "layout_subjects", None):
            return from_seq
        try:
            marker = await runner.log.last_seq(LAYOUT_MARKER)
        except Exception as exc:  # noqa: BLE001 - the whole log is always right to read
            log.warning("%s: cannot look for the layout marker (%s); reading the whole log", runner.name, exc)
            return from_seq
        if not from_seq <= marker <= end:
            return from_seq
        await read_through(runner.log, runner._apply, from_seq=from_seq, until_seq=marker,
                           subjects=runner.core.subjects)
        return max(from_seq, runner.state.seq + 1)

    def after_batch(self) -> None:
        """Step 2, if the state has just folded the marker: switch followers (a task of its own, since
        the old follower is the one calling)."""
        follower = self.runner._follower
        if (self._switch is None and follower is not None and self.filtered
                and tuple(getattr(follower, "subjects", ())) != self.subjects):
            self._switch = asyncio.create_task(self._switch_follower(), name=f"horizon-{self.runner.name}-filter")

    async def _switch_follower(self) -> None:
        runner = self.runner
        async with runner._lock:
            old = runner._follower
            await old.stop()
            runner._follower = runner.make_follower(runner.log, runner._on_batch, from_seq=runner.state.seq + 1,
                                                    subjects=self.subjects, name=f"horizon-{runner.name}")
        self.switches += 1
        log.info("%s: the log's layout is 2 from seq %d: reading %s alone from seq %d", runner.name,
                 runner.state.layout_seq, ", ".join(self.subjects), runner.state.seq + 1)
        await runner._follower.start()

    def replaced(self, follower: Any) -> bool:
        return follower is not self.runner._follower or (self._switch is not None and not self._switch.done())

    async def following(self) -> None:
        """Until the runner's follower ends (its error raised), across a switch of followers."""
        while True:
            follower = self.runner._follower
            try:
                await follower.wait()
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if (task is not None and task.cancelling()) or not self.replaced(follower):
                    raise
            else:
                if not self.replaced(follower):
                    return
            if self._switch is not None:
                await self._switch  # a switch that failed raises here

    # ---------------------------------------------------------------- step 3

    def rested(self) -> None:
        """The runner rests: probe the log's end soon (it reads the filter), starting the prober once."""
        if not self.filtered:
            return
        self._rested.set()
        if self._probe is None:
            self._probe = asyncio.create_task(self._prober(), name=f"horizon-{self.runner.name}-end")

    async def _prober(self) -> None:
        while True:
            # asyncio.wait, not wait_for: on Python 3.11 wait_for swallows a cancel that lands as the
            # event is set (gh-86296), and ``stop`` then waited for this loop for ever (a restart's
            # first incarnation never stopped: horizon bench's replay stage, intermittently).
            rested = asyncio.ensure_future(self._rested.wait())
            try:
                await asyncio.wait({rested}, timeout=PROBE_EVERY_S)
            finally:
                rested.cancel()
            self._rested.clear()
            await self.probe()
            await asyncio.sleep(PROBE_GAP_S)

    async def probe(self) -> bool:
        """Move the state to the log's end if only inputs lie past it; True if it moved."""
        runner = self.runner
        follower = runner._follower
        if getattr(follower, "through", None) is not None and follower.caught_up.is_set():
            # A reader shared in this process knows what it has read: every record up to ``through`` that
            # the runner reads is applied, so the rest up to there are inputs. No request to the server
            # (two a probe, which cost an idle horizon up ~3% of its time).
            async with runner._lock:
                end = follower.through
                return (self.filtered and runner._follower is follower and runner.state.seq < end
                        and await self._rest_at(end))
        try:
            end = await runner.log.last_seq()
            if end <= runner.state.seq:
                return False
            seen = runner.state.seq
            # the first event past the state (its filter's last one costs a visit of every subject it
            # matches: at a million jobs, most of nats-server's time while the cluster was idle)
            next_event = await runner.log.next_seq(self.subjects[0], seen)
        except Exception:  # noqa: BLE001 - the next probe, or the next event, will do
            return False
        async with runner._lock:
            return (self.filtered and (next_event == 0 or next_event > end) and runner.state.seq == seen < end
                    and await self._rest_at(end))

    async def _rest_at(self, end: int) -> bool:
        """Under the runner's lock: the state moved to ``end`` (only inputs lay between), deciding there."""
        runner = self.runner
        runner.state.seq = runner.stats.applied_seq = end
        await runner._decide_or_rest()
        return True

    async def stop(self) -> None:
        for task in (self._switch, self._probe):
            if task is not None and not task.done():
                await cancel_and_wait(task)  # for sure: a cancel swallowed by an await inside is sent again
