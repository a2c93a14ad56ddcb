"""Submission and preemption restart from their snapshots on the real runner and the real nats-server.

As placement's and inventory's (tests/runtime/test_snapshots_services.py, whose log and restart this
reuses): a log the in-process simulator wrote is published; a runner of the core folds it and stores a
snapshot; it is stopped, inputs arrive while it is down, and it starts again: it loads the snapshot
(its stats say from which seq), folds the tail only, answers what arrived while it was down exactly
once, and its state is byte for byte that of a runner that folded the whole log.
"""

from __future__ import annotations

import pytest

from events import catalogue as c
from events.codec import encode
from events.subjects import admin_subject, input_subject
from services.preemption.core import PreemptionCore
from services.runtime.log import Outgoing
from services.submission.core import SubmissionCore
from tests.runtime.test_snapshots_services import publish_simulated_log, restart, services  # noqa: F401

pytestmark = pytest.mark.timeout(90)


async def test_submission_restarts_from_its_snapshot_and_answers_what_came_meanwhile(services, js_log):  # noqa: F811
    await publish_simulated_log(js_log)
    late = c.JobSubmitted(job_id="late-1", tenant="sim", account="a", user="u", command=["true"],
                          resources=c.ResourceRequest(gpus=1))
    again = c.JobSubmitted(job_id="s0", tenant="sim", command=["true"])  # a repeat of a job in the log
    tail = [Outgoing(input_subject("sim", "submit"), encode(e), f"tail-{i}") for i, e in enumerate((late, again))]
    restarted, full = await restart(services, js_log, lambda: SubmissionCore(snapshot_every=20), tail)
    job = restarted.state.jobs.jobs["late-1"]
    assert job.state.value == "PENDING" and "s0" in restarted.state.verdicts
    assert (restarted.stats.decisions, restarted.stats.duplicates) == (2, 0)  # JobAccepted, the repeat's answer
    assert full.stats.decisions == 0 and SubmissionCore().decide(full.state) == []


async def test_preemption_restarts_from_its_snapshot_and_answers_a_configuration(services, js_log):  # noqa: F811
    await publish_simulated_log(js_log)
    wrong = c.PreemptionConfigured(victims="nonsense")
    tail = [Outgoing(admin_subject("preemption"), encode(wrong), "preemption-config")]
    restarted, full = await restart(services, js_log, lambda: PreemptionCore(snapshot_every=20), tail)
    assert not restarted.state.config_rejections
    assert (restarted.stats.decisions, restarted.stats.duplicates) == (1, 0)  # its ConfigRejected, once
    assert full.stats.decisions == 0
