"""docs/dashboard.md's try-it as a person follows it, the page opened in a real browser (Debian's
chromium through selenium, the driver of tests/front/test_dashboard.py): ``horizon up`` with a
development cluster in a folder of the person's, a job on two GPUs, the Dashboard URL ``up``
printed, then ``horizon ui --data-dir .horizon`` beside it (whose default port ``up`` may hold)
and the URL it printed. Each page shows the two nodes and the job on two busy GPUs of node-00 and
running in the queue."""

from __future__ import annotations

from typing import Any

import pytest

from tests.journeys.conftest import start_up, submitted_id, wait_state
from tests.journeys.docblocks import block
from tests.journeys.person import Person
from tests.front.test_dashboard import browser, wait_for  # noqa: F401 - the browser fixture, one per module

pytestmark = pytest.mark.timeout(300)


def _shows_the_cluster_and_the_job(driver: Any, url: str, job: str) -> None:
    driver.get(url)
    wait_for(driver, "return document.querySelector('#identity').textContent === 'operator'")
    wait_for(driver, "return document.querySelectorAll('#nodes .node').length === 2")
    wait_for(driver, f"return document.querySelectorAll('#nodes [data-node=\"node-00\"] .gpu.busy[data-job=\"{job}\"]')"
                     ".length === 2")
    assert driver.execute_script("return document.querySelectorAll('#nodes .gpu').length") == 8
    # each node says the backend that offers it (docs/backends.md, "One queue over several backends")
    assert driver.execute_script("return [...document.querySelectorAll('#nodes .node .badge.backend')]"
                                 ".map(b => b.textContent)") == ["agent", "agent"]
    wait_for(driver, f"return document.querySelector('#queue-table tr[data-job=\"{job}\"][data-state=\"RUNNING\"]')")


def test_try_it_in_a_browser(person: Person, browser: Any) -> None:  # noqa: F811
    commands = block("dashboard-try-it").commands
    texts = [c.text.split("  #")[0].strip() for c in commands]
    assert [t.split()[:2] for t in texts] == [["horizon", "up"], ["horizon", "submit"], ["horizon", "ui"]], texts
    person.cwd = person.folder("work")
    up = start_up(person, commands[0].text, cwd=person.cwd)
    assert up.dashboard.startswith("http://127.0.0.1:"), up.dashboard
    job = submitted_id(person.run(commands[1]))
    assert wait_state(person, job, "RUNNING") == "RUNNING"
    _shows_the_cluster_and_the_job(browser, up.dashboard, job)

    ui = person.start(commands[2])
    served = ui.wait_for(r"Dashboard: (\S+)", timeout=60).group(1)
    assert served != up.dashboard, (served, up.dashboard)
    if up.dashboard == "http://127.0.0.1:8470/":  # up holds the default: ui says so and takes a free one
        assert "port 8470 is taken" in ui.err, ui.err
    _shows_the_cluster_and_the_job(browser, served, job)
    assert ui.interrupt() == 0, ui.err
    assert "Traceback" not in ui.err, ui.err
    person.run(f"horizon cancel {job}")
    assert wait_state(person, job, "CANCELLED") == "CANCELLED"
    assert up.bg.interrupt() == 0, up.bg.err
