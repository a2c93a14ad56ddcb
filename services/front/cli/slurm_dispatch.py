"""Slurm's commands under their own names: the dispatcher the shims run (``horizon slurm-shims DIR``,
in ``services/front/cli/slurm_shims.py``, writes them).

``sbatch``, ``squeue``, ``scancel``, ``sinfo``, ``sacct``, ``srun`` and ``scontrol`` are each
``horizon NAME`` (that command parses Slurm's options: ``horizon squeue -h`` is squeue's
``--noheader``), run under the name ``NAME``: usage lines, errors (``squeue: error: ...``) and
exit codes are the command's own. ``main`` finds the name from ``argv[0]`` (a link named
``squeue``) or from the first argument (the shims: ``python -c ... squeue ARGS``).

The shims are written by ``services/runtime/command_shims.py`` (also used by node agents for a job's own
PATH); how they keep out of a real Slurm's way is said there and in docs/slurm.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from services.runtime.command_shims import SLURM_COMMANDS

__all__ = ["main", "run_command"]

_INSIDE_JOBS = frozenset({"srun", "scontrol"})  # services/front/cli/srun.py run_srun, services/front/cli/scontrol.py run_scontrol


def run_command(name: str, args: list[str]) -> int:
    """Run ``horizon NAME ARGS`` as the program ``NAME``; its exit code. Its text reaches the terminal
    escaped, as every command's does (``services/front/client/terminal.py``)."""
    from services.front.client.terminal import printable_output

    with printable_output():
        return _run_command(name, args)


def _run_command(name: str, args: list[str]) -> int:
    if name in _INSIDE_JOBS:
        # srun and scontrol run inside jobs, often in loops: their modules alone start in ~0.1 s, the
        # whole CLI in ~0.6 s. They print their own errors (srun: error: ...) and return the code.
        module = __import__(f"services.front.cli.{name}", fromlist=["_"])
        try:
            return int(getattr(module, f"run_{name}")(args))
        except KeyboardInterrupt:
            return 130
    from services.front.cli.main import USER_ERRORS, cli, quiet_broken_pipe, user_error_text

    command = cli.commands.get(name)
    if command is None:
        click.echo(f"{name}: error: this Horizon has no 'horizon {name}' (docs/slurm.md)", err=True)
        return 1
    try:
        result = command.main(args=args, prog_name=name, standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.UsageError as exc:
        click.echo(f"{name}: error: {exc.format_message()}", err=True)
        click.echo(f"Try '{name} --help' for more information.", err=True)
        return 1  # Slurm's commands exit 1 on a bad option too
    except click.ClickException as exc:
        click.echo(f"{name}: error: {exc.format_message()}", err=True)
        return exc.exit_code
    except click.Abort:
        return 1
    except BrokenPipeError:  # squeue | head
        return quiet_broken_pipe()
    except USER_ERRORS as exc:
        click.echo(f"{name}: error: {user_error_text(exc)}", err=True)
        return 1
    except KeyboardInterrupt:
        return 130
    return result if isinstance(result, int) else 0


def main(argv: list[str] | None = None) -> None:
    """The shims' entry: ``NAME ARGS...`` after the interpreter's own, or a program named ``NAME``."""
    argv = list(sys.argv if argv is None else argv)
    name = Path(argv[0]).name if argv else ""
    if name in SLURM_COMMANDS:
        args = argv[1:]
    elif len(argv) > 1 and argv[1] in SLURM_COMMANDS:
        name, args = argv[1], argv[2:]
    else:
        click.echo(f"usage: {Path(argv[0]).name if argv else 'slurm_shims'} {{{','.join(SLURM_COMMANDS)}}} "
                   "[ARGS...]", err=True)
        sys.exit(2)
    sys.exit(run_command(name, args))


if __name__ == "__main__":
    main()
