"""``scontrol show ...``: host lists and jobs, as scripts read them (Slurm's ``Key=Value`` output).

* ``scontrol show hostnames [LIST]``: one host name per line (default ``$SLURM_JOB_NODELIST``):
  what DDP launchers run to find their master (``... | head -n 1``). Pure host list expansion
  (``services/domain/hostlist.py``), no connection needed;
* ``scontrol show hostlist NAMES`` (and ``hostlistsorted``): the compressed form;
* ``scontrol show job [ID]``: inside a job, from the node's agent over the attempt's socket
  (``$HORIZON_STEP_SOCKET``: the job needs no NATS credentials; its own job without an ID, or
  another job of its tenant); outside, from the read model (``horizon.query.job``) and the job's
  ``JobAccepted``; an array's id (or number) lists its tasks, its pending ones as one record
  (``ArrayTaskId=2-5%1``), as Slurm's. ``Reason=`` is Slurm's code (``Resources``, ``Priority``, ...),
  and a waiting job's sentence follows as ``Why=``. ``-o``/``--oneliner`` puts a job on one line;
  ``-d`` is accepted.
* ``scontrol show step [JOB[.STEP]]``: the steps the read model knows (outside a job or in one
  that reaches NATS).
* ``scontrol show lic[enses] [NAME]``: the licenses an operator defined (``horizon license set``), what
  jobs hold and what is free, in Slurm's form (``LicenseName=matlab`` / ``Total=3 Used=2 Free=1
  Reserved=0 Remote=no``), from the scheduler's read model (``horizon.query.licenses``).

Other scontrol commands are Horizon's own: ``horizon hold``, ``release``, ``update``, ``cancel``
(docs/slurm.md). The texts, and where they are read, are ``services/front/slurm/scontrol_show.py``'s.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Mapping, Sequence

import click

from services.domain.hostlist import HostlistError, compress, expand
from services.front.cli.options import resolve_nats
from services.front.slurm.scontrol_show import (SOCKET_ENV, array_from_log, ask_agent, job_from_log,
                                                 licenses_from_log, show_array_text, show_job_text,
                                                 show_licenses_text, show_step_text)

__all__ = ["scontrol", "run_scontrol", "register"]


class _Usage(Exception):
    pass


def _url() -> str:
    return resolve_nats(os.environ.get("HORIZON_NATS_URL"), None)  # else the `horizon up` on .horizon


def _job(job_id: str | None, environ: Mapping[str, str], oneliner: bool) -> str:
    path = environ.get(SOCKET_ENV)
    own = environ.get("SLURM_JOB_ID")
    if path and (job_id is None or job_id == own or not environ.get("HORIZON_NATS_URL")):
        # its own job by its number (SLURM_JOB_ID) or id (HORIZON_JOB_ID) is the agent's to tell as its own
        answer = ask_agent(path, None if job_id in (own, environ.get("HORIZON_JOB_ID")) else job_id)
        if "error" in answer:
            raise click.ClickException(answer["error"])
        row = answer["job"]
        return show_job_text(row, row.get("spec"), time.time(), oneliner)
    job_id = job_id or own  # a step's task: its job, from the read model (the batch script asks its agent)
    if job_id is None:
        raise _Usage("show job: give a job id (outside a job there is no job of its own)")
    try:
        row, spec, _steps = job_from_log(_url(), job_id)
    except Exception as exc:  # noqa: BLE001 - no NATS here: say where scontrol show job works
        raise click.ClickException(
            f"cannot reach Horizon's read model ({exc}); inside a job, the batch script asks its node's agent "
            "(scontrol show job needs no connection there); elsewhere set HORIZON_NATS_URL") from None
    if row is None:  # an array's id (or number, its first task's): its tasks, as Slurm lists them
        tasks = array_from_log(_url(), job_id)
        if not tasks:
            raise click.ClickException(f"Invalid job id specified: {job_id}")
        return show_array_text(tasks, time.time(), oneliner)
    return show_job_text(row, spec, time.time(), oneliner)


def _licenses(name: str | None, oneliner: bool) -> str:
    try:
        rows = licenses_from_log(_url())
    except Exception as exc:  # noqa: BLE001 - no NATS here: say so
        raise click.ClickException(f"cannot reach Horizon's read model ({exc}); set HORIZON_NATS_URL") from None
    if name is not None and rows and not any(row["name"] == name for row in rows):
        names = ", ".join(sorted(str(row["name"]) for row in rows))
        raise click.ClickException(f"license {name!r} is not configured (licenses: {names})")
    return show_licenses_text(rows, name, oneliner)


def _steps(job_id: str | None, environ: Mapping[str, str]) -> list[str]:
    wanted = job_id or environ.get("SLURM_JOB_ID")
    if not wanted:
        raise _Usage("show step: give a job id (JOB or JOB.STEP)")
    base, _, step = wanted.partition(".")
    row, _spec, steps = job_from_log(_url(), base)
    if row is None:
        raise click.ClickException(f"Invalid job id specified: {wanted}")
    out = []
    for s in steps:
        if s.get("attempt") != row.get("attempt") or (step and str(s["step"]) != step):
            continue
        out.append(show_step_text(row, s, time.time()))
    return out or [f"No job steps exist for {wanted}"]


def run_scontrol(args: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    """scontrol's run: prints its answer; its exit code."""
    environ = os.environ if environ is None else environ
    words = [a for a in args if a not in ("-o", "--oneliner", "-d", "--details", "-a", "--all", "-Q", "--quiet")]
    oneliner = any(a in ("-o", "--oneliner") for a in args)
    try:
        if len(words) < 2 or words[0].lower() != "show":
            raise _Usage("Horizon's scontrol answers: show hostnames [LIST], show hostlist NAMES, show job [ID], "
                         "show step [JOB[.STEP]], show licenses [NAME] (hold, release, update, cancel: horizon "
                         "hold/release/update/cancel)")
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
        elif len(what) >= 2 and "licenses".startswith(what):  # lic, license, licenses: as Slurm's
            click.echo(_licenses(rest[0] if rest else None, oneliner))
        else:
            raise _Usage(f"show {what}: Horizon's scontrol shows hostnames, hostlist, job, step and licenses "
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
    """Slurm's scontrol show: hostnames [LIST], hostlist NAMES, job [ID], step [JOB[.STEP]], licenses [NAME].

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
