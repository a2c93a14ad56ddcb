"""The web dashboard (docs/dashboard.md) in a real headless browser (Debian's chromium and its
chromedriver, through selenium) against a real ``horizon up --auth`` with a development cluster and
two tenants: a job shows in the queue and on its GPUs within 2 s of its decision (the decision's own
time in the log), its story shows its decisions with their audit verdicts, and a tenant sees only
its own jobs, in the page and at the API. One browser and one stack for the module, both stopped
by their PIDs."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.front.test_up_auth import clean_env, horizon, start_up, stop_up

pytestmark = pytest.mark.timeout(240)

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def _missing() -> str | None:
    if not (Path(CHROMIUM).exists() or shutil.which("chromium")):
        return "chromium is not installed (apt-get install chromium chromium-driver)"
    if not (Path(CHROMEDRIVER).exists() or shutil.which("chromedriver")):
        return "chromedriver is not installed (apt-get install chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e .[dev])"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = _missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the dashboard tests need a real browser in CI: {missing}")
        pytest.skip(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    service = Service(CHROMEDRIVER if Path(CHROMEDRIVER).exists() else shutil.which("chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        pid = service.process.pid if service.process else None
        driver.quit()
        if pid is not None and service.process.poll() is None:
            service.process.kill()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """``horizon up --auth`` (2 nodes x 8 GPUs, its dashboard on a free port), tenants acme and globex."""
    up = start_up(tmp_path_factory.mktemp("dashboard"), "--auth", "--ui-port", "0", "--gpus-per-node", "8")
    try:
        deadline = time.monotonic() + 30
        while "Dashboard: http://127.0.0.1:" not in up.err.read_text():
            assert time.monotonic() < deadline, up.err.read_text()
            time.sleep(0.1)
        base = re.search(r"Dashboard: (http://127\.0\.0\.1:\d+)/", up.err.read_text()).group(1)
        tenants = {}
        for name in ("acme", "globex"):
            done = horizon("tenant", "add", name, "--json", "--data-dir", str(up.data_dir))
            assert done.returncode == 0, done.stderr
            tenants[name] = json.loads(done.stdout)["nats_url"]
        token = (up.data_dir / "auth" / "dashboard-token").read_text().strip()
        yield {"up": up, "base": base, "tenants": tenants, "token": token}
    finally:
        stop_up(up)


def submit(stack: dict[str, Any], tenant: str, job_id: str, *args: str) -> None:
    done = horizon("submit", "--job-id", job_id, *args, "--", "sleep", "300",
                   env=clean_env(HORIZON_NATS_URL=stack["tenants"][tenant]))
    assert done.returncode == 0, done.stderr


def password(url: str) -> str:
    return urllib.parse.unquote(urllib.parse.urlsplit(url).password or "")


class Client:
    """The API as a browser's session sees it (its cookie), for what the page must not show."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.cookie = ""

    def call(self, path: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        request = urllib.request.Request(self.base + path, data=data, headers={"Cookie": self.cookie, **(headers or {})})
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(request, timeout=30) as reply:
                status, body, set_cookie = reply.status, reply.read(), reply.headers.get("Set-Cookie")
        except urllib.error.HTTPError as exc:
            status, body, set_cookie = exc.code, exc.read(), exc.headers.get("Set-Cookie")
        if set_cookie:
            self.cookie = set_cookie.split(";")[0]
        try:
            return status, json.loads(body)
        except ValueError:
            return status, body

    def login(self, **form: str) -> int:
        return self.call("/login", urllib.parse.urlencode(form).encode())[0]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def decision_ts(stack: dict[str, Any], job: str, kind: str) -> float:
    operator = Client(stack["base"])
    assert operator.login(token=stack["token"]) == 303
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status, body = operator.call(f"/api/job?id={urllib.parse.quote(job)}")
        if status == 200:
            found = [e["ts"] for e in body["events"] if e["type"] == kind]
            if found:
                return float(found[0])
        time.sleep(0.1)
    raise AssertionError(f"no {kind} for {job}")


WATCH = """
window.__seen = {};
const wanted = arguments[0];
const look = () => {
  for (const [name, selector] of Object.entries(wanted)) {
    if (!window.__seen[name] && document.querySelector(selector)) window.__seen[name] = Date.now() / 1000;
  }
};
new MutationObserver(look).observe(document.body, {subtree: true, childList: true, attributes: true});
look();
"""


def wait_for(driver: Any, script: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not true within {timeout} s: {script}")


def test_gpu_map_worked_example():
    """``horizon.query.gpus`` (``gpu_map``) on a folded cluster of 3 nodes x 4 GPUs, two NUMA nodes
    each: n1 has acme's j0 on gpu0-1 and is held for globex's j9 (gpu2-3 held for it); n2 has
    gpu0 unhealthy and acme's pending j1 reserving 2 GPUs there (its first free ones, gpu1-2;
    gpu3 free); n3 is cordoned. The totals are gpu_states' (the metric's), and a tenant's copy
    (``_blank_others``) keeps every state but names only its own jobs, by its own ids."""
    import msgspec

    from events import catalogue as c
    from projections.scheduling import gpu_map, gpu_states
    from services.domain.preemption.planner import PreemptionPlanner
    from services.domain.queue.fold import QueueFold
    from services.front.host.dashboard import _blank_others
    from tests.helpers import Feed, accepted, node

    sched, plan = Feed(QueueFold()), Feed(PreemptionPlanner())
    sick = node("n2", gpus=4)
    sick = msgspec.structs.replace(sick, gpus=[msgspec.structs.replace(sick.gpus[0], health="xid 79"), *sick.gpus[1:]])
    for feed in (sched, plan):
        for event in (node("n1", gpus=4), sick, node("n3", gpus=4)):
            feed.evt("agent", event)
        for name in ("n1", "n2", "n3"):
            feed.evt("inventory", c.NodeReady(node=name, basis_seq=feed.seq))
        feed.evt("inventory", c.NodeCordoned(node="n3", reason="maintenance"))
        feed.evt("submission", accepted("acme:j0", feed.seq, gpus=2))
        feed.evt("submission", accepted("acme:j1", feed.seq, gpus=2))
        feed.evt("submission", accepted("globex:j9", feed.seq, tenant="globex", gpus=4))
    # what the folds would hold after a placement and a preemption round: set here, the rule is what is tested
    plan.state.cluster.nodes["n1"].used_devices.update({"gpu0": "acme:j0", "gpu1": "acme:j0"})
    plan.state.held["n1"] = frozenset({"globex:j9"})
    sched.state.pending["acme:j1"].reserved_nodes = ("n2",)
    body = gpu_map(sched.state, plan.state, {})
    grid = {n["node"]: [(g["id"], g["numa"], g["state"], g["job_id"], g["tenant"]) for g in n["gpus"]]
            for n in body["nodes"]}
    assert grid == {
        "n1": [("gpu0", 0, "busy", "acme:j0", "acme"), ("gpu1", 0, "busy", "acme:j0", "acme"),
               ("gpu2", 1, "held", "globex:j9", "globex"), ("gpu3", 1, "held", "globex:j9", "globex")],
        "n2": [("gpu0", 0, "unhealthy", None, None), ("gpu1", 0, "reserved", "acme:j1", "acme"),
               ("gpu2", 1, "reserved", "acme:j1", "acme"), ("gpu3", 1, "free", None, None)],
        "n3": [(f"gpu{i}", i // 2, "cordoned", None, None) for i in range(4)],
    }
    assert body["counts"] == gpu_states(sched.state, plan.state) == {
        "free": 1, "busy": 2, "reserved": 2, "held": 2, "cordoned": 4, "down": 0, "unhealthy": 1}
    assert body["nodes"][0]["held_for"] == ["globex:j9"] and body["queued"] == 3 and body["total"] == 3
    assert [n["node"] for n in gpu_map(sched.state, plan.state, {"node": "n2"})["nodes"]] == ["n2"]
    page = gpu_map(sched.state, plan.state, {"limit": 2})
    assert len(page["nodes"]) == 2 and page["next_offset"] == 2
    with pytest.raises(ValueError, match="unknown fields"):
        gpu_map(sched.state, plan.state, {"tenant": "acme"})
    # acme's copy: its jobs by its ids, globex's hold on n1 still "held", but whose is not said
    mine = _blank_others(body, "acme")
    seen = {(n["node"], g["id"]): (g["state"], g["job_id"], g["tenant"]) for n in mine["nodes"] for g in n["gpus"]}
    assert seen[("n1", "gpu0")] == ("busy", "j0", "acme") and seen[("n2", "gpu1")] == ("reserved", "j1", "acme")
    assert seen[("n1", "gpu2")] == ("held", None, None) and mine["nodes"][0]["held_for"] == []
    assert "globex" not in json.dumps(mine["nodes"])
    theirs = _blank_others(body, "globex")
    other = {(n["node"], g["id"]): g for n in theirs["nodes"] for g in n["gpus"]}
    assert other[("n1", "gpu0")]["other"] and other[("n1", "gpu0")]["job_id"] is None
    assert theirs["nodes"][0]["held_for"] == ["j9"] and "acme" not in json.dumps(theirs["nodes"])


def test_chart_series_worked_example():
    """Decisions per 5 s bucket (an event with a basis_seq from a service; an agent's report is no
    decision), and the wait of each placed job from its acceptance (or last requeue), by tenant."""
    from services.front.host.dashboard_charts import BUCKET_S, Series

    series = Series()
    t = 1_000_000.0  # a bucket boundary
    series.event({"type": "JobAccepted", "source": "submission", "basis_seq": 1, "job_id": "a",
                  "spec": {"tenant": "acme"}}, t, "")
    series.event({"type": "JobAccepted", "source": "submission", "basis_seq": 2, "job_id": "b",
                  "spec": {"tenant": "globex"}}, t + 1, "")
    series.event({"type": "JobScheduled", "source": "placement", "basis_seq": 3, "job_id": "a"}, t + 2, "")
    series.event({"type": "JobStarted", "source": "agent/n1", "basis_seq": 3, "job_id": "a"}, t + 3, "")
    series.event({"type": "JobRequeued", "source": "scheduling", "basis_seq": 4, "job_id": "a"}, t + 6, "")
    series.event({"type": "JobScheduled", "source": "placement", "basis_seq": 5, "job_id": "a"}, t + 9, "")
    series.event({"type": "JobScheduled", "source": "placement", "basis_seq": 6, "job_id": "b"}, t + 9, "")
    view = series.view(None)
    rates = dict((round(b), r) for b, r in view["decisions"])
    assert rates[round(t)] == 3 / BUCKET_S and rates[round(t + 5)] == 3 / BUCKET_S  # 3 decisions each, 0.6/s
    # waits: a 2 s (t..t+2); then a 3 s (requeued at t+6, placed at t+9) and b 8 s (t+1..t+9)
    assert view["wait"] == [[t, 2.0, 2.0, 2.0, 1], [t + 5, 3.0, 8.0, 8.0, 2]]
    assert series.view("acme")["wait"] == [[t, 2.0, 2.0, 2.0, 1], [t + 5, 3.0, 3.0, 3.0, 1]]
    assert series.view("globex")["wait"] == [[t + 5, 8.0, 8.0, 8.0, 1]]


def test_a_job_shows_in_the_queue_and_on_its_gpus_within_2_s_of_its_decision(browser, stack):
    browser.get(f"{stack['base']}/login?token={stack['token']}")
    wait_for(browser, "return document.querySelector('#identity').textContent === 'operator'")
    wait_for(browser, "return document.querySelectorAll('#nodes .node').length === 2")
    # the first job takes 6 of node-00's GPUs and runs; the second (a 2-node gang of 8 each) waits
    browser.execute_script(WATCH, {"gpu": '#nodes [data-job="acme:train"]',
                                   "running": '#queue-table tr[data-job="acme:train"]',
                                   "queued": '#queue-table tr[data-job="globex:sweep"][data-state="PENDING"]'})
    submit(stack, "acme", "train", "--gpus", "6")
    submit(stack, "globex", "sweep", "--gpus", "8", "--nodes", "2")
    scheduled = decision_ts(stack, "acme:train", "JobScheduled")
    accepted = decision_ts(stack, "globex:sweep", "JobAccepted")
    seen = wait_for(browser, "return window.__seen.gpu && window.__seen.running && window.__seen.queued && window.__seen")
    assert seen["gpu"] - scheduled < 2.0, (seen, scheduled)
    assert seen["running"] - scheduled < 2.0, (seen, scheduled)
    assert seen["queued"] - accepted < 2.0, (seen, accepted)
    # on its node's GPUs: six cells of node-00 hold it, with its tenant; the gang reserves the rest
    # (once the scheduler has given it its reservation: a cycle after its acceptance)
    wait_for(browser, "return document.querySelectorAll('#nodes [data-node=\"node-00\"] .gpu.reserved').length === 2")
    cells = browser.execute_script(
        "return [...document.querySelectorAll('#nodes [data-node=\"node-00\"] .gpu')].map(g => "
        "[g.dataset.gpu, g.dataset.state, g.dataset.job || null, g.querySelector('.tenant').textContent])")
    busy = [c for c in cells if c[1] == "busy"]
    assert len(busy) == 6 and {c[2] for c in busy} == {"acme:train"} and {c[3] for c in busy} == {"acme"}
    assert {c[1] for c in cells} == {"busy", "reserved"}
    numa = browser.execute_script("return [...document.querySelectorAll('#nodes [data-node=\"node-00\"] .numa')]"
                                  ".map(n => n.dataset.numa)")
    assert numa == ["0", "1"]  # the NUMA halves
    # the queue row tells the priority factor by factor and why it waits
    row = browser.execute_script("const r = document.querySelector('#queue-table tr[data-job=\"globex:sweep\"]');"
                                 "return [r.querySelector('.bar').title, r.querySelector('.why').textContent]")
    assert "fairshare" in row[0] and "class" in row[0]
    assert "reserved" in row[1] or "GPUs" in row[1]


def test_the_job_story_shows_its_decisions_with_their_audit_verdicts(browser, stack):
    browser.get(f"{stack['base']}/#job/acme:train")
    wait_for(browser, "return document.querySelector('#timeline li[data-type=\"JobScheduled\"]')")
    types = browser.execute_script("return [...document.querySelectorAll('#timeline li')].map(li => li.dataset.type)")
    assert types[:3] == ["JobSubmitted", "JobAccepted", "JobScheduled"], types
    detail = browser.execute_script(
        "return document.querySelector('#timeline li[data-type=\"JobScheduled\"] .detail').textContent")
    assert "basis_seq" in detail and "node-0" in detail
    verdicts = wait_for(browser, "const v = [...document.querySelectorAll('#timeline [data-verdict]')]"
                                 ".map(x => x.dataset.verdict); return v.length >= 2 && v", timeout=30)
    assert verdicts.count("reproduced") >= 2, verdicts  # JobAccepted and JobScheduled replay exactly
    assert "2 reproduced, 0 not" in browser.execute_script("return document.querySelector('#audit').textContent")


def test_a_tenant_sees_only_its_own_jobs_in_the_page_and_at_the_api(browser, stack):
    browser.delete_all_cookies()
    browser.get(stack["base"] + "/")
    wait_for(browser, "return !document.querySelector('#login').hidden")
    browser.execute_script(
        "const f = document.querySelector('#tenant-form'); f.tenant.value = arguments[0]; f.password.value = arguments[1];"
        "f.requestSubmit();", "acme", password(stack["tenants"]["acme"]))
    wait_for(browser, "return document.querySelector('#identity').textContent === 'tenant acme'")
    wait_for(browser, "return document.querySelectorAll('#nodes .gpu').length === 16")
    wait_for(browser, "return document.querySelectorAll('#nodes .gpu.reserved').length === 10")
    page = browser.execute_script("return document.querySelector('main').innerText")
    jobs = browser.execute_script("return [...document.querySelectorAll('[data-job]')].map(e => e.dataset.job)")
    assert "train" in jobs  # its own, by the id it gave
    assert not any("sweep" in j or "globex" in j for j in jobs) and "sweep" not in page and "globex" not in page
    # no operator button for a tenant
    assert not browser.execute_script("return document.querySelector('[data-action]')")
    # the other tenant's reservation shows as GPUs reserved, not whose
    states = browser.execute_script("return [...document.querySelectorAll('#nodes .gpu')].map(g => g.dataset.state)")
    assert states.count("busy") == 6 and states.count("reserved") == 10

    globex = Client(stack["base"])
    assert globex.login(tenant="globex", password="wrong") == 401
    assert globex.login(tenant="globex", password=password(stack["tenants"]["globex"])) == 303
    status, body = globex.call("/api/job?id=acme:train")
    assert status == 404
    status, body = globex.call("/api/job?id=train")
    assert status == 404, body  # acme's train is not globex's train
    status, snap = globex.call("/api/snapshot")
    text = json.dumps(snap)
    assert status == 200 and "sweep" in text and "train" not in text and "acme" not in text
    status, body = globex.call("/api/action/cancel", json.dumps({"job_id": "sweep"}).encode(),
                               {"Content-Type": "application/json", "X-Horizon-CSRF": "x"})
    assert status == 403 and "operator" in body["error"]
    anonymous = Client(stack["base"])
    assert anonymous.call("/api/snapshot")[0] == 401
    assert anonymous.login(token="not-the-token") == 401


def test_an_operator_cordons_a_node_from_the_page(browser, stack):
    browser.delete_all_cookies()
    browser.get(f"{stack['base']}/login?token={stack['token']}")
    wait_for(browser, "return document.querySelector('#nodes [data-node=\"node-01\"] [data-action=\"cordon\"]')")
    browser.execute_script("window.confirm = () => true;"
                           "document.querySelector('#nodes [data-node=\"node-01\"] [data-action=\"cordon\"]').click()")
    wait_for(browser, "return document.querySelector('#nodes [data-node=\"node-01\"] .badge.cordoned')")
    operator = Client(stack["base"])
    assert operator.login(token=stack["token"]) == 303
    status, body = operator.call("/api/action/uncordon", json.dumps({"node": "node-01"}).encode(),
                                 {"Content-Type": "application/json"})
    assert status == 403  # without its CSRF token
    csrf = operator.call("/api/me")[1]["csrf"]
    status, body = operator.call("/api/action/uncordon", json.dumps({"node": "node-01"}).encode(),
                                 {"Content-Type": "application/json", "X-Horizon-CSRF": csrf})
    assert status == 200 and body["answer"] == "NodeUncordoned", body
    wait_for(browser, "return document.querySelector('#nodes [data-node=\"node-01\"] [data-action=\"cordon\"]')")
    # the page ran without a script error or a failed request all along (but the 401 that shows the
    # login form to a browser not logged in)
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"
              and not ("/api/me" in e["message"] and "401" in e["message"])]
    assert not errors, errors


def test_the_what_if_page_replays_the_log_and_compares(browser, stack):
    """The What-if page runs ``horizon whatif`` on the live log (docs/whatif.md) for operators only."""
    for tenant in ("acme", "globex"):  # jobs of their own that end at once (the later tests count running jobs)
        done = horizon("submit", "--job-id", f"what-if-{tenant}", "--gpus", "0", "--", "true",
                       env=clean_env(HORIZON_NATS_URL=stack["tenants"][tenant]))
        assert done.returncode == 0, done.stderr
    operator = Client(stack["base"])
    assert operator.login(token=stack["token"]) == 303
    csrf = operator.call("/api/me")[1]["csrf"]
    json_headers = {"Content-Type": "application/json", "X-Horizon-CSRF": csrf}
    status, body = operator.call("/api/whatif", json.dumps({"set": ["policy.weight.colour=1"]}).encode(), json_headers)
    assert status == 400 and "policy.weight.colour" in body["error"], body  # a bad key, before any replay
    globex = Client(stack["base"])
    assert globex.login(tenant="globex", password=password(stack["tenants"]["globex"])) == 303
    assert globex.call("/api/whatif")[0] == 403

    browser.delete_all_cookies()
    browser.get(f"{stack['base']}/login?token={stack['token']}")
    browser.get(f"{stack['base']}/#whatif")
    wait_for(browser, "return document.querySelector('#whatif-form') && !document.querySelector('#view-whatif').hidden")
    browser.execute_script("document.querySelector('#whatif-set').value = 'policy.weight.fairshare=0';"
                           "document.querySelector('#whatif-from').value = '1';"  # from seq 1: the whole log
                           "document.querySelector('#whatif-add').value = '1x8a100';"
                           "document.querySelector('#whatif-remove').value = 'node-01';"
                           "document.querySelector('#whatif-form').requestSubmit();")
    try:
        wait_for(browser, "return document.querySelector('#whatif-table')", timeout=120)
    except AssertionError:
        raise AssertionError(browser.execute_script("return document.querySelector('#whatif-status').textContent")
                             + " / " + json.dumps(operator.call("/api/whatif")[1])[:2000]) from None
    rows = browser.execute_script("return [...document.querySelectorAll('#whatif-table tbody tr')]"
                                  ".map(r => [...r.cells].map(c => c.textContent))")
    assert [r[0] for r in rows][:3] == ["mean wait", "p50 / p90 / p99 wait", "jobs never started"]
    assert all(len(r) == 3 for r in rows)
    # every change asked for, one a line: the key set, the nodes added and those removed
    changes = ["policy.weight.fairshare=0", "add nodes 1x8a100", "remove nodes node-01 (node-01)"]
    assert browser.execute_script("return [...document.querySelectorAll('#whatif-changes li')]"
                                  ".map(li => li.textContent)") == changes
    assert "policy.weight.fairshare=0" in browser.execute_script(
        "return document.querySelector('#whatif-status').textContent")
    assert "recorded starts" in browser.execute_script("return document.querySelector('#whatif-fidelity').textContent")
    tenants = browser.execute_script("return [...document.querySelectorAll('#whatif-tenants text.axis')]"
                                     ".map(t => t.textContent)")
    assert "acme" in tenants, tenants  # its bars: baseline and changed mean waits
    status, run = operator.call("/api/whatif")
    assert status == 200 and run["state"] == "done" and set(run["result"]) == {"baseline", "changed"}
    assert run["result"]["changed"]["changes"] == changes
    assert run["result"]["changed"]["nodes_added"] == 1 and run["result"]["changed"]["nodes_removed"] == ["node-01"]


def test_horizon_ui_over_a_tenants_own_url_shows_that_tenant_alone(stack):
    """``horizon ui --nats <acme's URL>``: the server's accounts scope what it can ask; the browser
    logs in with the token it prints."""
    import subprocess

    from tests.front.test_cli_up import free_port
    from tests.front.test_up_auth import HORIZON, ROOT

    port = free_port()
    env = clean_env(HORIZON_NATS_URL=stack["tenants"]["acme"])
    proc = subprocess.Popen([*HORIZON, "ui", "--port", str(port)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        lines = [proc.stderr.readline() for _ in range(2)]
        assert lines[0].strip() == f"Dashboard: http://127.0.0.1:{port}/", lines
        login = re.search(r"(http://127\.0\.0\.1:\d+)/login\?token=(\S+)", lines[1])
        assert login and "acme" in lines[1], lines
        client = Client(login.group(1))
        assert client.call("/api/snapshot")[0] == 401
        assert client.call(f"/login?token={login.group(2)}")[0] == 303
        status, me = client.call("/api/me")
        assert status == 200 and me["tenant"] == "acme" and not me["operator"]
        status, snap = client.call("/api/snapshot")
        running = [j["job_id"] for j in snap["running"]["jobs"]]
        assert running == ["train"] and "sweep" not in json.dumps(snap)
        assert snap["gpus"]["partial"]  # no cluster map on a tenant's connection: the GPUs its jobs hold
        assert {g["job_id"] for n in snap["gpus"]["nodes"] for g in n["gpus"]} == {"train"}
        status, body = client.call("/api/job?id=train")
        assert status == 200 and body["job"]["job_id"] == "train"
        assert client.call("/api/job?id=sweep")[0] == 404
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_horizon_ui_without_a_server_fails_in_one_line():
    import subprocess

    from tests.front.test_cli_up import free_port
    from tests.front.test_up_auth import HORIZON, ROOT

    port = free_port()
    done = subprocess.run([*HORIZON, "ui", "--nats", f"nats://127.0.0.1:{port}", "--port", "0"], cwd=ROOT,
                          env=clean_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.startswith("Error: cannot reach NATS") and "Traceback" not in done.stderr, done.stderr


def test_up_processes_serves_the_dashboard_beside_metrics(tmp_path):
    """``horizon up --processes``: the dashboard on up's own HTTP port (its event loop in a thread),
    connected once the server is up, a job on its GPUs; /metrics still merges the children's."""
    import subprocess

    from tests.front.test_cli_up import HORIZON, free_port, horizon, interrupt

    port = free_port()
    err = tmp_path / "up.err"
    with open(err, "w") as stderr:
        up = subprocess.Popen([*HORIZON, "up", "--processes", "--port", str(port), "--data-dir", str(tmp_path / "h"),
                               "--nodes", "1", "--gpus-per-node", "4", "--executor", "sim", "--ui-port", "0"],
                              stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        url = up.stdout.readline().strip()
        assert url == f"nats://127.0.0.1:{port}", err.read_text()
        deadline = time.monotonic() + 10
        while "Metrics (Prometheus)" not in err.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        base = re.search(r"Dashboard: (http://127\.0\.0\.1:\d+)/", err.read_text()).group(1)
        assert f"Metrics (Prometheus): {base}/metrics" in err.read_text()
        done = horizon("submit", "--job-id", "p1", "--gpus", "3", "--sim-runtime", "120", "--", "train", url=url)
        assert done.returncode == 0, done.stderr
        client = Client(base)
        deadline, held = time.monotonic() + 30, []
        while time.monotonic() < deadline and len(held) != 3:
            status, snap = client.call("/api/snapshot")
            held = [g for n in (snap.get("gpus") or {}).get("nodes") or [] for g in n["gpus"] if g["job_id"] == "p1"]
            time.sleep(0.2)
        assert [g["state"] for g in held] == ["busy"] * 3, snap
        status, text = client.call("/metrics")
        assert status == 200 and b"horizon_gpus_state" in text
    finally:
        interrupt(up)


async def test_the_dashboard_follows_a_listing_page_by_page(stack):
    """Each answer fits in one message (projections/paging.py): the dashboard follows ``next``
    until the listing ends, so a cluster whose map takes several messages is shown whole."""
    from services.front.host.dashboard import Dashboard

    board = Dashboard(stack["up"].admin_url)
    await board.start()
    try:
        await asyncio.wait_for(board.ready.wait(), 20)
        one = await board.ask("gpus", {"limit": 1})
        assert len(one["nodes"]) == 1 and one["next"] == {"offset": 1}, one
        whole = await board.ask_all("gpus", {"limit": 1}, "nodes")
        assert [n["node"] for n in whole["nodes"]] == ["node-00", "node-01"] and whole["total"] == 2
        assert len((await board.ask_all("gpus", {"limit": 1}, "nodes", most=1))["nodes"]) == 1
    finally:
        await board.stop()


def test_the_systemd_unit_serves_the_dashboard(stack, tmp_path):
    """deploy/systemd/horizon-ui.service's own command line, with horizon.env's values (the URL an
    operator's, the port a free one): the dashboard asks browsers to log in with its token."""
    import subprocess

    from tests.front.test_cli_up import free_port
    from tests.contract.test_deploy import DEPLOY, env_file, exec_start
    from tests.front.test_up_auth import HORIZON, ROOT

    env = env_file(DEPLOY / "systemd" / "horizon.env")
    port = free_port()
    env.update(HORIZON_UI_NATS_URL=stack["up"].admin_url,
               HORIZON_UI_ARGS=env["HORIZON_UI_ARGS"].replace("--port 8470", f"--port {port}"))
    argv = exec_start(DEPLOY / "systemd" / "horizon-ui.service", env)
    assert argv[:2] == ["/opt/horizon/.venv/bin/horizon", "ui"]
    proc = subprocess.Popen([*HORIZON, *argv[1:]], cwd=ROOT, env=clean_env(HORIZON_UI_TOKEN="unit-token"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr.readline().strip() == f"Dashboard: http://127.0.0.1:{port}/"
        client = Client(f"http://127.0.0.1:{port}")
        assert client.call("/api/me")[0] == 401
        assert client.login(token="unit-token") == 303
        status, me = client.call("/api/me")
        assert status == 200 and me["operator"] and me["policy"] == "multifactor"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_the_kubernetes_deployment_serves_the_dashboard(stack):
    """deploy/k8s/ui.yaml's container args with the ConfigMap's values (moved onto loopback and a
    free port): the dashboard logs browsers in with the Secret's token; the kustomization has it."""
    import subprocess

    from tests.front.test_cli_up import free_port
    from tests.contract.test_deploy import DEPLOY, config_map, container_args, kube_expand
    from tests.front.test_up_auth import HORIZON, ROOT

    assert "- ui.yaml" in (DEPLOY / "k8s" / "kustomization.yaml").read_text()
    config = config_map(DEPLOY / "k8s" / "config.yaml")
    config["HORIZON_NATS_URL"] = stack["up"].admin_url
    argv = kube_expand(container_args(DEPLOY / "k8s" / "ui.yaml")["ui"], config)
    assert not any("$(" in w for w in argv), argv  # every variable is in the ConfigMap
    port = free_port()
    argv = [{"0.0.0.0": "127.0.0.1", "8470": str(port)}.get(w, w) for w in argv]  # noqa: S104
    proc = subprocess.Popen([*HORIZON, *argv], cwd=ROOT, env=clean_env(HORIZON_UI_TOKEN="from-the-secret"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr.readline().strip() == f"Dashboard: http://127.0.0.1:{port}/"
        client = Client(f"http://127.0.0.1:{port}")
        assert client.call("/api/snapshot")[0] == 401
        assert client.login(token="from-the-secret") == 303
        assert client.call("/api/me")[1]["operator"]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_no_tenant_login_where_the_server_has_no_accounts(tmp_path):
    """A server without accounts lets anyone in under any name: a dashboard with --login over it
    takes its token only, never a tenant's name and a password that would prove nothing."""
    from services.front.host.dashboard import Dashboard
    from services.front.host.http import HttpServer
    from services.runtime.natsserver import NatsServer
    from tests.front.test_cli_up import free_port

    server = NatsServer(store_dir=tmp_path / "nats", port=free_port(), log_file=tmp_path / "nats.log")
    server.start()
    web = HttpServer("127.0.0.1", 0)
    board = Dashboard(server.url, login=True, token="t0ken")
    board.mount(web)
    await web.start()
    try:
        client = Client(web.url)
        loop = asyncio.get_running_loop()
        status, me = await loop.run_in_executor(None, client.call, "/api/me")
        assert status == 401 and me["tenants"] is False
        status = await loop.run_in_executor(None, lambda: client.login(tenant="acme", password="anything"))
        assert status == 400
        assert await loop.run_in_executor(None, lambda: client.login(token="t0ken")) == 303
    finally:
        await web.stop()
        server.stop()


async def test_an_open_dashboard_answers_only_by_its_own_name(tmp_path):
    """Without --login the dashboard is whoever reaches it, but a request naming another host
    (a site whose name was pointed at 127.0.0.1: DNS rebinding) is not answered."""
    from services.front.host.dashboard import Dashboard
    from services.front.host.http import HttpServer

    web = HttpServer("127.0.0.1", 0)
    Dashboard("nats://127.0.0.1:1").mount(web)  # never connects: the check comes first
    web.parts.clear()
    await web.start()
    try:
        loop = asyncio.get_running_loop()
        client = Client(web.url)
        status, me = await loop.run_in_executor(None, client.call, "/api/me")
        assert status == 200 and me["operator"]
        status, _ = await loop.run_in_executor(None, lambda: client.call("/api/me", headers={"Host": "evil.example:80"}))
        assert status == 401
        status, _ = await loop.run_in_executor(None, lambda: client.call(
            "/api/action/cancel", b'{"job_id": "x"}', {"Host": "evil.example", "X-Horizon-CSRF": "open"}))
        assert status == 401
    finally:
        await web.stop()


async def test_the_log_follower_reads_past_any_stored_body_and_comes_back_when_it_dies(tmp_path, caplog):
    """Issue 31: a body of arrays nested 100,000 deep, stored as sent on an input subject, made the
    follower's json.loads raise RecursionError (no ValueError): the follower ended, silently and for
    good, and the page stopped following. It reads past such a body; and a follower that dies anyway
    is said in the log and follows again from the record after the last one it handled."""
    import logging

    from services.front.host.dashboard import Dashboard
    from services.runtime.jetstream import JetStreamLog
    from services.runtime.natsserver import NatsServer
    from tests.front.test_cli_up import free_port

    server = NatsServer(store_dir=tmp_path / "nats", port=free_port(), log_file=tmp_path / "nats.log")
    server.start()
    log_ = await JetStreamLog.open(server.url, name="test")  # the streams, as up makes them
    board = Dashboard(server.url)
    try:
        await board.start()
        await asyncio.wait_for(board.ready.wait(), 10)
        deep = b"[" * 100_000 + b"]" * 100_000
        for body in (deep, b'{"type": "JobSubmitted", "job_id": "d1", "x": ' + deep + b"}", b'{"ts": ' + deep + b"}"):
            await log_.publish("horizon.in.default.submit", body, msg_id=f"deep-{len(body)}-{body[:9]!r}")

        async def seen(seq: int) -> None:
            deadline = time.monotonic() + 10
            while board._target_seq < seq:
                assert time.monotonic() < deadline, f"the follower stopped at {board._target_seq}, not {seq}"
                await asyncio.sleep(0.05)

        after = await log_.publish("horizon.evt.submission.JobAccepted.j1",
                                   b'{"type": "JobAccepted", "job_id": "j1", "source": "submission"}', msg_id="j1")
        await seen(after.seq)
        assert "j1" in board.series.accepted and not board._follower.done

        caplog.set_level(logging.WARNING, logger="horizon.dashboard")
        board._follower._task.cancel()  # a follower that dies anyway
        again = await log_.publish("horizon.evt.submission.JobAccepted.j2",
                                   b'{"type": "JobAccepted", "job_id": "j2", "source": "submission"}', msg_id="j2")
        await seen(again.seq)
        assert "j2" in board.series.accepted
        assert "the log follower stopped" in caplog.text
    finally:
        await board.stop()
        await log_.close()
        server.stop()


async def test_a_tenants_logins_never_end_the_operators_session():
    """Issue 31: sessions were capped at 10,000 over everyone, the oldest going first, so a tenant
    logging in 10,000 times (its own password is all it takes) logged the operator out. The cap is
    per user: a user's new session ends that user's oldest, never another user's."""
    from services.front.host.dashboard import COOKIE, MAX_SESSIONS_PER_USER, Dashboard
    from services.front.host.http import HttpServer

    web = HttpServer("127.0.0.1", 0)
    board = Dashboard("nats://127.0.0.1:1", login=True, token="t0ken")  # never connects: sessions only
    board.mount(web)
    web.parts.clear()
    await web.start()
    try:
        loop = asyncio.get_running_loop()
        operator = Client(web.url)
        assert await loop.run_in_executor(None, lambda: operator.login(token="t0ken")) == 303
        cookies = [board._new_session("acme").headers["Set-Cookie"].split(";")[0].split("=", 1)[1]
                   for _ in range(10_000)]  # acme's password checked by the server: each one a login
        status, me = await loop.run_in_executor(None, operator.call, "/api/me")
        assert status == 200 and me["operator"], me
        kept = [sid for sid in cookies if sid in board.sessions]
        assert kept == cookies[-MAX_SESSIONS_PER_USER:]  # acme's newest, acme's oldest gone
        assert len(board.sessions) == MAX_SESSIONS_PER_USER + 1
        for sid in kept[:3]:  # logging out ends that session only
            acme = Client(web.url)
            acme.cookie = f"{COOKIE}={sid}"
            assert (await loop.run_in_executor(None, lambda: acme.call("/logout", b"")))[0] == 303
        assert len(board.sessions) == MAX_SESSIONS_PER_USER - 2  # acme's 97 and the operator's one
    finally:
        await web.stop()
