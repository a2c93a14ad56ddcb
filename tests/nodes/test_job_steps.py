"""Job steps, the pure parts: a step's layout in the job's allocation, each task's environment, how the
tasks' ends make srun's exit code and sacct's state, srun's options, scontrol's host lists and job text,
and sacct's step lines. The agents and the whole path are tested in tests/nodes/test_job_steps_agents.py."""

from __future__ import annotations

import pytest

from events import catalogue as c
from services.front.slurm.sacct_steps import step_lines, with_steps
from services.front.cli.scontrol import run_scontrol
from services.front.slurm.scontrol_show import show_job_text
from services.front.slurm.srun import _Outputs, _expand
from services.front.slurm.srun_options import SrunError, parse_srun
from services.domain.hostlist import compress, expand
from services.domain.steps import (
    Slots,
    StepError,
    StepLayout,
    StepRequest,
    counts_text,
    plan_step,
    slots_of,
    step_environment,
    step_exit,
    step_state,
    task_environment,
)

GPUS = ("gpu0", "gpu1", "gpu2", "gpu3")
# a job of -N2 --ntasks-per-node=2 --gres=gpu:4 -c 2: 4 CPUs and 4 GPUs on each node
JOB = [Slots("node-00", 2, 4000, GPUS), Slots("node-01", 2, 4000, GPUS)]


def plan(**kw) -> StepLayout:
    return plan_step(StepRequest(**kw), JOB)


# ------------------------------------------------------------------ layout


def test_no_option_is_the_whole_allocation_and_every_task_sees_its_nodes_gpus():
    layout = plan()
    assert layout.nodes == ("node-00", "node-01") and layout.ranks == ((0, 1), (2, 3))
    assert all(task == GPUS for node in layout.gpus for task in node)
    assert (layout.ntasks, counts_text(layout.counts), layout.step_gpus()) == (4, "2(x2)", 8)


def test_gpus_per_task_gives_each_task_its_own_gpus_in_order():
    layout = plan(gpus_per_task=2)
    assert layout.gpus == ((("gpu0", "gpu1"), ("gpu2", "gpu3")), (("gpu0", "gpu1"), ("gpu2", "gpu3")))
    with pytest.raises(StepError, match=r"2 tasks on node-00 at --gpus-per-task=3 need 6 GPUs; the job holds 4"):
        plan(gpus_per_task=3)
    assert plan(gpus_per_node=1).gpus[1] == (("gpu0",), ("gpu0",))  # both tasks share the node's first GPU


@pytest.mark.parametrize("request_, ranks", [
    ({"ntasks": 3}, ((0, 1), (2,))),  # balanced over as many nodes as tasks, at most all: 2 + 1
    ({"ntasks": 1}, ((0,),)),
    ({"nodes": 1}, ((0, 1),)),  # the first node with its task slots
    ({"ntasks_per_node": 1}, ((0,), (1,))),  # one per node
    ({"ntasks": 1, "nodes": 1}, ((0,),)),
    ({"ntasks": 5, "nodes": 2}, ((0, 1, 2), (3, 4))),  # 3 + 2, within 4 CPUs a node
    ({"ntasks": 4, "distribution": "cyclic"}, ((0, 2), (1, 3))),
    ({"ntasks": 2, "ntasks_per_node": 2}, ((0, 1),)),  # filled two at a time: one node is enough
    ({"nodelist": ("node-01",)}, ((0, 1),)),
    ({"exclude": ("node-00",), "ntasks": 1}, ((0,),)),
    ({"cpus_per_task": 2}, ((0, 1), (2, 3))),  # 2 tasks x 2 CPUs fit a node's 4
    ({"ntasks": 16, "overcommit": True}, tuple(tuple(range(i, i + 8)) for i in (0, 8))),
])
def test_step_sizes(request_, ranks):
    assert plan(**request_).ranks == ranks


def test_where_a_node_list_puts_the_step():
    assert plan(nodelist=("node-01",)).nodes == ("node-01",)
    assert plan(exclude=("node-00",), ntasks=1).nodes == ("node-01",)


@pytest.mark.parametrize("request_, message", [
    ({"nodes": 3}, "the step asks for 3 nodes; the job holds 2 (node-00, node-01)"),
    ({"ntasks": 9}, "5 tasks on node-00 need 5 task slots; the job holds 4 CPUs and 2 tasks there"),
    ({"cpus_per_task": 3}, "2 tasks on node-00 need 6 CPUs; the job holds 4 CPUs"),
    ({"ntasks": 5, "ntasks_per_node": 2}, "5 tasks at 2 per node need 3 nodes; the step has 2"),
    ({"nodelist": ("node-07",)}, "the job holds no node node-07 (its nodes: node-00, node-01)"),
    ({"exclude": ("node-00", "node-01")}, "--exclude leaves none of the job's nodes"),
    ({"gpus_per_node": 5}, "--gpus-per-node=5: the job holds 4 GPUs on node-00"),
    ({"distribution": "plane"}, "block or cyclic"),
    ({"ntasks": 0}, "--ntasks must be at least 1"),
    ({"nodes": 2, "ntasks": 3, "ntasks_per_node": 3}, "leave some of the 2 nodes without a task"),
])
def test_a_step_larger_than_the_allocation_is_refused_naming_it(request_, message):
    with pytest.raises(StepError) as caught:
        plan(**request_)
    assert message in str(caught.value)


def test_more_nodes_than_tasks_uses_fewer_nodes_with_a_warning():
    layout = plan(nodes=2, ntasks=1)
    assert layout.nodes == ("node-00",) and "1 task cannot use 2 nodes" in layout.warnings[0]


def test_a_job_of_half_a_cpu_still_runs_its_one_task():
    assert plan_step(StepRequest(), [Slots("n", 1, 500)]).ranks == ((0,),)


def test_slots_come_from_the_allocation():
    allocs = [c.NodeAllocation(node="a", device_ids=["gpu1"], cpus_milli=2000, tasks=2),
              c.NodeAllocation(node="b", device_ids=[], cpus_milli=2000, tasks=2)]
    assert slots_of(allocs) == [Slots("a", 2, 2000, ("gpu1",)), Slots("b", 2, 2000, ())]


def test_layout_round_trips_as_json():
    layout = plan(gpus_per_task=1, cpus_per_task=1)
    assert StepLayout.from_json(layout.to_json()) == layout


# ------------------------------------------------------------------ environment


def test_each_task_sees_slurms_variables():
    layout = plan(gpus_per_task=2)
    step = step_environment(layout, 3, "node-[00-01]")
    assert step == {
        "SLURM_STEP_ID": "3", "SLURM_STEPID": "3", "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_NUM_NODES": "2",
        "SLURM_STEP_NODELIST": "node-[00-01]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_NTASKS": "4",
        "SLURM_NPROCS": "4", "SLURM_NNODES": "2", "SLURM_TASKS_PER_NODE": "2(x2)",
        "SLURM_JOB_NODELIST": "node-[00-01]", "SLURM_NODELIST": "node-[00-01]", "SLURM_DISTRIBUTION": "block",
        "SLURM_GPUS_PER_TASK": "2"}
    task = task_environment(layout, 1, 1, 4000, ["2", "3"])
    assert task == {
        "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURMD_NODENAME": "node-01",
        "SLURM_TOPOLOGY_ADDR": "node-01", "HORIZON_NODE": "node-01", "SLURM_GTIDS": "2,3", "SLURM_CPUS_ON_NODE": "4",
        "SLURM_GPUS_ON_NODE": "4", "CUDA_VISIBLE_DEVICES": "2,3", "HORIZON_GPU_IDS": "gpu2,gpu3"}
    # a step of one node: its node ids count from 0 within the step
    assert task_environment(plan(nodelist=("node-01",)), 0, 0, 4000, [])["SLURM_NODEID"] == "0"


@pytest.mark.parametrize("counts, text", [
    ([4, 4], "4(x2)"), ([2, 2, 2, 1], "2(x3),1"), ([1], "1"), ([3, 1, 1, 3], "3,1(x2),3"), ([], "")])
def test_counts_in_slurms_form(counts, text):
    assert counts_text(counts) == text


# ------------------------------------------------------------------ ends


@pytest.mark.parametrize("codes, exit_code, sig, srun", [
    ([0, 0], 0, 0, 0), ([0, 3, 1], 3, 0, 3), ([0, -9], 0, 9, 137), ([2, -15], 2, 15, 143), ([0, None], 0, 0, 1),
    ([200, -1], 200, 1, 200)])
def test_srun_exits_with_the_highest_code_or_128_plus_the_signal(codes, exit_code, sig, srun):
    assert tuple(step_exit(codes).__getattribute__(f) for f in ("exit_code", "signal", "srun_code")) == (
        exit_code, sig, srun)


def test_a_steps_state_in_slurms_names():
    ended = dict(job_id="j", attempt=1, step=0)
    assert step_state(c.JobStepStarted(**ended)) == "RUNNING"
    assert step_state(c.JobStepEnded(**ended, task_exit_codes=[0, 0])) == "COMPLETED"
    assert step_state(c.JobStepEnded(**ended, exit_code=3)) == "FAILED"
    assert step_state(c.JobStepEnded(**ended, signal=9)) == "FAILED"
    assert step_state(c.JobStepEnded(**ended, task_exit_codes=[0, None])) == "FAILED"
    assert step_state(c.JobStepEnded(**ended, signal=15, cancelled=True)) == "CANCELLED"
    assert step_state(c.JobStepEnded(**ended, cancelled=True, timed_out=True)) == "TIMEOUT"


# ------------------------------------------------------------------ srun's command line


def test_srun_options_and_the_command():
    args = parse_srun(["-n", "4", "-N2", "--ntasks-per-node=2", "-c", "3", "--gpus-per-task=a100:1", "-l", "-u",
                       "--export=NONE", "-K", "-t", "1:30", "--mpi=pmix", "--cpu-bind=cores", "-w", "node-[00-01]",
                       "python", "train.py", "-n", "5"], {})
    assert args.command == ["python", "train.py", "-n", "5"]  # options end at the command
    assert args.request == {"ntasks": 4, "nodes": 2, "ntasks_per_node": 2, "cpus_per_task": 3, "gpus_per_task": 1,
                            "export": "NONE", "kill_on_bad_exit": True, "time_limit_s": 90.0,
                            "nodelist": ["node-00", "node-01"]}
    assert args.label and args.unbuffered
    assert [n.split(":")[0] for n in args.notes] == ["--mpi=pmix", "--cpu-bind=cores"]  # accepted, said with -v
    assert parse_srun(["--gres=gpu:2", "--", "-x"], {}).request == {"gpus_per_node": 2}
    assert parse_srun(["--ntasks", "2", "--nodes=1-2", "hostname"], {}).request == {"ntasks": 2, "nodes": 1}
    # the batch script's --gpus-per-task is srun's default, as in Slurm
    assert parse_srun(["x"], {"SLURM_GPUS_PER_TASK": "2"}).request == {"gpus_per_task": 2}
    assert parse_srun(["--gpus-per-task=1", "x"], {"SLURM_GPUS_PER_TASK": "2"}).request == {"gpus_per_task": 1}


@pytest.mark.parametrize("argv, message", [
    ([], "no command to run"), (["-n"], "option requires an argument -- 'n'"), (["--bogus", "x"],
     "unrecognized option '--bogus'"), (["-n", "two", "x"], "-n: 'two' is not a whole number"),
    (["--pty", "bash"], "--pty: not supported inside a Horizon job"), (["-Z", "x"], "invalid option -- 'Z'"),
    (["-m", "plane=2", "x"], "block or cyclic"), (["--open-mode=x", "y"], "not append or truncate")])
def test_srun_refuses_what_it_cannot_do(argv, message):
    with pytest.raises(SrunError) as caught:
        parse_srun(argv, {})
    assert message in str(caught.value)


def test_srun_writes_whole_lines_labelled(capsysbinary):
    args = parse_srun(["-l", "x"], {})
    out = _Outputs(args, 2, {})
    out.add(3, 1, b"hel")
    out.add(10, 1, b"one\ntw")
    out.add(3, 1, b"lo\n")  # task 3's line, whole, after task 10's first
    out.flush()
    assert capsysbinary.readouterr().out == b"10: one\n 3: hello\n10: tw"


def test_srun_output_file_patterns():
    name = _expand("out-%j.%s-%t-%2n-%N-%J-%%.txt", job="j7", step=1, rank=3, node_index=1, node="node-01",
                   user="ann", name="train")
    assert name == "out-j7.1-3-01-node-01-j7.1-%.txt"


# ------------------------------------------------------------------ scontrol


def test_scontrol_show_hostnames_expands_and_hostlist_compresses(capsys):
    assert run_scontrol(["show", "hostnames", "node-[00-02],gpu7"], {}) == 0
    assert capsys.readouterr().out == "node-00\nnode-01\nnode-02\ngpu7\n"
    assert run_scontrol(["show", "hostnames"], {"SLURM_JOB_NODELIST": "rack[1-2]-n[01-02]"}) == 0
    assert capsys.readouterr().out.split() == ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]
    assert run_scontrol(["show", "hostlist", "n3,n1,n2,x"], {}) == 0
    assert capsys.readouterr().out == "n[1-3],x\n"
    assert run_scontrol(["show", "hostnames"], {}) == 1
    assert "SLURM_JOB_NODELIST is not set" in capsys.readouterr().err
    assert run_scontrol(["show", "hostnames", "n[3-1]"], {}) == 1
    assert "goes down" in capsys.readouterr().err
    assert expand(compress(["a-09", "a-10", "a-11", "b"])) == ["a-09", "a-10", "a-11", "b"]


def test_scontrol_show_job_is_key_value():
    row = {"job_id": "train-1", "name": "train", "user": "nobody-here", "account": "ml", "state": "RUNNING",
           "nodes": 2, "tasks_per_node": 4, "cpus_milli": 2000, "memory_bytes": 1 << 30, "gpus": 8,
           "time_limit_s": 86400, "attempt": 1, "started_ts": 1000.0, "submitted_ts": 990.0, "stdout": "/w/o.out",
           "allocation": [{"node": "node-00", "cpus_milli": 8000, "tasks": 4},
                          {"node": "node-01", "cpus_milli": 8000, "tasks": 4}]}
    text = show_job_text(row, {"cwd": "/w", "partition": "gpu"}, now=1065.0)
    fields = dict(item.split("=", 1) for item in text.split())
    assert text.startswith("JobId=train-1 JobName=train\n   UserId=")
    assert {k: fields[k] for k in ("JobState", "NumNodes", "NumCPUs", "NumTasks", "NodeList", "Partition",
                                   "TimeLimit", "RunTime", "WorkDir", "StdOut", "TasksPerNode", "BatchHost")} == {
        "JobState": "RUNNING", "NumNodes": "2", "NumCPUs": "16", "NumTasks": "8", "NodeList": "node-[00-01]",
        "Partition": "gpu", "TimeLimit": "1-00:00:00", "RunTime": "00:01:05", "WorkDir": "/w", "StdOut": "/w/o.out",
        "TasksPerNode": "4(x2)", "BatchHost": "node-00"}
    assert "\n" not in show_job_text(row, None, now=1065.0, oneliner=True)


# ------------------------------------------------------------------ sacct's lines


def test_sacct_lines_of_a_job_its_batch_script_and_its_steps():
    row = {"job_id": "j", "state": "SUCCEEDED", "exit_code": 0, "started_ts": 10.0, "ended_ts": 20.0,
           "allocation": [{"node": "n0", "device_ids": ["gpu0"]}, {"node": "n1", "device_ids": ["gpu0"]}],
           "steps": [{"step": 0, "attempt": 1, "name": "python", "nodes": ["n0", "n1"], "tasks": 4,
                      "tasks_per_node": [2, 2], "state": "COMPLETED", "exit_code": 0, "signal": 0,
                      "started_ts": 11.0, "ended_ts": 15.0},
                     {"step": 1, "attempt": 1, "name": "bash", "nodes": ["n1"], "tasks": 1, "state": "RUNNING",
                      "started_ts": 16.0}]}
    lines = step_lines(row)
    assert [(r["job_id"], r["state"], r["nodes"], r["ntasks"]) for r in lines] == [
        ("j.batch", "SUCCEEDED", 1, 1), ("j.0", "COMPLETED", 2, 4), ("j.1", "CANCELLED", 1, 1)]
    assert lines[2]["ended_ts"] == 20.0  # a step whose end was never reported ended with the job
    assert [a["node"] for a in lines[2]["allocation"]] == ["n1"]
    assert [r["job_id"] for r in with_steps([row], ["j.1"])] == ["j.1"]
    assert [r["job_id"] for r in with_steps([row], ["j", "j.1"])] == ["j", "j.batch", "j.0", "j.1"]
    assert step_lines({**row, "started_ts": None}) == []  # nothing ran: no batch line


# ------------------------------------------------------------------ the batch script's environment


def test_the_batch_script_sees_the_whole_allocation_and_no_nats_credentials(tmp_path, monkeypatch):
    from services.nodes.backends.process.executors import ProcessExecutor

    monkeypatch.setenv("HORIZON_NATS_URL", "nats://agent:secret@127.0.0.1:4222")
    executor = ProcessExecutor(tmp_path)
    executor.step_socket = lambda job, attempt: f"/run/{job}.{attempt}.sock"
    executor.shims_dir = tmp_path / ".bin"
    spec = c.JobSpec(tenant="acme", account="ml", command=("true",), nodes=2, tasks_per_node=4, gpus=1)
    allocs = [c.NodeAllocation(node=f"node-0{i}", device_ids=[f"gpu{g}" for g in range(4)], cpus_milli=8000,
                               memory_bytes=4 << 30, tasks=4) for i in range(2)]
    plan = executor._plan("acme:train", 1, spec, allocs[0], None, tmp_path, allocations=allocs)
    env = plan["env"]
    assert "HORIZON_NATS_URL" not in env  # the agent's user and password are not the job's
    assert {k: env[k] for k in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NUM_NODES",
                                "SLURM_NTASKS", "SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE",
                                "SLURM_GPUS_ON_NODE", "SLURM_CLUSTER_NAME", "SLURMD_NODENAME", "SLURM_PROCID",
                                "SLURM_MEM_PER_NODE", "SLURM_JOB_ACCOUNT", "HORIZON_STEP_SOCKET")} == {
        "SLURM_JOB_ID": "train", "SLURM_JOB_NODELIST": "node-[00-01]", "SLURM_NODELIST": "node-[00-01]",
        "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS": "8", "SLURM_TASKS_PER_NODE": "4(x2)",
        "SLURM_JOB_CPUS_PER_NODE": "8(x2)", "SLURM_GPUS_ON_NODE": "4", "SLURM_CLUSTER_NAME": "horizon",
        "SLURMD_NODENAME": "node-00", "SLURM_PROCID": "0", "SLURM_MEM_PER_NODE": "4096", "SLURM_JOB_ACCOUNT": "ml",
        "HORIZON_STEP_SOCKET": "/run/acme:train.1.sock"}
    assert env["PATH"].startswith(f"{tmp_path / '.bin'}:")  # Horizon's srun and scontrol first, in the job only
    monkeypatch.setenv("HORIZON_NATS_URL", "nats://127.0.0.1:4222")  # no credentials: passed on as before
    assert executor._plan("j", 1, spec, allocs[0], None, tmp_path, allocations=allocs)["env"]["HORIZON_NATS_URL"] == \
        "nats://127.0.0.1:4222"
