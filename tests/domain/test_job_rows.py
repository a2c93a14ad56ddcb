"""Job rows and columns (services/domain/job_rows.py): a job's fields after the first five come from ``Job``
itself; columns hold each spec once and give back every job."""

from __future__ import annotations

import dataclasses

import msgspec

from events import catalogue as c
from services.domain.job_rows import JobColumns, JobRow, _Rest, columns, restore_columns, restore_rows, rows
from services.domain.jobs import Job, JobState, JobTable
from services.domain.policy import POLICIES
from services.domain.queue.index import QueueIndex


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


def test_columns_hold_each_spec_once_and_give_back_every_job():
    base = c.JobSpec(tenant="t", gpus=1, command=("python", "train.py"))
    jobs = {  # a and b numbered as submission numbers every job
        "a": Job("a", msgspec.structs.replace(base, name="a", number=1), JobState.PENDING, 1, 1.0),  # named by its id
        "b": Job("b", msgspec.structs.replace(base, name="b", number=2), JobState.PENDING, 2, 2.0),
        "c": Job("c", base, JobState.HELD, 3, 3.0),  # no name
        "d": Job("d", msgspec.structs.replace(base, name="sweep", number=7, array_index=3, array_number=6),
                 JobState.PENDING, 4, 4.0),
        "e": Job("e", c.JobSpec(tenant="t", gpus=2, name="e"), JobState.RUNNING, 5, 5.0, attempt=1,
                 allocations=(c.NodeAllocation(node="n0", device_ids=["gpu0", "gpu1"]),)),
        "f": Job("f", None, JobState.REJECTED, reason="bad"),
    }
    data = msgspec.msgpack.encode(columns(jobs))
    cols = msgspec.msgpack.decode(data, type=JobColumns)
    assert len(cols.specs) == 2 and cols.spec_of == [0, 0, 0, 0, 1, -1]
    assert cols.names == [None, None, "", "sweep", None, None] and sorted(cols.rest) == [4, 5]
    assert cols.numbers == [1, 2, 0, 7, 0, 0] and cols.array_indexes[3] == 3 and cols.array_numbers[3] == 6
    table = JobTable()
    specs = restore_columns(table, cols)
    assert table.jobs == jobs and list(table.jobs) == list(jobs)
    assert table.jobs["c"].spec is specs[0]  # a job without a name holds the one spec itself
    assert msgspec.msgpack.encode(columns(table.jobs)) == data


def test_a_policys_group_does_not_read_the_name():
    spec = c.JobSpec(tenant="t", gpus=2, account="a", user="u", time_limit_s=60.0)
    for policy in POLICIES:
        index = QueueIndex(policy)
        assert index.spec_group(spec) == index.spec_group(msgspec.structs.replace(spec, name="x"))
        assert index.spec_group(spec) == index.group(Job("j", spec, JobState.PENDING))
