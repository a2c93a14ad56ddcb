"""Submission validation as a queue group: every submission instance, the leader and its hot
standbys, answers ``horizon.validate.<tenant>``, so checks spread over all of them; nothing of a
check reaches the log."""

from __future__ import annotations

import asyncio
import json

from events.subjects import STREAM
from services.nodes.spec import local_nodes
from tests.front.test_cli_slurm import _invoke


def submission(job_id: str, tenant: str = "acme", **fields) -> bytes:
    fields.setdefault("command", ["true"])  # an empty command is rejected
    return json.dumps({"type": "JobSubmitted", "job_id": job_id, "tenant": tenant, **fields}).encode()


async def test_every_submission_instance_validates_and_nothing_is_logged(running_horizon, tmp_path):
    h = await running_horizon(nodes=local_nodes(2, gpus_per_node=8), executor="sim", lease_ttl_s=2)
    stack, url = h.stack, h.url
    await stack.start_service("submission", key="submission#2")  # a hot standby
    leader, standby = stack.parts["submission"].obj, stack.parts["submission#2"].obj
    deadline = asyncio.get_running_loop().time() + 20
    while not (leader.state.gpu_models and standby.state.gpu_models):  # both have seen the nodes
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.1)
    # an operator caps an account's class: a tenant's check for a higher class is refused
    code, out, err = await asyncio.to_thread(_invoke, "account", "set", "interns", "--max-priority-class", "normal",
                                             "--nats", url)
    assert code == 0, err
    while not ("interns" in leader.state.class_limits and "interns" in standby.state.class_limits):
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.1)
    nc, js = h.nc, h.js
    before = (await js.stream_info(STREAM)).state.last_seq
    answers = []
    for i in range(40):
        msg = await nc.request("horizon.validate.acme", submission(f"ok-{i}", resources={"gpus": 2}), timeout=5)
        answers.append(json.loads(msg.data))
    assert all(a["ok"] and a["jobs"] == 1 for a in answers)
    assert {a["by"] for a in answers} == {"submission", "submission#2"}  # the queue group spread them

    wide = json.loads((await nc.request("horizon.validate.acme", submission("wide", resources={"gpus": 2},
                                                                                   nodes=2000), timeout=5)).data)
    assert not wide["ok"] and wide["field"] == "nodes"
    foreign = json.loads((await nc.request("horizon.validate.acme", submission("x", tenant="globex"),
                                           timeout=5)).data)
    assert not foreign["ok"] and foreign["field"] == "tenant"
    garbage = json.loads((await nc.request("horizon.validate.acme", b"\xff{", timeout=5)).data)
    assert not garbage["ok"] and garbage["reason"].startswith("not a JobSubmitted")
    for _ in range(2):  # whichever instance answers
        capped = json.loads((await nc.request("horizon.validate.acme", submission(
            "boss", account="interns", priority_class="critical", resources={"gpus": 1}), timeout=5)).data)
        assert not capped["ok"] and capped["field"] == "priority_class" and "normal" in capped["reason"], capped
    fine = json.loads((await nc.request("horizon.validate.acme", submission(
        "intern", account="interns", priority_class="normal", resources={"gpus": 1}), timeout=5)).data)
    assert fine["ok"], fine
    h100 = json.loads((await nc.request("horizon.validate.acme", submission("h", resources={"gpus": 1,
                                        "gpu_type": "h100"}), timeout=5)).data)
    assert not h100["ok"] and "h100" in h100["reason"]

    code, out, err = await asyncio.to_thread(_invoke, "submit", "--nats", url, "--tenant", "acme", "--gpus", "2",
                                             "--check", "--", "true")
    assert code == 0 and "would be accepted: 1 job(s)" in out and "nothing submitted" in out, err
    code, out, err = await asyncio.to_thread(_invoke, "submit", "--nats", url, "--tenant", "acme", "--gpus", "2",
                                             "--nodes", "5000", "--check", "--", "true")
    assert code == 1 and "would be rejected: nodes:" in err
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=train\n#SBATCH --gres=gpu:4\n#SBATCH --time=1:00:00\n"
                      "srun python train.py\n")
    code, out, err = await asyncio.to_thread(_invoke, "sbatch", "--nats", url, "--tenant", "acme", "--check",
                                             str(script))
    assert code == 0 and "would be accepted" in out, err
    assert (await js.stream_info(STREAM)).state.last_seq == before  # checks are not inputs
    await h.stop()
