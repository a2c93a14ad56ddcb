"""Job rows and columns (services/domain/job_rows.py): a job's fields after the first five come from ``Job``
itself; columns hold each spec once and give back every job."""

from __future__ import annotations

import dataclasses

import msgspec

from events import catalogue as c
from services.domain.job_rows import JobColumns, _Rest, columns, restore_columns
from services.domain.jobs import Job, JobState, JobTable
from services.domain.policy import POLICIES
from services.domain.queue.index import QueueIndex


def test_rest_has_jobs_fields_types_and_defaults():
    fields = dataclasses.fields(Job)[5:]
    assert _Rest.__struct_fields__ == tuple(f.name for f in fields)
    assert msgspec.structs.astuple(_Rest()) == tuple(f.default for f in fields)


def test_columns_round_trip_every_field():
    job = Job("j1", c.JobSpec(tenant="t", gpus=2), JobState.RUNNING, 7, 1.5, attempt=2,
              allocations=(c.NodeAllocation(node="n0", device_ids=["gpu0"], cpus_milli=1000),),
              scheduled_ts=2.0, started_ts=3.0, reason="r", exit_code=None,
              last_block=(c.BlockReason(reason="busy", nodes=1),), borrowed=True, reserved_at=9.0,
              reserved_nodes=("n1",), checkpoint_ref="ck", not_before_ts=4.0, time_limit_s=60.0)
    plain = Job("j2", None, JobState.REJECTED)
    data = msgspec.msgpack.encode(columns({"j1": job, "j2": plain}))
    cols = msgspec.msgpack.decode(data, type=JobColumns)
    assert sorted(cols.rest) == [0]  # the plain job: all defaults, nothing written beside its columns
    table = JobTable()
    restore_columns(table, cols)
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


def _round_trip(table: JobTable) -> tuple[JobTable, bytes]:
    data = msgspec.msgpack.encode(columns(table.jobs))
    back = JobTable()
    restore_columns(back, msgspec.msgpack.decode(data, type=JobColumns))
    return back, data


def test_a_backlog_shares_its_specs_and_keeps_each_jobs_own_values_and_the_order():
    table = JobTable()
    base = c.JobSpec(tenant="acme", account="a", gpus=1, command=("python", "train.py"), time_limit_s=600.0)
    table.jobs["ran"] = Job("ran", base, JobState.SUCCEEDED, 1, 1.0, attempt=1, started_ts=5.0)
    for i in range(50):
        spec = msgspec.structs.replace(base, name=f"j{i}", number=i + 1,
                                       array="arr" if i % 2 else None, array_index=i if i % 2 else None,
                                       array_number=1 if i % 2 else 0, gpus=1 + i % 3)
        table.jobs[f"j{i}"] = Job(f"j{i}", spec, JobState.PENDING if i % 5 else JobState.HELD, 10 + i, 10.0 + i)
    table.jobs["bare"] = Job("bare", None, JobState.CANCELLED, 99, 99.0)  # no spec
    table.jobs["late"] = Job("late", base, JobState.RUNNING, 100, 100.0, attempt=2)
    back, data = _round_trip(table)
    assert list(back.jobs) == list(table.jobs) and back.jobs == table.jobs
    decoded = msgspec.msgpack.decode(data, type=JobColumns)
    assert len(decoded.specs) == 6  # 3 sizes x array or not: the names, numbers and indexes are each job's
    assert sorted(decoded.rest) == [0, 52] and decoded.spec_of[51] == -1  # ran and late: fields of their own
    assert _round_trip(back)[1] == data  # equal tables, equal bytes
