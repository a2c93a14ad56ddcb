"""``horizon slurm-shims DIR``: write Slurm's commands (``sbatch``, ``squeue``, ...) into a directory of
the user's choosing as shims that run Horizon's, or ``--remove`` them. The shims and the rules that
keep them out of a real Slurm's way: ``services/runtime/command_shims.py``; what they run:
``services/front/cli/slurm_dispatch.py``.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import click

from services.front.cli.options import NATS_DEFAULT
from services.runtime.command_shims import SLURM_COMMANDS, ShimError, real_slurm, remove_shims, write_shims

__all__ = ["slurm_shims", "register"]


@click.command(name="slurm-shims")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--remove", is_flag=True, help="Remove the shims from DIRECTORY (only files Horizon wrote).")
@click.option("--force", is_flag=True,
              help="Write them although a real Slurm is on PATH; they then run Horizon's commands whenever DIRECTORY "
                   "comes first on PATH, even where Slurm's are installed.")
@click.option("--only", "names", multiple=True, type=click.Choice(SLURM_COMMANDS),
              help="Only these commands (repeatable; default: every one this Horizon has).")
@click.option("--nats", "nats_url", default=None,
              help="The NATS URL the shims use when $HORIZON_NATS_URL is not set where they run.")
def slurm_shims(directory: Path, remove: bool, force: bool, names: tuple[str, ...], nats_url: str | None) -> None:
    """Write Slurm's commands (sbatch, squeue, scancel, sinfo, sacct, srun, scontrol) into DIRECTORY as small
    scripts that run Horizon's; print the line that puts DIRECTORY first on PATH.

    \b
    eval "$(horizon slurm-shims ~/.horizon/bin)"    then: sbatch job.sh; squeue --me; sacct -j ID
    horizon slurm-shims --remove ~/.horizon/bin

    Nothing is put on PATH for you. A real Slurm found on PATH is never shadowed: this refuses to write
    unless --force, and a shim written without --force runs Slurm's command of its name whenever one
    is on PATH (a Slurm installed later). A file that is not a shim is never replaced.
    """
    commands = click.get_current_context().find_root().command.commands  # type: ignore[attr-defined]
    directory = directory.expanduser().absolute()
    if remove:
        removed = remove_shims(directory)
        click.echo(f"removed {len(removed)} shim(s) from {directory}"
                   + (f": {' '.join(p.name for p in removed)}" if removed else ""), err=True)
        return
    chosen = list(names) or [n for n in SLURM_COMMANDS if n in commands]
    missing = [n for n in chosen if n not in commands]
    if missing:
        raise click.UsageError(f"this Horizon has no horizon {', '.join(missing)}")
    others = os.pathsep.join(e for e in os.environ.get("PATH", "").split(os.pathsep)
                             if e and Path(e).expanduser().absolute() != directory)
    real = real_slurm(others, chosen)
    if real and not force:
        found = ", ".join(f"{n} at {p}" for n, p in real.items())
        raise click.ClickException(
            f"a Slurm is installed here ({found}); shims in {directory} would shadow it, and Horizon's commands "
            "never do. Use Horizon's as 'horizon sbatch', 'horizon squeue', ... or give --force to write them "
            "anyway (they then win wherever DIRECTORY comes first on PATH)")
    env = {"HORIZON_NATS_URL": nats_url} if nats_url and nats_url != NATS_DEFAULT else None
    try:
        written = write_shims(directory, chosen, guard=not force, env=env)
    except ShimError as exc:
        raise click.ClickException(str(exc)) from None
    if real:
        click.echo(f"warning: these shadow Slurm's commands wherever {directory} comes before "
                   f"{', '.join(sorted({str(p.parent) for p in real.values()}))} on PATH", err=True)
    click.echo(f"wrote {' '.join(p.name for p in written)} into {directory}; to use them in this shell:", err=True)
    click.echo(f"export PATH={shlex.quote(str(directory))}:\"$PATH\"")


def register(group: click.Group) -> None:
    group.add_command(slurm_shims)
