"""``horizon srun``: ``srun`` inside a job, a job step (``services/front/slurm/srun.py`` runs it; its
options are read by ``services/front/slurm/srun_options.py``)."""

from __future__ import annotations

import click

from services.front.slurm.srun import run_srun

__all__ = ["srun", "register"]


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False,
                                 "help_option_names": ["--help"]})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def srun(ctx: click.Context, args: tuple[str, ...]) -> None:
    """Inside a job: run a command once per task across the job's nodes (a job step).

    \b
    srun [-n N] [-N N] [--ntasks-per-node N] [-c N] [--gpus-per-task N] [-l] [--export ...] COMMAND [ARGS...]

    Without options the whole allocation: every node, with its tasks. Each task gets SLURM_PROCID,
    SLURM_LOCALID, SLURM_NODEID, SLURM_NTASKS, SLURM_STEP_ID, ... and its own CUDA_VISIBLE_DEVICES.
    srun exits with the highest exit code of the tasks. docs/slurm.md, "Job steps".
    """
    ctx.exit(run_srun(list(args)))


def register(group: click.Group) -> None:
    group.add_command(srun)
