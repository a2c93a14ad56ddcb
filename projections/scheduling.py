"""The scheduler's standing as a read model: fair-share usage (like sshare) and each job's priority.

This view folds the log through the scheduling core itself (``evolve`` only,
never ``decide``), so the shares, usage, factors and reasons it shows are
exactly the ones the scheduler decides on, as of the last event it applied.
The fold is in memory; what it shows is materialised in SQLite by
``StandingStore`` (``projections/standing.py``: queue, nodes and allocations,
usage and its hourly history, each flush one transaction with its sequence),
and the list queries are answered from there with paging and filters.

The fold is stored with the rows (``projections/fold_state.py``): with every
flush while dumping it costs at most ``state_cheap_s``, else once at least
``state_every`` records have passed since the last one, and at stop. ``start``
loads it and follows the log from the next sequence (``services/runtime/follow.py``);
without one it can trust, it folds from sequence 1 (``horizon projections rebuild``
always does).

Served on (queue group ``projections``; the answers not read from the store are pure
functions of the folds, ``projections/scheduling_reports.py``):

* ``horizon.query.queue`` -> ``{"jobs": [...], "total", "offset", "last_seq", "now", "policy"}``:
  pending jobs in scheduling order (``rank``), then held ones, each with its priority and
  factors, why it waits, each filter's verdict and its reservation; filters ``tenant``,
  ``account``, ``user``, ``state``, ``priority_class``, ``job_id``; ``limit`` and ``offset``;
* ``horizon.query.nodes`` -> ``{"nodes": [...], "total", "offset", "last_seq"}`` (like sinfo), each
  node with the jobs on it; filters ``state``, ``node``, ``gpu_type``; paged;
* ``horizon.query.allocations`` -> every running attempt's share of each node; filters ``node``,
  ``job_id``, ``tenant``, ``account``, ``user``, ``state`` (SCHEDULED or RUNNING); paged;
* ``horizon.query.queue.<tenant>``, ``horizon.query.allocations.<tenant>``: the same, about that
  tenant's jobs only (what a tenant's account imports under ``deploy/nats/auth.conf``);
* ``horizon.query.usage`` -> ``{"rows": [...], "now", "half_life_s", "weights", "last_seq"}``: one
  row per account and user association, depth first (``FairShare.report``), with the tenants
  whose jobs were charged under it; filters ``account``, ``user``, ``tenant``; ``limit``/``offset``
  page the rows; with ``{"history": true}`` also ``"history"``: every account's usage and fair-share
  factor at each hour boundary of log time (``account``, ``tenant``, ``from_ts``, ``to_ts``; then
  ``limit``/``offset`` page the history);
* ``horizon.query.priority`` with ``{"job_id": J}`` -> the job's priority factor
  by factor (value, weight, weighted), its position among the pending jobs,
  why it waits, its deadline and restart backoff; with ``{"limit": N}`` the first
  N pending jobs in order with their priorities;
* ``horizon.query.preempt`` with ``{"job_id": J}`` -> what preempting for J would do now: the
  victims the preemption service's policy would choose, each with its nodes, class, GPUs, cost
  and why it may be preempted (``horizon preempt --dry-run``);
* ``horizon.query.partitions`` -> ``{"partitions": [...], "total", "offset", "default", "unknown",
  "last_seq"}``: each partition's configuration, whether it is the default, its registered nodes
  (``members``); the rule for a name not defined (``unknown``); filter ``name``, paged;
* ``horizon.query.licenses`` -> ``{"licenses": [...], "total", "offset", "last_seq"}``: each license
  defined (and one removed that jobs still hold): ``name``, ``total``, ``used``, ``free`` (``scontrol
  show lic``); filter ``name``, paged;
* ``horizon.query.gpus`` -> ``{"nodes": [...], "total", "offset", "counts", "queued", "now",
  "last_seq"}``: each node with every GPU's id, model, NUMA node, state (free, busy, reserved,
  held, cordoned, down, unhealthy) and the job and tenant on it (``gpu_map``); filter ``node``, paged;
* ``horizon.query.config`` with ``{"seq": N}`` -> whether the operator input at
  sequence N has been seen, and the reason if it was rejected
  (``{"seen": bool, "rejected": reason | null, "last_seq"}``).

Every answer fits in one message (``projections/paging.py``): the listings (queue, nodes,
allocations, usage and its history, priority's list) are cut to a page that does and carry
``offset``, ``total``, ``next_offset`` and ``next``; anything else that would not fit is an error
naming the limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from typing import Any

from events import catalogue as c
from events.codec import decode_json
from events.subjects import RELAY_LAYOUT, RELAYED_VERBS, admin_subject
from projections import fold_state
from projections.paging import Listing, Pager
from projections.scheduling_reports import (
    gpu_map, gpu_states, licenses_report, partitions_report, preempt_report, priority_report, queue_length,
    usage_report,
)
from projections.standing import StandingStore
from projections.tenants import as_tenant_sees, scope, tenant_keys
from services.domain.fairshare import association
from services.domain.jobs import JobState
from services.domain.preemption.planner import PreemptionPlanner
from services.domain.protocol import Record, fold_event
from services.domain.queue.fold import QueueFold
from services.runtime.cancel import cancel_and_wait
from services.runtime.consume import readable
from services.runtime.follow import LogFollow
from services.runtime.log import READ_MODEL_LINGER_S, EventLog

__all__ = ["SchedulerView"]

log = logging.getLogger("horizon.projections")

STOP_SAVE_S = 3.0  # at stop, the last store of the rows and the fold gets this long (a head start only)

_USAGE_HISTORY = Listing("history", total="history_total", offset="history_offset", next_offset="history_next_offset")
# Each view's listing; usage's history pages instead of its rows when it is asked for (the rows come whole).
_LISTINGS: dict[str, Any] = {
    "queue": Listing("jobs"), "nodes": Listing("nodes"), "allocations": Listing("allocations"),
    "usage": lambda request: _USAGE_HISTORY if request.get("history") else Listing("rows"),
    "priority": Listing("jobs"), "partitions": Listing("partitions"), "gpus": Listing("nodes"),
    "licenses": Listing("licenses"),
}


_RELAYED_SUBJECTS = frozenset(admin_subject(verb) for verb in RELAYED_VERBS)


class SchedulerView:
    """The scheduling and preemption folds kept current from the log, stored and served (module docstring)."""

    def __init__(self, log_: EventLog, nc: Any, core: QueueFold | None = None, meter_provider: Any = None,
                 store: StandingStore | None = None, flush_every_s: float = 0.5, state_every: int = 50_000,
                 state_cheap_s: float = 0.02) -> None:
        self.log = log_
        self.store = store
        self.flush_every_s = flush_every_s  # at least; a slow flush stretches it (see _flush_loop)
        # The fold goes with a flush when the last dump took at most state_cheap_s, else once
        # state_every records have passed (the scheduling service's snapshot interval).
        self.state_every = state_every
        self.state_cheap_s = state_cheap_s
        self.state_seq = 0  # the sequence of the fold stored in the database
        self.dump_s = 0.0  # what the last dump took (wall time: pacing, not a decision)
        self.resumed_from = 0  # the sequence of the stored fold this view started from (0: from the start)
        self.tenants: dict[str, set[str]] = {}  # association -> tenants whose jobs were charged to it
        self.caught_up = asyncio.Event()  # the tables show the end of the log as it was at start
        self.nc = nc
        self.core = core or QueueFold()
        self.state = self.core.initial()
        self.rejected: dict[int, str] = {}  # operator input seq -> why it was not applied
        # layout 2: operator inputs of relayed verbs read and not yet relayed (a handful at a time)
        self.awaiting_relay: set[int] = set()
        self.preemption = PreemptionPlanner()
        self.pstate = self.preemption.initial()
        self._cycle_ts: dict[int, float] = {}
        self.history: list[dict[str, Any]] = []  # usage per account at each hour of log time (not yet stored)
        self.sample_every_s = 3600.0
        self._next_sample = 0.0
        self._latency: Any = None
        self._wait: Any = None
        if meter_provider is not None:
            self._metrics(meter_provider)
        self._follower: LogFollow | None = None
        self.make_follower: Any = LogFollow  # or a reader shared with the other parts of the process (fanout.py)
        self._flusher: asyncio.Task[None] | None = None
        self._flush_lock = asyncio.Lock()
        self._start_end = 0
        self._subs: list[Any] = []
        self.pager = Pager(nc)

    async def apply(self, batch: list[Record]) -> None:
        for record, event in readable(batch, self.state.seq):
            if record.subject in _RELAYED_SUBJECTS and self.state.layout >= RELAY_LAYOUT:
                self.awaiting_relay.add(record.seq)
            if event is None:
                self.state.seq = self.pstate.seq = record.seq
            else:
                self._sample(record.time)
                # the histograms count what happens while the view runs, not the history it catches up
                # with at start (Prometheus would read that as a burst)
                if self._wait is not None and isinstance(event, c.JobScheduled) and record.seq > self._start_end:
                    self._record_wait(event, record.time)
                self.state = fold_event(self.core, self.state, record, event)
                self.pstate = fold_event(self.preemption, self.pstate, record, event)
                if isinstance(event, c.JobAccepted):
                    spec = event.spec
                    self.tenants.setdefault(association(spec), set()).add(spec.tenant)
                if self._latency is not None:
                    if isinstance(event, c.SchedulingCycleCompleted):
                        self._cycle_ts[event.cycle] = record.time
                    elif isinstance(event, c.PlacementCycleCompleted) and event.cycle in self._cycle_ts:
                        self._latency.record(max(0.0, record.time - self._cycle_ts.pop(event.cycle)) * 1000.0)
                if isinstance(event, c.ConfigRejected):
                    self.rejected[event.request_seq] = event.reason
                if self.awaiting_relay and isinstance(event, c.InputRelayed):
                    self.awaiting_relay = {seq for seq in self.awaiting_relay if seq > self.state.relayed_seq}

    def _metrics(self, meter_provider: Any) -> None:
        """Gauges of the scheduler's standing: queue depth by class and account, utilisation and
        fragmentation of GPUs; the cycle latency (decided to placed, by log time) as a histogram."""
        from opentelemetry.metrics import Observation

        meter = meter_provider.get_meter("horizon")

        def depth(_options: Any) -> list[Observation]:
            counts: dict[tuple[str, str], int] = {}
            for job in self.state.pending.values():
                if job.spec is not None:
                    key = (job.spec.priority_class, job.spec.account)
                    counts[key] = counts.get(key, 0) + 1
            out = [Observation(n, {"class": k[0], "account": k[1]}) for k, n in sorted(counts.items())]
            return out + [Observation(sum(counts.values()), {"class": "all", "account": "all"})]

        def gpus(_options: Any) -> list[Observation]:
            total = used = stranded = 0
            for node in self.pstate.cluster.nodes.values():
                if node.removed:
                    continue
                healthy = len(node.gpus) - node.unhealthy_gpus  # an unhealthy GPU is no capacity
                # (work its backend did not place holds GPUs too: Node.foreign)
                free_here = (len(node.free_devices()) if node.unhealthy_gpus or node.foreign is not None
                             else healthy - len(node.used_devices))
                total += healthy
                used += healthy - free_here
                if node.used_devices:
                    stranded += free_here  # free, but on a node in use
            free = total - used
            return [Observation(used / total if total else 0.0, {"what": "utilisation"}),
                    Observation(stranded / free if free else 0.0, {"what": "fragmentation"})]

        meter.create_observable_gauge("horizon.queue.depth", callbacks=[depth], description="pending jobs")
        meter.create_observable_gauge("horizon.queue.length", callbacks=[lambda _o: [
            Observation(n, {"partition": k[0], "tenant": k[1]}) for k, n in sorted(queue_length(self.state).items())]],
            description="pending jobs by partition and tenant")
        meter.create_observable_gauge("horizon.gpus.state", callbacks=[lambda _o: [
            Observation(n, {"state": k}) for k, n in gpu_states(self.state, self.pstate).items()]],
            description="GPUs by state: free, busy, reserved, held, cordoned, down, unhealthy")
        meter.create_observable_gauge("horizon.gpus", callbacks=[gpus],
                                      description="GPU utilisation, and the share of free GPUs on nodes in use")
        self._latency = meter.create_histogram("horizon.cycle.latency", unit="ms",
                                               description="from a scheduling cycle to its placement, by log time")
        self._wait = meter.create_histogram("horizon.job.wait", unit="s",
                                            description="a job's wait in the queue until it was placed, by log time")

    def _record_wait(self, event: c.JobScheduled, now: float) -> None:
        """The wait of a job placed now: since it was accepted, or since its last attempt ended (a
        requeued job), by log time; a placement of a job not pending (raced, stale) is no wait."""
        job = self.state.jobs.jobs.get(event.job_id)
        if job is None or job.spec is None or job.state is not JobState.PENDING:
            return
        since = max(job.accepted_ts, job.ended_ts)
        if since:
            self._wait.record(max(0.0, now - since), {"partition": job.spec.partition or "none",
                                                       "priority_class": job.spec.priority_class})

    def _sample(self, now: float) -> None:
        """Usage at every hour boundary the log's time has passed (at most a day of them at once)."""
        if not self._next_sample:
            self._next_sample = (now // self.sample_every_s + 1) * self.sample_every_s
            return
        if now < self._next_sample:
            return
        if now - self._next_sample > 24 * self.sample_every_s:  # a long quiet gap: skip to the last day
            self._next_sample = (now // self.sample_every_s - 23) * self.sample_every_s
        fs = self.state.fairshare
        while self._next_sample <= now:
            at = self._next_sample
            factors = fs.factors(at)
            for name, acc in fs.accounts.items():
                if acc.parent is None:
                    continue
                self.history.append({"ts": at, "account": name, "usage": fs.usage_at(acc, at),
                                     "running": acc.running, "fairshare": factors.get(name)})
            self._next_sample += self.sample_every_s
        if self.store is None and len(self.history) > 200_000:
            del self.history[: len(self.history) - 200_000]

    async def flush(self) -> bool:
        """Write what the fold shows to the store (one transaction; see ``StandingStore.flush``)."""
        if self.store is None:
            return False
        async with self._flush_lock:
            return await self._flush()

    async def _flush(self) -> bool:
        assert self.store is not None
        samples, self.history = self.history, []
        rows = [(h["ts"], h["account"], h["usage"], h["running"], h["fairshare"]) for h in samples]
        seq = self.state.seq
        due = seq > self.store.last_seq and fold_state.supported and (
            self.dump_s <= self.state_cheap_s or seq - self.state_seq >= self.state_every)
        data = self.dump_state() if due else None  # before the first await: the fold at ``seq``
        try:
            written = await self.store.flush(self.core, self.state, self.pstate, rows, self.tenants, data)
        except BaseException:
            self.history = samples + self.history
            raise
        if written and data is not None:
            self.state_seq = seq
        if self.store.last_seq >= self._start_end:
            self.caught_up.set()
        return written

    def dump_state(self) -> bytes:
        """The whole fold as bytes (``projections/fold_state.py``); times itself into ``dump_s``."""
        started = time.perf_counter()
        extras = fold_state.ViewExtras(next_sample=self._next_sample, rejected=dict(sorted(self.rejected.items())),
                                       tenants={k: sorted(v) for k, v in sorted(self.tenants.items())})
        data = fold_state.dump_view(self.core, self.state, self.preemption, self.pstate, extras, self.sample_every_s)
        self.dump_s = time.perf_counter() - started
        return data

    async def _resume(self) -> None:
        """Load the fold stored with the rows, if there is one this view can trust."""
        assert self.store is not None
        stored = await self.store.stored_state()
        if stored is None:
            if self.store.last_seq:
                log.info("standing: no stored fold; folding from seq 1 (rows at seq %d)", self.store.last_seq)
            return
        seq, data = stored
        started = time.perf_counter()
        loaded = fold_state.load_view(data, self.core, self.preemption, self.sample_every_s)
        if loaded is None:
            log.warning("standing: the stored fold at seq %d is of another format or configuration; "
                        "folding from seq 1", seq)
            return
        self.state, self.pstate, extras = loaded
        self._next_sample = extras.next_sample
        self.rejected = dict(extras.rejected)
        self.tenants = {k: set(v) for k, v in extras.tenants.items()}
        self.state_seq = self.resumed_from = seq
        log.info("standing: resumed from the fold stored at seq %d (%d bytes, loaded in %.3f s; rows at seq %d)",
                 seq, len(data), time.perf_counter() - started, self.store.last_seq)

    async def _flush_loop(self) -> None:
        """Flush whenever the fold has moved, at most every ``flush_every_s`` and never more than a
        fifth of the time (a big queue takes a while to write: the view must not spend its life on it)."""
        pause = self.flush_every_s
        while True:
            await asyncio.sleep(pause)
            if self.store is None or self.state.seq <= self.store.last_seq:
                continue
            started = time.monotonic()
            try:
                await self.flush()
            except Exception:  # a full disk or a locked file: keep folding, try again later
                log.exception("writing the scheduler's standing failed; retrying")
            pause = max(self.flush_every_s, 4 * (time.monotonic() - started))

    def config_status(self, seq: int) -> dict[str, Any]:
        pending = self.state.config_rejections.get(seq)
        reason = self.rejected.get(seq) or (pending[1] if pending else None)
        # From the log's layout marker on, a configuration is applied where submission relays it
        # (InputRelayed), after its own seq: seen once its relay is folded. Any other input (a
        # request about a job, answered by submission) is seen once read. Inputs read before this
        # view resumed are not known one by one: those past the last relay count as awaiting it.
        seen = self.state.seq >= seq
        if self.state.layout >= RELAY_LAYOUT and seq > max(self.state.layout_seq, self.state.relayed_seq):
            seen = seen and seq not in self.awaiting_relay and seq > self.resumed_from
        return {"seen": seen, "rejected": reason, "last_seq": self.state.seq}

    async def start(self) -> None:
        """Resume from the stored fold (if any), follow the log from there, serve the queries."""
        if self.store is not None and self.store.db is None:
            await self.store.open()
        if self.store is not None:
            await self._resume()
        self._follower = self.make_follower(self.log, self.apply, from_seq=self.state.seq + 1,
                                            linger_s=READ_MODEL_LINGER_S, name="horizon-standing")
        await self._follower.start()  # reads the log's end; the catch-up runs from the next await on
        if self.store is not None:
            self._start_end = max(self._follower.end, self.store.last_seq)
            if self.store.last_seq >= self._start_end:
                self.caught_up.set()
            self._flusher = asyncio.create_task(self._flush_loop(), name="standing-flush")
            for view, handler in (("queue", self.store.query_queue), ("nodes", self.store.query_nodes),
                                  ("allocations", self.store.query_allocations), ("usage", self.store.query_usage)):
                self._subs.append(await self.nc.subscribe(f"horizon.query.{view}", queue="projections",
                                                          cb=self._stored(view, handler)))
            for view, handler in (("queue", self.store.query_queue), ("allocations", self.store.query_allocations)):
                # a tenant's view of the queue and of where its jobs run (see QueryServer in job_server.py)
                self._subs.append(await self.nc.subscribe(f"horizon.query.{view}.*", queue="projections",
                                                          cb=self._stored(view, handler)))
        else:
            self._subs.append(await self.nc.subscribe("horizon.query.usage", queue="projections", cb=self._usage))
        self._subs.append(await self.nc.subscribe("horizon.query.priority", queue="projections", cb=self._priority))
        self._subs.append(await self.nc.subscribe("horizon.query.config", queue="projections", cb=self._config))
        self._subs.append(await self.nc.subscribe("horizon.query.preempt", queue="projections", cb=self._preempt))
        self._subs.append(await self.nc.subscribe("horizon.query.partitions", queue="projections",
                                                  cb=self._partitions))
        self._subs.append(await self.nc.subscribe("horizon.query.gpus", queue="projections", cb=self._gpus))
        self._subs.append(await self.nc.subscribe("horizon.query.licenses", queue="projections",
                                                  cb=self._licenses))

    def _stored(self, view: str, handler: Any) -> Any:
        """A query answered from the store, once it shows everything the fold has applied (a reader
        sees what the view knows, not what it knew at the last periodic flush); on a tenant's
        subject, about that tenant's jobs only; in pages of about one message (``_page_of``)."""
        async def answer(msg: Any) -> None:
            async def ask(request: dict[str, Any]) -> dict[str, Any]:
                tenant = scope(msg.subject)
                if tenant is not None:
                    if request.get("tenant") not in (None, "", tenant):
                        raise ValueError(f"tenant {tenant!r} may see only its own jobs, not {request['tenant']!r}'s")
                    request["tenant"] = tenant
                if self.store is not None and self.state.seq > self.store.last_seq:
                    await self.flush()
                if tenant is None:
                    return await handler(request)  # type: ignore[no-any-return]
                body: dict[str, Any] = {}
                for job_id in tenant_keys(tenant, [request["job_id"]]) if request.get("job_id") else [None]:
                    body = await handler({**request, "job_id": job_id} if job_id else request)
                    if any(isinstance(rows, list) and rows for rows in body.values()):
                        break
                for rows in body.values():  # the tenant's jobs by the ids it gave them
                    if isinstance(rows, list):
                        as_tenant_sees(tenant, (row for row in rows if isinstance(row, dict)))
                return body

            await self._reply(msg, lambda request: ask(self._page_of(view, request)), view, _LISTINGS[view])

        return answer

    def _page_of(self, view: str, request: dict[str, Any]) -> dict[str, Any]:
        """A ``limit`` asked for is read at most about one message's worth at a time (the rest is for
        the next pages); without one, the view's default page is read."""
        if "limit" in request:
            request["limit"] = self.pager.rows(view, request["limit"])
        return request

    async def _preempt(self, msg: Any) -> None:
        await self._reply(msg, lambda request: preempt_report(self.preemption, self.pstate, str(request["job_id"])),
                          "preempt")

    async def _partitions(self, msg: Any) -> None:
        await self._reply(msg, lambda request: partitions_report(self.state, request), "partitions",
                          _LISTINGS["partitions"])

    async def _licenses(self, msg: Any) -> None:
        await self._reply(msg, lambda request: licenses_report(self.state, request), "licenses",
                          _LISTINGS["licenses"])

    async def _gpus(self, msg: Any) -> None:
        await self._reply(msg, lambda request: gpu_map(self.state, self.pstate, request), "gpus", _LISTINGS["gpus"])

    async def _config(self, msg: Any) -> None:
        await self._reply(msg, lambda request: self.config_status(int(request["seq"])), "config")

    async def _usage(self, msg: Any) -> None:
        def answer(request: dict[str, Any]) -> dict[str, Any]:
            body = usage_report(self.core, self.state)
            if request.get("history"):
                account = request.get("account")
                body["history"] = [h for h in self.history if account is None or h["account"] == account]
            return body

        await self._reply(msg, answer, "usage", _LISTINGS["usage"])

    async def _priority(self, msg: Any) -> None:
        await self._reply(msg, lambda request: priority_report(
            self.core, self.state, request.get("job_id"), self.pager.rows("priority", request.get("limit", 50)),
            int(request.get("offset", 0))), "priority", _LISTINGS["priority"])

    async def _reply(self, msg: Any, answer: Any, view: str, listing: Any = None) -> None:
        """Answer ``msg`` with ``answer(request)``, encoded to fit in one message (``listing``: the
        ``Listing`` of the answer, or a function of the request that picks it)."""
        if not msg.reply:
            return
        try:
            request = decode_json(msg.data or b"{}")  # a tenant's, as sent: too deep is a ValueError
            if not isinstance(request, dict):
                raise ValueError("the request must be a JSON object")
            body = answer(request)
            if inspect.isawaitable(body):
                body = await body
        except (ValueError, TypeError, KeyError) as exc:
            body, request = {"error": str(exc)}, {}
        listing = listing(request) if callable(listing) else listing
        await self.nc.publish(msg.reply, self.pager.encode(view, body, listing))

    async def stop(self) -> None:
        """Stop following and serving; store what the fold has reached if that takes at most
        ``STOP_SAVE_S``; close the store in any case.

        The last store is only a head start for the next start (the rows and the fold are stored
        with their sequence in one transaction, so one cut short leaves the previous one whole).
        The close is in a ``finally``: aiosqlite's worker thread is no daemon, and a store left
        open (a stop cancelled again while it flushed 60,000 jobs) kept ``horizon up``'s process
        alive for good after it had printed "stopped" (issue 31)."""
        try:
            for sub in self._subs:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
            if self._follower is not None:
                await self._follower.stop()
            if self._flusher is not None:
                await cancel_and_wait(self._flusher)
            if self.store is not None and self.store.db is not None:
                began = time.monotonic()
                try:
                    await asyncio.wait_for(self._last_store(), STOP_SAVE_S)
                except asyncio.TimeoutError:
                    log.info("standing: the last store took more than %.0f s; the next start folds from the "
                             "one before (seq %d)", STOP_SAVE_S, self.store.last_seq)
                except Exception as exc:  # noqa: BLE001 - a head start lost, nothing else
                    log.info("standing: the last store failed (%s)", exc)
                else:
                    log.info("standing: stored seq %d at stop in %.1f s", self.store.last_seq,
                             time.monotonic() - began)
        finally:
            if self.store is not None:
                await self.store.close()

    async def _last_store(self) -> None:
        await self.flush()  # what the fold had reached
        async with self._flush_lock:
            if self.state_seq < self.state.seq == self.store.last_seq and fold_state.supported:  # type: ignore[union-attr]
                if await self.store.save_state(self.state.seq, self.dump_state()):  # type: ignore[union-attr]
                    self.state_seq = self.state.seq

