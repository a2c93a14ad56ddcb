"""Job rows (services/domain/job_rows.py): a job's fields after the first five come from ``Job`` itself."""

from __future__ import annotations

import dataclasses

import msgspec

from events import catalogue as c
from services.domain.job_rows import JobRow, _Rest, restore_rows, rows
from services.domain.jobs import Job, JobState, JobTable


def test_rest_has_jobs_fields_types_and_defaults():
    fields = dataclasses.fields(Job)[5:]
    assert _Rest.__struct_fields__ == tuple(f.name for f in fields)
    assert msgspec.structs.astuple(_Rest()) == tuple(f.default for f in fields)


def test_a_row_round_trips_every_field():
    job = Job("j1", c.JobSpec(tenant="t", gpus=2), JobState.RUNNING, 7, 1.5, attempt=2,
              allocations=(c.NodeAllocation(node="n0", device_ids=["gpu0"], cpus_milli=1000),),
              scheduled_ts=2.0, started_ts=3.0, reason="r", exit_code=None,
              last_block=(c.BlockReason(reason="busy", nodes=1),), borrowed=True, reserved_at=9.0,
              reserved_nodes=("n1",), checkpoint_ref="ck", not_before_ts=4.0, time_limit_s=60.0)
    plain = Job("j2", None, JobState.REJECTED)
    data = msgspec.msgpack.encode(rows({"j1": job, "j2": plain}))
    assert len(msgspec.msgpack.decode(data)[1]) == 5  # all defaults: no sixth item
    table = JobTable()
    restore_rows(table, msgspec.msgpack.decode(data, type=list[JobRow]), {}, {})
    assert table.jobs == {"j1": job, "j2": plain}
