"""Tenants' limits in the pure submission core (issue 31, "Fair tenants at the door"; docs/tenants.md,
Limits and fairness): pending jobs, tasks per array and pending array tasks, set by
``TenantConfigured``, each refusal a ``JobRejected`` naming its limit; and a round's new arrays
bounded. The intake's own part (queues, buckets, an array's cost) is tests/services/test_intake_fairness.py;
a real flood against a real server is tests/front/test_tenant_flood.py."""

from __future__ import annotations

from events import catalogue as c
from events.codec import encode
from events.subjects import LIMITS_HEADER
from events.vocabulary import TenantLimits
from services.runtime.replay import replay_decisions
from services.submission.core import SubmissionCore
from services.submission.tenant_limits import TenantBook, limits_from
from tests.helpers import node
from tests.services.test_intake_core import Intake, submit


class Limited(Intake):
    """A feed whose tenant inputs arrive as today's intake stores them: marked ``Horizon-Limits``."""

    def raw(self, tenant: str, verb: str, data: bytes, headers: dict[str, str] | None = None,
            marks: dict[str, str] | None = None, limits: bool = True) -> int:
        return super().raw(tenant, verb, data, headers, {**(marks or {}), **({LIMITS_HEADER: "1"} if limits else {})})

    def unmarked(self, tenant: str, verb: str, event: c.Event) -> int:
        """As an intake from before the limits stored it (a log written then)."""
        return self.raw(tenant, verb, encode(event), limits=False)


def limited() -> Limited:
    """As tests/services/test_intake_core.py's cluster: a node, and each tenant's login with its Unix identity."""
    f = Limited(SubmissionCore())
    f.evt("agent", node("n1"))
    for uid, tenant in enumerate(("acme", "globex"), start=2001):
        f.admin("user", c.UserConfigured(tenant=tenant, name=tenant, uid=uid, gid=uid))
    return f


def _verdicts(out: list[c.Event]) -> list[tuple[str, str, str]]:
    return [(type(e).__name__, e.job_id, getattr(e, "limit", "")) for e in out]


def settle_all(f: Limited) -> list[c.Event]:
    """Every round until the core rests (a round makes so many arrays' tasks: see the last tests)."""
    out: list[c.Event] = []
    while True:
        round_ = f.settle()
        if not round_:
            return out
        out += round_


def _set(f: Limited, tenant: str = "acme", **limits: float) -> None:
    f.admin("tenant", c.TenantConfigured(tenant=tenant, **limits))


def test_the_defaults_are_on_and_an_event_replaces_them_all():
    assert TenantLimits() == TenantLimits(max_inputs_per_s=100.0, burst=1_000, max_pending_jobs=10_000,
                                          max_array_tasks=1_000, max_pending_array_tasks=10_000)
    first = limits_from(c.TenantConfigured(tenant="acme", max_pending_jobs=5, burst=0))
    assert (first.max_pending_jobs, first.burst, first.max_array_tasks) == (5, 0, 1_000)
    assert limits_from(c.TenantConfigured(tenant="acme")) == TenantLimits()  # again, with nothing: the defaults
    assert limits_from(c.TenantConfigured(tenant="acme", max_pending_jobs=-3)).max_pending_jobs == 10_000


def test_a_tenants_pending_jobs_limit_is_a_verdict_naming_it_and_frees_up_as_jobs_start():
    f = limited()
    _set(f, max_pending_jobs=3)
    for i in range(3):
        f.send("acme", "submit", submit(f"a-{i}"))
    f.send("acme", "submit", submit("a-3"))
    f.send("globex", "submit", submit("g-0", tenant="globex"))  # another tenant is not held back
    out = f.settle()
    assert _verdicts(out) == [("JobAccepted", "acme:a-0", ""), ("JobAccepted", "acme:a-1", ""),
                              ("JobAccepted", "acme:a-2", ""), ("JobRejected", "acme:a-3", "max_pending_jobs"),
                              ("JobAccepted", "globex:g-0", "")]
    rejected = out[3]
    assert rejected.reason == (
        "max_pending_jobs: tenant 'acme' has 3 jobs waiting in the queue and this submission adds 1, over its limit "
        "of 3 (an operator raises it: horizon tenant set acme --max-pending-jobs N); submit it when some have started")
    assert rejected.tenant == "acme" and rejected.causation_id.startswith("seq:")
    # a-0 is scheduled: it no longer waits, so one more may
    f.evt("placement", c.JobScheduled(job_id="acme:a-0", attempt=1, allocations=[]))
    f.send("acme", "submit", submit("a-4"))
    f.send("acme", "submit", submit("a-5"))
    assert _verdicts(f.settle()) == [("JobAccepted", "acme:a-4", ""), ("JobRejected", "acme:a-5", "max_pending_jobs")]
    # a held job waits too; a cancelled one does not
    f.send("acme", "cancel", c.JobCancelRequested(job_id="a-1", tenant="acme"))
    f.settle()
    f.send("acme", "submit", submit("a-6", hold=True))
    assert _verdicts(f.settle()) == [("JobAccepted", "acme:a-6", "")]
    assert f.state.tenants.waiting_jobs == {"acme": 3, "globex": 1}


def test_array_limits_per_array_and_in_total_name_themselves():
    f = limited()
    _set(f, max_pending_array_tasks=1_500, max_inputs_per_s=0)
    f.send("acme", "submit", submit("big", array="0-9999"))  # 10,000 tasks: over the default 1,000 per array
    f.send("acme", "submit", submit("sweep-1", array="0-999"))
    f.send("acme", "submit", submit("sweep-2", array="0-999"))  # 1,000 more would make 2,000 waiting
    f.send("acme", "submit", submit("small", array="0-99"))  # 1,100 waiting: within 1,500
    out = settle_all(f)
    rejected = [e for e in out if isinstance(e, c.JobRejected)]
    assert [(e.job_id, e.limit, e.field) for e in rejected] == [
        ("acme:big", "max_array_tasks", "array"), ("acme:sweep-2", "max_pending_array_tasks", "array")]
    assert rejected[0].reason.startswith("max_array_tasks: an array of 10,000 tasks; tenant 'acme' may submit at "
                                         "most 1,000 per array (an operator raises it: horizon tenant set acme "
                                         "--max-array-tasks N)")
    assert "has 1,000 array tasks waiting in the queue and this array adds 1,000, over its limit of 1,500" in (
        rejected[1].reason)
    accepted = [e for e in out if isinstance(e, c.JobAccepted)]
    assert len(accepted) == 1_100
    assert f.state.tenants.waiting_tasks == {"acme": 1_100}
    assert replay_decisions(SubmissionCore(), f.records).mismatches == []


def test_zero_is_no_limit_and_inputs_not_through_the_intake_are_not_limited():
    f = limited()
    _set(f, max_pending_jobs=1)
    f.send("acme", "submit", submit("a-0"))
    # not through the intake: an operator's, published straight into the log, or any client's on a
    # server without accounts
    f.input("acme", "submit", submit("plain-1"))
    out = f.settle()
    assert [type(e).__name__ for e in out] == ["JobAccepted"] * 2
    f.send("acme", "submit", submit("a-1"))
    assert _verdicts(f.settle()) == [("JobRejected", "acme:a-1", "max_pending_jobs")]  # the others count for acme
    _set(f, max_pending_jobs=0)
    f.send("acme", "submit", submit("a-2"))
    assert _verdicts(f.settle()) == [("JobAccepted", "acme:a-2", "")]


def test_a_round_makes_new_arrays_tasks_up_to_its_budget_and_the_rest_wait_whole_for_the_next():
    """Three arrays of 600 in one batch, a budget of 1,000: the first round makes two (1,200: the one
    that crosses the budget is made whole), the job after them is answered in the same round, and
    the third array is the next round's."""
    f = limited()
    for name in ("s1", "s2", "s3"):
        f.send("acme", "submit", submit(name, array="0-599"))
    f.send("acme", "submit", submit("after"))
    first = f.settle()
    assert len(first) == 1_201 and first[-1].job_id == "acme:after"
    assert {e.spec.array for e in first[:-1]} == {"acme:s1", "acme:s2"}
    second = f.settle()
    assert len(second) == 600 and {e.spec.array for e in second} == {"acme:s3"}
    assert f.settle() == []
    assert replay_decisions(SubmissionCore(), f.records).mismatches == []


def test_a_log_from_before_the_limits_replays_as_it_was_decided():
    """Inputs an intake stored before the limits existed carry no Horizon-Limits: neither the
    tenant's limits nor the round's array budget apply to them, as when they were decided."""
    f = limited()
    _set(f, max_pending_jobs=1)
    for name in ("s1", "s2", "s3"):
        f.unmarked("acme", "submit", submit(name, array="0-1499"))  # over 1,000 per array, 4,500 waiting
    out = f.settle()
    assert len(out) == 4_500 and all(isinstance(e, c.JobAccepted) for e in out)
    assert f.settle() == []
    assert replay_decisions(SubmissionCore(), f.records).mismatches == []


def test_the_book_counts_waiting_jobs_through_every_way_out_and_back():
    f = limited()
    f.send("acme", "submit", submit("j", restart_policy="on-failure", max_retries=1))
    f.send("acme", "submit", submit("arr", array="0-1"))
    f.settle()
    book: TenantBook = f.state.tenants
    assert (book.waiting_jobs["acme"], book.waiting_tasks["acme"]) == (3, 2)
    f.evt("placement", c.JobScheduled(job_id="acme:j", attempt=1, allocations=[]))
    f.evt("placement", c.JobScheduled(job_id="acme:arr_0", attempt=1, allocations=[]))
    assert (book.waiting_jobs["acme"], book.waiting_tasks["acme"]) == (1, 1)
    f.evt("agent", c.JobFailed(job_id="acme:j", attempt=1, exit_code=1, node="n1"))
    f.evt("scheduling", c.JobRequeued(job_id="acme:j", attempt=1))  # back in the queue: waiting again
    assert book.waiting_jobs["acme"] == 2
