"""Preemption's decisions: ``horizon.evt.preemption.<Type>.<job_id>``."""

from __future__ import annotations

from events.base import Event, JobId


class PreemptionRequested(Event, tag="PreemptionRequested", kw_only=True):
    job_id: JobId
    attempt: int
    for_job: JobId
    grace_period_s: float = 30.0
    reason: str = ""
    basis_seq: int = 0


class JobPreempted(Event, tag="JobPreempted", kw_only=True):
    job_id: JobId
    attempt: int
    for_job: JobId = ""
    checkpoint_ref: str | None = None
    # the request's reason, for an attempt stopped by no preemptor (for_job ""): the job's reason then
    # ("" in logs written before it: "evicted")
    reason: str = ""


class JobCheckpointed(Event, tag="JobCheckpointed", kw_only=True):
    job_id: JobId
    attempt: int
    checkpoint_ref: str
