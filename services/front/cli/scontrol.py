"""``scontrol show ...``: host lists and jobs, as scripts read them (Slurm's ``Key=Value`` output).

* ``scontrol show hostnames [LIST]``: one host name per line (default ``$SLURM_JOB_NODELIST``):
  what DDP launchers run to find their master (``... | head -n 1``). Pure host list expansion
  (``services/domain/hostlist.py``), no connection needed;
* ``scontrol show hostlist NAMES`` (and ``hostlistsorted``): the compressed form;
* ``scontrol show job [ID]``: inside a job, from the node's agent over the attempt's socket
  (``$HORIZON_STEP_SOCKET``: the job needs no NATS credentials; its own job without an ID, or
  another job of its tenant); outside, from the read model (``horizon.query.job``) and the job's
  ``JobAccepted``. ``-o``/``--oneliner`` puts a job on one line; ``-d`` is accepted.
* ``scontrol show step [JOB[.STEP]]``: the steps the read model knows (outside a job or in one
  that reaches NATS).

Other scontrol commands are Horizon's own: ``horizon hold``, ``release``, ``update``, ``cancel``
(docs/slurm.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import click

from events.resources import format_memory
from services.front.client.reasons import summary
from services.domain.hostlist import HostlistError, compress, expand
from services.domain.steps import counts_text

__all__ = ["scontrol", "run_scontrol", "show_job_text", "register"]

SOCKET_ENV = "HORIZON_STEP_SOCKET"
_STATE = {"PENDING": "PENDING", "HELD": "PENDING", "SCHEDULED": "CONFIGURING", "RUNNING": "RUNNING",
          "SUCCEEDED": "COMPLETED", "FAILED": "FAILED", "PREEMPTED": "PREEMPTED", "CANCELLED": "CANCELLED",
          "REJECTED": "FAILED", "UNSCHEDULABLE": "FAILED", "DEPENDENCY_NEVER_SATISFIED": "CANCELLED",
          "OUT_OF_MEMORY": "OUT_OF_MEMORY"}


class _Usage(Exception):
    pass


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "UNLIMITED"
    s = max(0, int(seconds))
    days, s = divmod(s, 86400)
    text = f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}-{text}" if days else text


def _stamp(ts: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts)) if ts else "Unknown"


def _uid(user: str) -> str:
    try:
        return f"{user}({pwd.getpwnam(user).pw_uid})"
    except (KeyError, TypeError):
        return user or "N/A"


def show_job_text(row: Mapping[str, Any], spec: Mapping[str, Any] | None, now: float, oneliner: bool = False) -> str:
    """A job as ``scontrol show job`` prints it, from a jobs read-model row (and its spec, if known)."""
    spec = spec or {}
    allocation = row.get("allocation") or []
    nodes = [a["node"] for a in allocation]
    # the nodes it holds (an elastic gang's change); waiting, its count, or an elastic gang's range MIN-MAX
    nnodes = len(nodes) if nodes else (row.get("nodes") or spec.get("nodes") or 1)
    num_nodes = f"{spec['min_nodes']}-{nnodes}" if spec.get("min_nodes") and not nodes else str(nnodes)
    per_node = row.get("tasks_per_node") or spec.get("tasks_per_node") or 1
    cpus_milli = row.get("cpus_milli") or spec.get("cpus_milli") or 1000
    ntasks = nnodes * per_node
    state = _STATE.get(row["state"], row["state"])
    if row["state"] == "FAILED" and str(row.get("reason") or "").startswith("time limit"):
        state = "TIMEOUT"
    started, ended = row.get("started_ts"), row.get("ended_ts")
    live = row["state"] in ("SCHEDULED", "RUNNING")
    run_time = ((now if live or not ended else ended) - started) if started else 0
    code = row.get("exit_code")
    exit_code = "0:0" if code is None else (f"0:{-code}" if code < 0 else f"{code}:0")
    gpus = row.get("gpus") or 0
    memory = (row.get("memory_bytes") or spec.get("memory_bytes") or 0) * per_node
    reason = "None" if live or row["state"] not in ("PENDING", "HELD") else (
        "JobHeldUser" if row["state"] == "HELD" else (summary(row.get("reason")) or "None"))
    cpus_per_node = [max(1, -(-(a.get("cpus_milli") or cpus_milli * per_node) // 1000)) for a in allocation]
    cwd = spec.get("cwd") or ""
    stdout = row.get("stdout") or ""
    fields = [
        [f"JobId={row['job_id']}", f"JobName={row.get('name') or spec.get('name') or ''}"],
        [f"UserId={_uid(row.get('user') or spec.get('user') or '')}", f"Account={row.get('account') or ''}",
         f"QOS={spec.get('qos') or 'normal'}", f"Nice={spec.get('nice') or 0}"],
        [f"JobState={state}", f"Reason={reason}", f"Dependency={_deps(spec) or '(null)'}"],
        [f"Restarts={max(0, (row.get('attempt') or 1) - 1)}", "BatchFlag=1", f"ExitCode={exit_code}"],
        [f"RunTime={_duration(run_time)}", f"TimeLimit={_duration(row.get('time_limit_s'))}"],
        [f"SubmitTime={_stamp(row.get('submitted_ts'))}"],
        [f"StartTime={_stamp(started)}", f"EndTime={_stamp(ended) if ended and not live else 'Unknown'}"],
        [f"Partition={spec.get('partition') or spec.get('profile') or 'default'}"],
        [f"NodeList={compress(nodes) if nodes else '(null)'}"],
        [f"BatchHost={nodes[0] if nodes else '(null)'}"],
        [f"NumNodes={num_nodes}", f"NumCPUs={-(-cpus_milli * ntasks // 1000)}", f"NumTasks={ntasks}",
         f"CPUs/Task={cpus_milli / 1000:g}"],
        [f"TRES=cpu={-(-cpus_milli * ntasks // 1000)},mem={format_memory(memory * nnodes).replace(' ', '')},"
         f"node={nnodes}" + (f",gres/gpu={gpus}" if gpus else "")],
        [f"TasksPerNode={counts_text([max(1, a.get('tasks') or per_node) for a in allocation]) if allocation else per_node}",
         f"CPUsPerNode={counts_text(cpus_per_node) if cpus_per_node else '(null)'}"],
        [f"MinMemoryNode={format_memory(memory).replace(' ', '')}"],
        [f"WorkDir={cwd or '(null)'}"],
        [f"StdErr={row.get('stderr') or stdout or '(null)'}", "StdIn=/dev/null", f"StdOut={stdout or '(null)'}"],
    ]
    if spec.get("array") is not None and spec.get("array_index") is not None:
        fields[0][1:1] = [f"ArrayJobId={spec['array']}", f"ArrayTaskId={spec['array_index']}"]
    if oneliner:
        return " ".join(item for line in fields for item in line)
    return "\n".join(("   " if i else "") + " ".join(line) for i, line in enumerate(fields))


def _deps(spec: Mapping[str, Any]) -> str:
    kinds = {"after-ok": "afterok", "after-any": "afterany", "after-not-ok": "afternotok", "after": "after"}
    return ",".join(f"{kinds.get(d.get('kind'), d.get('kind'))}:{d.get('job_id')}" for d in spec.get("dependencies") or ())


def _ask_agent(path: str, job_id: str | None) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(path)
        sock.sendall(json.dumps({"op": "job", "job_id": job_id}).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return json.loads(data) if data else {"error": "the node's agent did not answer"}


def _from_log(job_id: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None, list[dict[str, Any]]]:
    """(row, spec, steps) of a job from the read model and its JobAccepted (outside a job)."""
    import msgspec

    from services.front.client.client import query, session
    from services.front.cli.options import resolve_nats
    from services.front.slurm.squeue_format import accepted_specs

    url = resolve_nats(os.environ.get("HORIZON_NATS_URL"), None)  # else the `horizon up` on .horizon

    async def go() -> tuple[dict[str, Any] | None, dict[str, Any] | None, list[dict[str, Any]]]:
        async with session(url) as nc:
            body = await query(nc, "job", {"job_id": job_id})
            row = body.get("job")
            if row is None:
                return None, None, []
            for event in body.get("events") or []:
                detail = event.get("detail") or {}
                if event["type"] == "JobStarted" and detail.get("attempt") == row.get("attempt"):
                    row["stdout"], row["stderr"] = detail.get("stdout"), detail.get("stderr")
            specs = await accepted_specs(nc, [row["job_id"]])
            spec = specs.get(row["job_id"])
            return row, msgspec.to_builtins(spec) if spec is not None else None, body.get("steps") or []

    return asyncio.run(go())


def _job(job_id: str | None, environ: Mapping[str, str], oneliner: bool) -> str:
    path = environ.get(SOCKET_ENV)
    own = environ.get("SLURM_JOB_ID")
    if path and (job_id is None or job_id == own or not environ.get("HORIZON_NATS_URL")):
        answer = _ask_agent(path, job_id)
        if "error" in answer:
            raise click.ClickException(answer["error"])
        row = answer["job"]
        return show_job_text(row, row.get("spec"), time.time(), oneliner)
    job_id = job_id or own  # a step's task: its job, from the read model (the batch script asks its agent)
    if job_id is None:
        raise _Usage("show job: give a job id (outside a job there is no job of its own)")
    try:
        row, spec, _steps = _from_log(job_id)
    except Exception as exc:  # noqa: BLE001 - no NATS here: say where scontrol show job works
        raise click.ClickException(
            f"cannot reach Horizon's read model ({exc}); inside a job, the batch script asks its node's agent "
            "(scontrol show job needs no connection there); elsewhere set HORIZON_NATS_URL") from None
    if row is None:
        raise click.ClickException(f"Invalid job id specified: {job_id}")
    return show_job_text(row, spec, time.time(), oneliner)


def _steps(job_id: str | None, environ: Mapping[str, str]) -> list[str]:
    wanted = job_id or environ.get("SLURM_JOB_ID")
    if not wanted:
        raise _Usage("show step: give a job id (JOB or JOB.STEP)")
    base, _, step = wanted.partition(".")
    row, _spec, steps = _from_log(base)
    if row is None:
        raise click.ClickException(f"Invalid job id specified: {wanted}")
    out = []
    for s in steps:
        if s.get("attempt") != row.get("attempt") or (step and str(s["step"]) != step):
            continue
        end = s.get("ended_ts")
        state = s.get("state") or "RUNNING"
        nodes = s.get("nodes") or []
        out.append(f"StepId={row['job_id']}.{s['step']} UserId={_uid(row.get('user') or '')} "
                   f"StartTime={_stamp(s.get('started_ts'))} TimeLimit=UNLIMITED\n"
                   f"   State={state} Partition={row.get('partition') or '(null)'} "
                   f"NodeList={compress(nodes) if nodes else '(null)'}\n"
                   f"   Nodes={len(nodes)} Tasks={s.get('tasks')} Name={s.get('name') or ''}\n"
                   f"   ExitCode={s.get('exit_code') or 0}:{s.get('signal') or 0} "
                   f"RunTime={_duration((end or time.time()) - (s.get('started_ts') or time.time()))}")
    return out or [f"No job steps exist for {wanted}"]


def run_scontrol(args: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    """scontrol's run: prints its answer; its exit code."""
    environ = os.environ if environ is None else environ
    words = [a for a in args if a not in ("-o", "--oneliner", "-d", "--details", "-a", "--all", "-Q", "--quiet")]
    oneliner = any(a in ("-o", "--oneliner") for a in args)
    try:
        if len(words) < 2 or words[0].lower() != "show":
            raise _Usage("Horizon's scontrol answers: show hostnames [LIST], show hostlist NAMES, show job [ID], "
                         "show step [JOB[.STEP]] (hold, release, update, cancel: horizon hold/release/update/cancel)")
        what, rest = words[1].lower(), words[2:]
        if what in ("hostnames", "hostname"):
            text = rest[0] if rest else environ.get("SLURM_JOB_NODELIST", "")
            if not text:
                raise _Usage("show hostnames: give a host list (SLURM_JOB_NODELIST is not set)")
            for name in expand(_read_if_file(text)):
                click.echo(name)
        elif what in ("hostlist", "hostlistsorted"):
            if not rest:
                raise _Usage(f"show {what}: give host names (a,b,c or a file of names)")
            names = expand(_read_if_file(rest[0]))
            click.echo(compress(sorted(names) if what == "hostlistsorted" else names))
        elif what in ("job", "jobs", "jobid"):
            click.echo(_job(rest[0] if rest else None, environ, oneliner))
        elif what in ("step", "steps"):
            click.echo("\n\n".join(_steps(rest[0] if rest else None, environ)))
        else:
            raise _Usage(f"show {what}: Horizon's scontrol shows hostnames, hostlist, job and step "
                         "(nodes: horizon nodes or sinfo; partitions: sinfo)")
    except _Usage as exc:
        click.echo(f"scontrol: error: {exc}", err=True)
        return 1
    except HostlistError as exc:
        click.echo(f"scontrol: error: {exc}", err=True)
        return 1
    except click.ClickException as exc:
        click.echo(f"scontrol: error: {exc.format_message()}", err=True)
        return 1
    except BrokenPipeError:  # scontrol show hostnames | head -n 1: the reader has what it wanted
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError as exc:
        click.echo(f"scontrol: error: {exc.strerror or exc}", err=True)
        return 1
    return 0


def _read_if_file(text: str) -> str:
    """A host list, or (as Slurm reads it) a file of host names when the argument names one."""
    if "/" in text and os.path.isfile(text):
        with open(text) as fh:
            return ",".join(line.strip() for line in fh if line.strip())
    return text


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False,
                                 "help_option_names": ["--help"]})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def scontrol(ctx: click.Context, args: tuple[str, ...]) -> None:
    """Slurm's scontrol show: hostnames [LIST], hostlist NAMES, job [ID], step [JOB[.STEP]].

    \b
    scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1     # a DDP master
    scontrol show job $SLURM_JOB_ID

    Inside a job it asks the node's agent (no NATS credentials needed); outside, the read model.
    """
    code = run_scontrol(list(args))
    sys.stdout.flush()
    ctx.exit(code)


def register(group: click.Group) -> None:
    group.add_command(scontrol)
