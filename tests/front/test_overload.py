"""Overload, short: a burst of 5,000 submissions at full client speed into the five services, each
its own process; every job answered exactly once, nothing lost, no service restarted. The 200,000
burst is ``python -m services.front.bench.overload --jobs 200000`` (docs/reliability.md, Overload)."""

from __future__ import annotations

import pytest

from services.front.bench.overload import report, run_overload

pytestmark = pytest.mark.timeout(240)


async def test_a_burst_of_5000_submissions_is_answered_exactly_once_with_nothing_lost(tmp_path):
    result = await run_overload(5_000, settle_timeout_s=30.0, work_dir=tmp_path)
    assert result.lost == 0, report(result)
    assert result.duplicated_verdicts == 0, report(result)
    assert result.accepted == 5_000 and result.rejected == 0, report(result)
    assert result.inputs_stored == 5_000 and result.duplicate_acks == 0, report(result)
    assert not any(result.restarts.values()), report(result)
    assert set(result.memory) == {"submission", "scheduling", "placement", "preemption", "inventory"}
    assert all(m.peak_burst_mb > 0 and m.hwm_mb >= m.peak_burst_mb * 0.99 for m in result.memory.values())
    assert result.ok
