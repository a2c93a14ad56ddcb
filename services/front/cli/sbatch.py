"""``horizon sbatch SCRIPT``: a Slurm batch script submitted as a ``JobSubmitted``.

Click wiring: reading the script and its options is ``services/front/slurm/sbatch.py``'s (the
directives and the option table in ``sbatch_options.py``, each family of options in
``sbatch_resolve.py``); ``--wait`` is ``services/front/slurm/sbatch_wait.py``'s; submitting is
``services/front/client/submitter.py``'s, as for ``horizon submit``. The mapping and its limits are
in docs/slurm.md.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import msgspec

from events import catalogue as c
from events.arrays import parse_array
from services.front.client.client import default_user
from services.front.client.submitter import (check_lines, check_submission, new_job_id, refuse_rejected,
                                             send_submission, warning_lines)
from services.front.cli.options import resolve_nats, tenant_for
from services.front.slurm.sbatch import SbatchDefaults, script_warnings
from services.front.slurm.sbatch_hetjob import parse_het_sbatch, split_het_command_line
from services.front.slurm.sbatch_options import SbatchError
from services.front.slurm.sbatch_wait import exit_code, wait_for_end

__all__ = ["register"]


def _submission(args: Sequence[str]) -> tuple[dict[str, Any], c.JobSubmitted, str, list[str]]:
    """Horizon's options (with the output flags given as directives), the job, the script's text, and
    the warnings about directives that do less here than in Slurm."""
    # a lone ':' separates a heterogeneous job's components (services/front/slurm/sbatch_hetjob.py)
    ours, segments, script, script_args = split_het_command_line(args)
    wrap = next((o[len("--wrap="):] for seg in segments for o in seg if o.startswith("--wrap=")), None)
    segments = [[o for o in seg if not o.startswith("--wrap=")] for seg in segments]
    if wrap is None and not script:
        raise click.UsageError("give the batch script: horizon sbatch [OPTIONS] SCRIPT [ARGS...] (or --wrap CMD)")
    if wrap is not None and script:
        raise click.UsageError("--wrap takes the place of a script: give one or the other")
    text = ""
    path = ""
    if script:
        path = os.path.abspath(script[0])
        try:
            text = Path(path).read_text(errors="replace")
        except OSError as exc:
            raise _failed(f"cannot read {script[0]}: {exc.strerror}") from None
    user = default_user()
    defaults = SbatchDefaults(user=user, workdir=os.getcwd(), script_path=path, script_args=tuple(script_args),
                              submit_host=socket.gethostname(),
                              environ=dict(os.environ), read_file=_read_export_file)
    notes: list[str] = []
    flags: set[str] = set()
    try:
        fields, _ = parse_het_sbatch(text, defaults=defaults, segments=segments, wrap=wrap, warnings=notes,
                                     flags=flags)
    except SbatchError as exc:
        name = script[0] if script else "--wrap"
        raise _failed(f"{name}: " + str(exc)) from None
    for flag in flags:  # #SBATCH --parsable, -Q, -v: the command's output, as on its command line
        ours.setdefault(flag, True)
    tenant = ours.get("tenant") or tenant_for(ours.get("nats"))  # a tenant's URL names its tenant (up --auth)
    job_id = ours.get("job-id") or new_job_id(user)
    if ours.get("priority-class") is not None:
        if ours["priority-class"] not in c.PRIORITY_CLASSES:
            raise click.BadParameter(f"{ours['priority-class']!r} is not one of {', '.join(c.PRIORITY_CLASSES)}",
                                     param_hint="--priority-class")
        fields["priority_class"] = ours["priority-class"]
    if ours.get("sim-runtime") is not None:
        try:
            fields["sim_runtime_s"] = float(ours["sim-runtime"])
        except ValueError:
            raise click.BadParameter(f"{ours['sim-runtime']!r} is not a number of seconds",
                                     param_hint="--sim-runtime") from None
    if ours.get("dataset"):
        fields["datasets"] = sorted({n.strip() for d in ours["dataset"] for n in d.split(",") if n.strip()})
    event = c.JobSubmitted(ts=time.time(), source="horizon-sbatch", correlation_id=job_id, job_id=job_id,
                           tenant=tenant, **fields)
    return ours, event, text, notes


def _failed(message: str) -> click.ClickException:
    """The error sbatch ends with, its exit code ``$SLURM_EXIT_ERROR`` when that is a number other than 0
    (as Slurm's, so that a script tells sbatch's failure from its own), else 1."""
    error = click.ClickException(message)
    try:
        code = int(os.environ.get("SLURM_EXIT_ERROR", "1"))
    except ValueError:
        code = 1
    error.exit_code = code or 1
    return error


def _read_export_file(text: str) -> bytes:
    """``--export-file``'s content: a descriptor from 3 on that is open (as Slurm's), else a file's."""
    if text.isdigit() and int(text) >= 3:
        fd = int(text)
        try:
            os.fstat(fd)
        except OSError:
            pass
        else:
            chunks = []
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
            return b"".join(chunks)
    return Path(text).expanduser().read_bytes()


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def sbatch(args: tuple[str, ...]) -> None:
    """Submit a Slurm batch script: horizon sbatch [OPTIONS] SCRIPT [ARGS...]

    \b
    Reads the script's #SBATCH directives as sbatch does; OPTIONS are sbatch's
    (-N 2, --gres=gpu:a100:4, --time=2:00:00, --array=0-9%2, --dependency=afterok:J,
    ...) and override the script's. A directive Horizon cannot honour is an
    error naming its line; one that only changes speed, layout or who is told
    (--mail-type, --hint, ...) is a warning naming its line (docs/slurm.md
    lists them all). -W/--wait waits for the job's end and exits with its code.

    \b
    Horizon's own options (before SCRIPT):
      --nats URL             NATS server (default $HORIZON_NATS_URL, else the `horizon up`
                             running on --data-dir, else nats://127.0.0.1:4222)
      --data-dir DIR         where that `horizon up` keeps its data (default .horizon)
      --tenant T             your tenant (default $HORIZON_TENANT or default)
      --job-id ID            your id for the job (default: generated)
      --priority-class C     critical, high, normal, low or scavenger
      --sim-runtime S        seconds a simulated job runs (sim executor)
      --dataset NAME[,NAME]  a dataset the job reads (repeatable): placement prefers nodes holding it
      --dry-run              print the JobSubmitted as JSON, submit nothing
      --check                ask Horizon whether it would accept the job, submit nothing
      --no-wait              do not wait for acceptance
      --json                 print {"job_id": ..., "number": ..., "state": ...}
      --parsable             print only the job's number (as sbatch --parsable)
      -Q, --quiet            print nothing on success
      -v, --verbose          also print the job's resources to stderr
    """
    ours, event, text, notes = _submission(args)
    if not ours.get("quiet"):
        for warning in [*notes, *script_warnings(text, event.nodes)]:
            click.echo(f"horizon sbatch: warning: {warning}", err=True)
    if ours.get("dry-run"):
        click.echo(msgspec.json.encode(event).decode())
        return
    if ours.get("verbose"):
        r = event.resources
        click.echo(f"horizon sbatch: {event.nodes} node(s) x {event.tasks_per_node} task(s), per task {r.cpus} CPUs, "
                   f"{'the partition default of' if r.memory is None else r.memory} bytes of memory, {r.gpus} "
                   f"GPU(s){' ' + r.gpu_type if r.gpu_type else ''}; "
                   f"time limit {event.time_limit_s} s; partition {','.join(event.partitions) or '(default)'}",
                   err=True)
    nats_url = resolve_nats(ours.get("nats") or os.environ.get("HORIZON_NATS_URL"), ours.get("data-dir"))
    if ours.get("check"):
        verdict = check_submission(nats_url, event)
        out, err = check_lines(verdict, event.job_id, bool(ours.get("json")), prog="horizon sbatch")
        for line in out:
            click.echo(line)
        for line in err:
            click.echo(line, err=True)
        refuse_rejected(verdict, event.job_id)
        return
    result = send_submission(nats_url, event, no_wait=bool(ours.get("no-wait")))
    if not ours.get("quiet"):
        for line in warning_lines(result, "horizon sbatch"):  # e.g. the partition it runs in instead of one not defined
            click.echo(line, err=True)
    if result["state"] == "REJECTED":
        if ours.get("json"):
            click.echo(json.dumps(result))
        raise _failed(f"job {event.job_id} rejected: {result['reason']}")
    if result["state"] == "SUBMITTED" and not ours.get("no-wait"):
        if ours.get("json"):
            click.echo(json.dumps(result))
        raise _failed(f"job {event.job_id}: {result['reason']}")
    # The job's number, as Slurm's sbatch prints its job id (what submitit, dask-jobqueue, Parsl and
    # Snakemake read); the id for a Horizon that gives none, or when it gave no verdict (--no-wait).
    shown = str(result.get("number") or event.job_id)
    if ours.get("json"):
        click.echo(json.dumps(result))
    elif ours.get("parsable"):
        click.echo(shown)
    elif not ours.get("quiet"):
        click.echo(f"Submitted batch job {shown}")
    if ours.get("wait") and not ours.get("no-wait"):
        ids = [event.job_id] if event.array is None else [
            f"{event.job_id}_{i}" for i in parse_array(event.array, "--array").indices]
        raise SystemExit(exit_code(wait_for_end(nats_url, ids)))


def register(group: click.Group) -> None:
    group.add_command(sbatch)
