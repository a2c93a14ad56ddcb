"""A job table as rows of shared specs (services/domain/backlog_rows.py): the same table back, in its order."""

from __future__ import annotations

import msgspec

from events import catalogue as c
from services.domain import backlog_rows
from services.domain.job_rows import rows
from services.domain.jobs import Job, JobState, JobTable


def round_trip(table: JobTable) -> tuple[JobTable, bytes]:
    data = msgspec.msgpack.encode(backlog_rows.table_data(table))
    back = JobTable()
    backlog_rows.restore_table(back, msgspec.msgpack.decode(data, type=backlog_rows.TableData))
    return back, data


def test_a_backlog_shares_its_specs_and_keeps_each_jobs_own_values_and_the_order():
    table = JobTable()
    base = c.JobSpec(tenant="acme", account="a", gpus=1, command=("python", "train.py"), time_limit_s=600.0)
    table.jobs["ran"] = Job("ran", base, JobState.SUCCEEDED, 1, 1.0, attempt=1, started_ts=5.0)  # not a backlog row
    for i in range(50):
        spec = msgspec.structs.replace(base, name=f"j{i}", number=i + 1,
                                       array="arr" if i % 2 else None, array_index=i if i % 2 else None,
                                       array_number=1 if i % 2 else 0, gpus=1 + i % 3)
        table.jobs[f"j{i}"] = Job(f"j{i}", spec, JobState.PENDING if i % 5 else JobState.HELD, 10 + i, 10.0 + i)
    table.jobs["bare"] = Job("bare", None, JobState.CANCELLED, 99, 99.0)  # no spec
    table.jobs["late"] = Job("late", base, JobState.RUNNING, 100, 100.0, attempt=2)
    table.settled, table.arrays, table.checkpointed = {"old": 3}, {"arr": ["j1", "j3"]}, {"old"}
    back, data = round_trip(table)
    assert list(back.jobs) == list(table.jobs)
    assert rows(back.jobs) == rows(table.jobs) and back.jobs == table.jobs
    assert (back.settled, back.arrays, back.checkpointed) == (table.settled, table.arrays, table.checkpointed)
    decoded = msgspec.msgpack.decode(data, type=backlog_rows.TableData)
    assert len(decoded.specs) == 6  # 3 sizes x array or not: the names, numbers and indexes are each job's
    assert decoded.others_at == [0, 51, 52]
    assert round_trip(back)[1] == data  # equal tables, equal bytes


def test_an_empty_table_and_one_of_others_only():
    assert round_trip(JobTable())[0].jobs == {}
    table = JobTable()
    table.jobs["x"] = Job("x", None, JobState.FAILED, 1, 1.0)
    assert round_trip(table)[0].jobs == table.jobs


def test_a_job_holding_the_very_spec_of_its_twin_in_another_table_shares_it_again():
    """Preemption's fold and its scheduler's view hold the same spec objects (they fold the same events)."""
    view, table = JobTable(), JobTable()
    same = c.JobSpec(tenant="acme", gpus=2, name="a", number=7)
    view.jobs["a"] = Job("a", same, JobState.PENDING, 1, 1.0)
    table.jobs["a"] = Job("a", same, JobState.PENDING, 1, 1.0)
    view.jobs["b"] = Job("b", c.JobSpec(tenant="acme", gpus=2, name="b", number=8), JobState.PENDING, 2, 2.0)
    table.jobs["b"] = Job("b", c.JobSpec(tenant="acme", gpus=2, name="b", number=8), JobState.PENDING, 2, 2.0)  # equal, not it
    data = msgspec.msgpack.encode(backlog_rows.table_data(table, like=view))
    decoded = msgspec.msgpack.decode(data, type=backlog_rows.TableData)
    assert decoded.spec_of == [-1, 0]
    back = JobTable()
    backlog_rows.restore_table(back, decoded, like=view)
    assert back.jobs == table.jobs and back.jobs["a"].spec is view.jobs["a"].spec
    assert msgspec.msgpack.encode(backlog_rows.table_data(back, like=view)) == data
