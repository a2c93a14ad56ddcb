"""Fair tenants at the door (issue 31; docs/tenants.md, Limits and fairness), against a real
`horizon up --auth --executor sim` with three tenants: initech floods, acme tries its limits, and
globex, the tenant they must not hurt, measures submit -> scheduled throughout.

The issue's numbers, before: 60,000 cancels sent in 1.9 s put globex's next job at 68.3 s; five
10,000-task arrays at 89.9 s, then 1.0-3.4 s, and `up` at 1.94 GB. Here the flood is refused at
the intake past its burst (a 429 naming max_inputs_per_s, nothing stored), the arrays are refused
by the core naming max_array_tasks, and globex stays under 2 s.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from events import catalogue as c
from events.codec import encode
from tests.front.test_tenant_boundary import AuthUp, Tenant, scheduled_within

pytestmark = pytest.mark.timeout(300)

FLOOD = 60_000
FLOOD_CLIENT = Path(__file__).parents[1] / "flood_client.py"  # by path: whatever folder the suite runs in


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthUp]:
    stack = AuthUp(tmp_path_factory.mktemp("flood") / "data")
    try:
        added = stack.cli("tenant", "add", "initech", "--json", "--data-dir", str(stack.data_dir), ok=True)
        stack.urls["initech"] = json.loads(added.stdout)["nats_url"]
        yield stack
    finally:
        stack.stop()


class Probe:
    """globex submitting one job after another and timing each one's submit -> JobScheduled."""

    def __init__(self, globex: Tenant) -> None:
        self.globex = globex
        self.times: list[float] = []
        self._stop = asyncio.Event()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            self.times.append(await scheduled_within(self.globex, f"probe-{n}", 30))
            await asyncio.sleep(0.2)

    async def stop(self) -> list[float]:
        self._stop.set()
        await self.task
        return self.times


async def flood(up: AuthUp, tenant: str, inputs: list[tuple[str, bytes, str]]) -> dict[str, Any]:
    """Send every (verb, body, msg id) at once from a process of the tenant's own
    (tests/flood_client.py); its answers, in the order sent, and how long it took."""
    lines = "".join(json.dumps([verb, body.decode(), msg_id]) + "\n" for verb, body, msg_id in inputs).encode()
    proc = await asyncio.create_subprocess_exec(sys.executable, str(FLOOD_CLIENT), up.urls[tenant], tenant,
                                                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    out, _ = await asyncio.wait_for(proc.communicate(lines), 180)
    result: dict[str, Any] = json.loads(out)
    missing = [i for i, a in enumerate(result["answers"]) if a is None]
    assert missing == [], f"{len(missing)} of {len(inputs)} inputs unanswered, e.g. {missing[:5]}"
    return result


def refused(answer: dict[str, Any]) -> str:
    return answer["error"]["description"] if "error" in answer else ""


async def test_a_flood_of_inputs_and_of_large_arrays_leaves_another_tenant_scheduled_within_seconds(up):
    initech, globex = await Tenant.connect(up, "initech"), await Tenant.connect(up, "globex")
    try:
        await scheduled_within(globex, "warm-up", 10)
        probe = Probe(globex)
        await asyncio.sleep(1.0)
        # twenty 1,000-task arrays, then 60,000 cancels, all at once; then five 10,000-task arrays
        sweeps = [("submit", encode(c.JobSubmitted(job_id=f"sweep-{i}", tenant="initech", array="0-999", hold=True,
                                                   command=["true"], sim_runtime_s=3600)), f"sweep-{i}")
                  for i in range(20)]
        cancels = [("cancel", encode(c.JobCancelRequested(job_id=f"none-{i}", tenant="initech")), f"cancel-{i}")
                   for i in range(FLOOD)]
        huge = [("submit", encode(c.JobSubmitted(job_id=f"huge-{i}", tenant="initech", array="0-9999", hold=True,
                                                 command=["true"], sim_runtime_s=3600)), f"huge-{i}")
                for i in range(5)]
        first = await flood(up, "initech", sweeps + cancels)
        await asyncio.sleep(0.2)  # 20 tokens again: each 10,000-task array costs one (the core refuses it)
        second = await flood(up, "initech", huge)
        await asyncio.sleep(3.0)  # and after it, while the services work through what was stored
        times = await probe.stop()

        # globex: every job scheduled within seconds, before, during and after the floods (alone on the machine
        # 0.04 s but for the one or two sent during the flood, 1.0-1.6 s: docs/tenants.md; 2.2-3.6 s with the
        # suite's other pytest-xdist workers and a benchmark beside it on the two cores). Those one or two wait
        # for the intake to answer the flood sent ahead of them and for the stack to work through the burst
        # it stored, so the bound follows how long the flood took to be answered: 5 s, or that plus 3 s on a
        # slower or busier machine (5.0-6.9 s in two full suites on the eighth session's, slower than the
        # one the figures above were measured on). Before the limits, globex waited 68-90 s.
        assert len(times) >= 10, times
        bound = max(5.0, first["answered_s"] + 3.0)
        assert max(times) < bound, (sorted(times)[-5:], first["answered_s"])
        # initech: past its burst, refused at the door naming the limit; nothing refused is stored
        sent = sweeps + cancels + huge
        answers = first["answers"] + second["answers"]
        stored = [(what, a) for what, a in zip(sent, answers, strict=True) if "seq" in a]
        why = Counter(refused(a).split(":", 1)[0] for a in answers if "error" in a)
        assert set(why) == {"max_inputs_per_s"}, why
        assert {a["error"]["code"] for a in answers if "error" in a} == {429}
        assert len(stored) <= 1_000 + 100 * (first["answered_s"] + 0.2) + 10, (len(stored), first["answered_s"])
        # every stored input gets its verdict on initech's feed, in the log's order
        deadline = time.monotonic() + 60
        missing = stored
        while missing and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            missing = [s for s in stored if not initech.caused_by(s[1]["seq"])]
        assert missing == [], missing[:3]
        # the first array took the whole bucket (a 1,000-task array costs 1,000), and its tasks were accepted
        taken = [a for (_, _, msg_id), a in stored if msg_id.startswith("sweep-")]
        assert len(taken) == 1 and len(initech.caused_by(taken[0]["seq"])) == 1_000
        # the arrays over the tenant's limit per array: a verdict naming it
        assert len(second["answers"]) == 5 and all("seq" in a for a in second["answers"]), second["answers"]
        for a in second["answers"]:
            (verdict,) = initech.caused_by(a["seq"])
            assert verdict["type"] == "JobRejected" and verdict["limit"] == "max_array_tasks", verdict
            assert "an array of 10,000 tasks; tenant 'initech' may submit at most 1,000 per array" in verdict["reason"]
        print(f"initech: {len(sent):,} inputs sent in {first['sent_s']:.1f} s, {len(stored):,} stored, "
              f"{sum(why.values()):,} refused {dict(why)}; globex: {len(times)} jobs, submit -> scheduled "
              f"max {max(times):.2f} s; the flood answered in {first['answered_s']:.1f} s")
    finally:
        await initech.close()
        await globex.close()


def test_limits_set_by_tenant_set_are_verdicts_naming_them(up):
    data = ("--data-dir", str(up.data_dir))
    done = up.cli("tenant", "set", "acme", "--max-pending-jobs", "3", "--max-pending-array-tasks", "4", "--json",
                  *data, ok=True)
    answer = json.loads(done.stdout)
    assert answer["limits"] == {"max_inputs_per_s": 100.0, "burst": 1000, "max_pending_jobs": 3,
                                "max_array_tasks": 1000, "max_pending_array_tasks": 4}
    assert answer["applied"] is True
    waiting = ("--dependency", "afterok:not-yet", "--sim-runtime", "0.2", "--", "true")
    too_many_tasks = up.cli("submit", "--array", "0-4", *waiting, tenant="acme")
    assert too_many_tasks.returncode == 1
    assert "max_pending_array_tasks: tenant 'acme' has 0 array tasks waiting" in too_many_tasks.stderr
    for _ in range(3):
        up.cli("submit", *waiting, tenant="acme", ok=True)
    fourth = up.cli("submit", "--json", *waiting, tenant="acme")
    assert fourth.returncode == 1
    assert "max_pending_jobs: tenant 'acme' has 3 jobs waiting in the queue" in fourth.stderr
    assert json.loads(fourth.stdout)["state"] == "REJECTED"
    words = up.cli("tenant", "set", "acme", *data, ok=True).stdout  # again with nothing: the defaults
    assert "100 inputs a second (burst 1,000), 10,000 pending jobs, 1,000 tasks per array" in words
    up.cli("submit", *waiting, tenant="acme", ok=True)


def test_a_submit_over_the_rate_says_so_at_once_and_exits_1(up):
    data = ("--data-dir", str(up.data_dir))
    up.cli("tenant", "set", "globex", "--max-inputs-per-s", "0.01", "--burst", "1", *data, ok=True)
    try:
        job = ("--sim-runtime", "0.2", "--", "true")
        first = up.cli("submit", *job, tenant="globex")
        start = time.monotonic()
        second = up.cli("submit", *job, tenant="globex")
        assert time.monotonic() - start < 10
        assert first.returncode == 0, first.stderr
        assert second.returncode == 1
        assert "max_inputs_per_s: tenant 'globex' sent more than 1 inputs at once" in second.stderr
        assert "was not stored" in second.stderr and "Traceback" not in second.stderr
    finally:
        up.cli("tenant", "set", "globex", *data, ok=True)


def test_check_and_audit_pass_after_the_floods(up):
    data = ("--data-dir", str(up.data_dir))
    for command in ("check", "audit"):
        done = up.cli(command, *data)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
