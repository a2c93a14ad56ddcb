"""Quota providers (docs/backends.md, "Quota providers"): Slurm's associations and QOS limits become
Horizon account configurations in the log.

The pure mapping is tested on ``sacctmgr -P`` text; then against a real accounting database
(MariaDB + slurmdbd + slurmctld, tests/slurm_accounting.py) and a real ``horizon up``: a QOS limit
set with ``sacctmgr`` holds a job back with a reason naming the QOS, a change in Slurm reaches
Horizon at the next sync, and ``horizon audit`` replays every decision.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from events import catalogue as c
from services.domain.fairshare import FairShare
from services.domain.quotas import BLOCKED, Amount, Quotas
from services.quota.slurm import PROVIDER, TresError, desired, parse_table, plan, read_limits
from tests import slurm_accounting
from tests.helpers import spec as job_spec
from tests.front.test_cli_up import HORIZON, free_port, horizon, interrupt

ASSOC = """Cluster|Account|User|ParentName|Share|GrpTRES|GrpJobs|QOS|Def QOS
hz|root|||1|||normal|
hz|root|root||1|||normal|
hz|ml||root|30|||gpuq,normal|gpuq
hz|vision||ml|10|gres/gpu=4,mem=64G,node=2|5|gpuq,normal|gpuq
hz|vision|alice||1|||gpuq,normal|gpuq
hz|physics||root|parent|cpu=16,gres/gpu:a100=3||normal|
other|ml||root|99|gres/gpu=1||normal|
"""
QOS = """Name|GrpTRES|GrpJobs
normal|||
gpuq|cpu=8,gres/gpu=2|3
"""


def _limits():  # type: ignore[no-untyped-def]
    return read_limits("hz", parse_table(ASSOC), parse_table(QOS))


def test_sacctmgr_rows_become_accounts_parents_first():
    limits = _limits()
    assert [a.name for a in limits.accounts] == ["ml", "physics", "vision"]  # other clusters and users left out
    vision = limits.accounts[2]
    assert (vision.parent, vision.shares, vision.grp_jobs, vision.job_qos) == ("ml", 10.0, 5, "gpuq")
    assert limits.accounts[1].shares == 1.0  # fairshare=parent: one share here


def test_the_smaller_of_association_and_qos_limits_holds_and_says_where_it_comes_from():
    wanted, notes = desired(_limits())
    by = {w.account: w for w in wanted}
    vision = by["vision"].quota
    # GrpTRES gres/gpu=4 on the association, 2 on its QOS: 2, from the QOS
    assert vision.gpus == 2 and vision.sources["gpus"] == "Slurm QOS gpuq GrpTRES"
    assert vision.memory_bytes == 64 << 30 and vision.sources["memory_bytes"] == "Slurm association hz/vision GrpTRES"
    assert vision.running_jobs == 3 and vision.sources["running_jobs"] == "Slurm QOS gpuq GrpJobs"  # 3 < 5
    assert vision.cpus_milli == 8000
    assert by["vision"].parent == "ml" and by["ml"].parent is None and by["ml"].shares == 30.0
    physics = by["physics"].quota
    assert physics.gpus is None and physics.gpus_by_type == {"a100": 3} and physics.cpus_milli == 16000
    assert physics.sources == {"cpus_milli": "Slurm association hz/physics GrpTRES",
                               "type:a100": "Slurm association hz/physics GrpTRES"}
    assert any("node=2" in n and "not mapped" in n for n in notes)
    # vision sits under ml, which has the same QOS: they are limited together already, no note
    assert not any("each of" in n for n in notes)


def test_a_qos_shared_by_unrelated_accounts_is_reported():
    assoc = ASSOC + "hz|bio||root|5|||gpuq|gpuq\n"
    _, notes = desired(read_limits("hz", parse_table(assoc), parse_table(QOS)))
    assert "QOS gpuq's group limits apply to each of bio, ml on its own (in Slurm, to all their jobs together)" in notes


def test_tres_it_cannot_read_is_an_error_not_a_guess():
    bad = "Name|GrpTRES|GrpJobs\ngpuq|gres/gpu=two|\n"
    wanted_assoc = "Cluster|Account|User|ParentName|Share|GrpTRES|GrpJobs|QOS|Def QOS\nhz|a||root|1|||gpuq|gpuq\n"
    with pytest.raises(TresError, match="'two' is not a whole number"):
        desired(read_limits("hz", parse_table(wanted_assoc), parse_table(bad)))
    with pytest.raises(TresError, match="not NAME=VALUE"):
        read_limits("hz", parse_table(wanted_assoc), parse_table("Name|GrpTRES|GrpJobs\nq|gpu|\n"))


def test_plan_publishes_only_what_differs_and_keeps_what_slurm_does_not_know():
    wanted, _ = desired(_limits())
    first = plan(wanted, {}, now=100.0)
    assert [p.event.account for p in first] == ["ml", "physics", "vision"]
    assert all(p.event.source == PROVIDER and p.change == "new" for p in first)
    # as in the log after the first sync, with an operator's tenants and boost added on ml since
    current = {p.event.account: (i + 1, p.event) for i, p in enumerate(first)}
    ml = current["ml"][1]
    current["ml"] = (10, c.AccountConfigured(ts=1.0, account="ml", parent=None, shares=30.0, quota=ml.quota,
                                             tenants=["acme"], priority_boost=5.0, source="horizon-cli"))
    assert plan(wanted, current, now=200.0) == []  # nothing differs: nothing published
    slurm_moved = [w if w.account != "ml" else type(w)("ml", None, 40.0, w.quota) for w in wanted]
    again = plan(slurm_moved, current, now=300.0)
    assert [(p.event.account, p.change) for p in again] == [("ml", "shares 30 -> 40")]
    assert again[0].event.tenants == ["acme"] and again[0].event.priority_boost == 5.0
    assert again[0].msg_id.endswith("/after-10")  # the same change after another configuration is new
    assert plan(slurm_moved, current, now=301.0)[0].msg_id == again[0].msg_id  # retried: the same id
    # an account this provider configured that Slurm no longer has loses its Slurm limits
    gone = plan([w for w in wanted if w.account != "physics"], current, now=400.0)
    assert [(p.event.account, p.event.quota, p.change) for p in gone] == [
        ("physics", c.Quota(), "no longer in Slurm: its Slurm limits are removed")]


def test_the_reason_names_the_limit_source():
    fs = FairShare()
    wanted, _ = desired(_limits())
    for w in wanted:
        fs.configure_account(c.AccountConfigured(ts=0.0, account=w.account, parent=w.parent, shares=w.shares,
                                                 quota=w.quota), 0.0)
    quotas = Quotas()
    spec = job_spec("t", 1, account="vision", user="alice")
    leaf = fs.leaf_for(spec, 0.0).name
    quotas.charge(fs, leaf, Amount(gpus=2, running_jobs=2), +1)
    verdict, why = quotas.admit(fs, leaf, Amount(gpus=1, running_jobs=1), {})
    assert verdict == BLOCKED
    assert why == "account vision quota (Slurm QOS gpuq GrpTRES): 2 GPUs in use + 1 GPUs > limit 2 GPUs"


# -- against a real slurmdbd and a real horizon up ----------------------------------------------

@pytest.fixture(scope="module")
def slurm_db(tmp_path_factory):  # type: ignore[no-untyped-def]
    gone = slurm_accounting.missing()
    if gone:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must test the Slurm quota provider: install {', '.join(gone)} (.ci/run does)")
        pytest.skip(f"not installed: {', '.join(gone)} (apt-get install slurm-wlm slurmdbd mariadb-server)")
    with slurm_accounting.accounting(tmp_path_factory.mktemp("slurmdb")) as acc:
        yield acc


@pytest.fixture(scope="module")
def up(tmp_path_factory):  # type: ignore[no-untyped-def]
    data_dir = tmp_path_factory.mktemp("quota") / "h"
    port = free_port()
    proc = subprocess.Popen([*HORIZON, "up", "--port", str(port), "--data-dir", str(data_dir), "--nodes", "1",
                             "--gpus-per-node", "4", "--ui-port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    url = f"nats://127.0.0.1:{port}"
    try:
        assert proc.stdout.readline().strip() == url
        yield url
    finally:
        interrupt(proc)


def _sync(acc, url, *more: str) -> dict:  # type: ignore[no-untyped-def]
    done = horizon("quota", "sync", "--slurm-conf", str(acc.conf), "--json", *more, url=url)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _job(url: str, job_id: str) -> dict:
    done = horizon("show", job_id, "--json", url=url)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    return {**(body["job"]["job"] or {}), "why": body["priority"].get("why")}


def _until(what: str, ok, timeout_s: float = 20.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = ok()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.timeout(180)
def test_a_qos_limit_set_with_sacctmgr_holds_a_job_back_naming_the_qos(slurm_db, up):
    acc = slurm_db
    acc.sacctmgr("add", "qos", "gpuq", "GrpTRES=gres/gpu=2")
    acc.sacctmgr("add", "account", "ml", f"cluster={acc.cluster}", "fairshare=30")
    acc.sacctmgr("modify", "account", "ml", "set", "qos=gpuq,normal", "defaultqos=gpuq")
    first = _sync(acc, up)
    assert [(p["account"], p["change"], p["quota"]["gpus"], p["quota"]["sources"]) for p in first["published"]] == [
        ("ml", "new", 2, {"gpus": "Slurm QOS gpuq GrpTRES"})]
    assert _sync(acc, up)["published"] == []  # nothing changed in Slurm: nothing published

    def ml_quota():  # type: ignore[no-untyped-def]
        done = horizon("usage", "--json", url=up)
        assert done.returncode == 0, done.stderr
        rows = [r for r in json.loads(done.stdout)["rows"] if r["account"] == "ml" and not r["user"]]
        return rows[0]["quota"] if rows and rows[0]["quota"] else None

    assert _until("ml's quota in horizon usage", ml_quota) == {"gpus": 2, "sources": {"gpus": "Slurm QOS gpuq GrpTRES"}}

    ids = []
    for _ in range(3):
        done = horizon("submit", "--account", "ml", "--gpus", "1", "--json", "--", "sleep", "120", url=up)
        assert done.returncode == 0, done.stderr
        ids.append(json.loads(done.stdout)["job_id"])
    running = _until("two jobs running", lambda: [j for j in ids if _job(up, j)["state"] == "RUNNING"]
                     if len([j for j in ids if _job(up, j)["state"] == "RUNNING"]) == 2 else None)
    held = next(j for j in ids if j not in running)
    reason = _until("the held job's reason", lambda: _job(up, held).get("why"))
    assert _job(up, held)["state"] == "PENDING"
    assert reason == "account ml quota (Slurm QOS gpuq GrpTRES): 2 GPUs in use + 1 GPUs > limit 2 GPUs"

    # Slurm's operator raises the limit; a scheduled sync (--every) carries it over and the job starts
    acc.sacctmgr("modify", "qos", "gpuq", "set", "GrpTRES=gres/gpu=3")
    sync = subprocess.Popen([*HORIZON, "quota", "sync", "--nats", up, "--slurm-conf", str(acc.conf), "--every", "1s",
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _until("the held job to start", lambda: _job(up, held)["state"] == "RUNNING")
    finally:
        sync.send_signal(signal.SIGINT)
        out, err = sync.communicate(timeout=30)
    assert sync.returncode == 0, err
    syncs = [json.loads(line) for line in out.splitlines()]
    assert syncs[0]["published"][0]["quota"]["gpus"] == 3 and all(not s["published"] for s in syncs[1:])

    for job_id in ids:
        assert horizon("cancel", job_id, url=up).returncode == 0
    audit = horizon("audit", url=up)
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_a_source_it_cannot_read_is_a_one_line_error(up, tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("SlurmctldHost=nowhere\n")
    done = horizon("quota", "sync", "--slurm-conf", str(conf), url=up)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "names no ClusterName; give --cluster" in done.stderr


@pytest.mark.timeout(180)
def test_up_keeps_the_accounts_in_sync_with_slurm(slurm_db, tmp_path):
    """``horizon up --quota-provider slurm``: Slurm's accounts at start, and a change at the next sync."""
    acc = slurm_db
    acc.sacctmgr("add", "account", "physics", f"cluster={acc.cluster}", "fairshare=5", "GrpTRES=cpu=4", "GrpJobs=2")
    port = free_port()
    proc = subprocess.Popen([*HORIZON, "up", "--port", str(port), "--data-dir", str(tmp_path / "h"), "--nodes", "1",
                             "--ui-port", "0", "--quota-provider", "slurm", "--slurm-conf", str(acc.conf),
                             "--quota-every", "1s"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    url = f"nats://127.0.0.1:{port}"

    def physics():  # type: ignore[no-untyped-def]
        done = horizon("usage", "--json", url=url)
        assert done.returncode == 0, done.stderr
        rows = [r for r in json.loads(done.stdout)["rows"] if r["account"] == "physics" and not r["user"]]
        return rows[0] if rows and rows[0]["quota"] else None

    try:
        assert proc.stdout.readline().strip() == url
        row = _until("physics from Slurm", physics)
        assert (row["raw_shares"], row["quota"]) == (5.0, {
            "cpus_milli": 4000, "running_jobs": 2,
            "sources": {"cpus_milli": "Slurm association hz/physics GrpTRES",
                        "running_jobs": "Slurm association hz/physics GrpJobs"}})
        acc.sacctmgr("modify", "account", "physics", "set", "GrpJobs=7")
        _until("the new GrpJobs", lambda: (physics() or {}).get("quota", {}).get("running_jobs") == 7)
    finally:
        interrupt(proc)
    assert proc.returncode == 0


def test_up_quota_provider_options_say_what_is_wrong(tmp_path):
    from click.testing import CliRunner

    from services.front.cli.main import cli  # through the group: the command's problems become click's

    conf = tmp_path / "slurm.conf"
    conf.write_text("SlurmctldHost=nowhere\n")
    for args, said, code in (
            (["--quota-provider", "slurm", "--processes"], "without --processes", 2),
            (["--quota-provider", "slurm", "--quota-every", "0", "--slurm-conf", str(conf)], "must be more than 0", 2),
            (["--quota-provider", "slurm", "--slurm-conf", str(conf)], "names no ClusterName", 1),
            (["--slurm-conf", str(conf)], "go with --backend slurm (--slurm-conf also with --quota-provider", 2)):
        done = CliRunner().invoke(cli, ["up", "--data-dir", str(tmp_path / "d"), *args])
        assert done.exit_code == code and said in done.output, done.output
