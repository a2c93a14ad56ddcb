"""The ``horizon`` command line.

Errors a person can act on are one line on stderr and exit code 1, never a
traceback (``HorizonCLI.invoke`` turns the known error types into that). The front libraries' own
problems (``services/front/client/problems.py``) become click's exceptions of the same words inside
each command (``click_error``, ``speak_click``), so they read and exit as if the command had raised them.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import signal
import sys
from pathlib import Path
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import click
from nats.errors import Error as NatsError  # (`nats` is a command of this module)
from nats.js.errors import APIError as JetStreamAPIError

from events.resources import ResourceError
from services.front.client.client import JETSTREAM_NOT_ENABLED, no_jetstream_text
from services.front.client.problems import BadValue, Failure, Problem, UsageProblem
from services.front.client.terminal import printable_output
from services.runtime.log import LogError
from services.runtime.natsserver import NatsServer, NatsServerError



class CLIError(click.ClickException):
    """A one-line error for the user."""


# The errors a person can act on: one line, never a traceback (also for the Slurm-named commands). A
# NATS error a command did not turn into its own words is one too: a tenant running an operator's
# command met "JetStream not enabled for account" as a traceback (issue 31).
USER_ERRORS = (NatsServerError, LogError, ResourceError, ValueError, KeyError, OSError, NatsError)


def user_error_text(exc: BaseException) -> str:
    if isinstance(exc, JetStreamAPIError) and exc.err_code == JETSTREAM_NOT_ENABLED:
        return no_jetstream_text(exc, "this command")
    if isinstance(exc, NatsError):
        return str(exc) or f"nats: {type(exc).__name__}"
    return str(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc)


# How a Unix tool ends when the reader of its output has gone (``horizon jobs | head``): killed by SIGPIPE.
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


def quiet_broken_pipe() -> int:
    """The reader of our standard output has gone: nothing more can be said to it, and nothing is wrong
    with us. Point stdout at /dev/null (so the interpreter's last flush does not fail as well) and
    return the exit code to end with, as a Unix tool killed by SIGPIPE, without a word."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    finally:
        os.close(devnull)
    return EXIT_BROKEN_PIPE


def click_error(problem: Problem) -> click.ClickException:
    """A front library's problem as the click exception of the same words and exit code."""
    if isinstance(problem, BadValue):
        return click.BadParameter(problem.message, param_hint=problem.option)
    if isinstance(problem, UsageProblem):
        return click.UsageError(problem.message)
    error = click.ClickException(problem.message)
    if isinstance(problem, Failure):
        error.exit_code = problem.exit_code
    return error


def _speaking_click(callback: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return callback(*args, **kwargs)
        except Problem as problem:
            raise click_error(problem) from None

    return run


def speak_click(command: click.Command, seen: set[int] | None = None) -> None:
    """Every callback of ``command`` and of its subcommands raising a front problem as its click exception.
    Raised inside the callback, the command's context is still click's: a usage error gets its usage line,
    as one the command raised itself would (so the conversion is not left to ``HorizonCLI.invoke``)."""
    seen = set() if seen is None else seen
    if id(command) in seen:
        return
    seen.add(id(command))
    if command.callback is not None:
        command.callback = _speaking_click(command.callback)
    for sub in getattr(command, "commands", {}).values():
        speak_click(sub, seen)


class HorizonCLI(click.Group):
    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Every command's text reaches the terminal escaped (``services/front/client/terminal.py``)."""
        with printable_output():
            return super().main(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # `horizon show J | head`: every command ends here, quietly
            raise SystemExit(quiet_broken_pipe()) from None
        except USER_ERRORS as exc:
            raise CLIError(user_error_text(exc)) from None



@click.group(cls=HorizonCLI, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="horizon-scheduler")
def cli() -> None:
    """Horizon: a GPU/HPC job scheduler on a NATS JetStream event log."""


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM stops the foreground commands the way Ctrl-C does: in order."""
    raise KeyboardInterrupt


@cli.command()
@click.option("--data-dir", type=click.Path(path_type=Path, resolve_path=True), default=Path(".horizon"),
              show_default=True, help="Directory for the JetStream store.")
@click.option("--port", type=int, default=4222, show_default=True, help="Client port (0 picks a free one).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--config", type=click.Path(exists=True, path_type=Path), default=None,
              help="A nats-server config file (e.g. deploy/nats/single.conf).")
def nats(data_dir: Path, port: int, host: str, config: Path | None) -> None:
    """Run the bundled nats-server with JetStream in the foreground until Ctrl-C."""
    server = NatsServer(
        store_dir=data_dir / "nats", port=port, host=host, config=config, log_file=data_dir / "nats-server.log"
    )
    signal.signal(signal.SIGTERM, _interrupt)
    server.start()
    try:
        click.echo(server.url)
        click.echo(f"JetStream store: {data_dir / 'nats'}  log: {server.log_file}  pid: {server.pid}", err=True)
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


@cli.command()
@click.option("--event", "event_type", default=None, help="Print the schema of one event type, e.g. JobSubmitted.")
@click.option("--list", "list_types", is_flag=True, help="List the event types.")
@click.option("--asyncapi", is_flag=True, help="Print the whole contract as an AsyncAPI 3.0.0 document: every "
              "subject, who publishes what, the verdicts, queries, and every message's schema.")
def schema(event_type: str | None, list_types: bool, asyncapi: bool) -> None:
    """Print the JSON Schema of the events, so other languages can publish them."""
    from events.catalogue import EVENT_TYPES
    from events.schema import catalogue_schema, event_schema

    if list_types:
        for name in sorted(EVENT_TYPES):
            click.echo(name)
        return
    if asyncapi:
        from services.front.host.contract import asyncapi_document

        click.echo(json.dumps(asyncapi_document(), indent=2))
        return
    doc = event_schema(event_type) if event_type else catalogue_schema()
    click.echo(json.dumps(doc, indent=2, sort_keys=True))


# Which module of services/front/cli registers each command (its ``register(group)``). A command's module
# is imported when the command is looked up, not when ``horizon`` starts: importing every command made
# each ``horizon`` process (a service under systemd, a submit in a loop) spend ~1.5 CPU-seconds before
# doing anything. tests/front/test_cli_lazy.py checks this table against every module's ``register``.
COMMAND_MODULES: dict[str, str] = {
    "account": "policy", "audit": "audit", "bench": "bench", "cancel": "requests", "check": "check",
    "dataset": "policy", "fairshare": "policy", "hold": "requests", "jobs": "jobs", "license": "license",
    "logs": "logs", "node": "nodes", "nodes": "nodes", "partition": "partition", "policy": "policy",
    "preempt": "policy", "preemption": "policy", "profile": "policy", "projections": "projections",
    "queue": "jobs", "quota": "quota", "release": "requests", "reservation": "policy", "sacct": "slurm",
    "sbatch": "sbatch", "scancel": "slurm_commands", "scontrol": "scontrol", "service": "run",
    "show": "show", "simulate": "simulate", "sinfo": "partition", "slurm-shims": "slurm_shims",
    "squeue": "slurm_commands", "srun": "srun", "submit": "submit", "tenant": "tenant", "ui": "ui",
    "up": "run", "update": "requests", "usage": "policy", "user": "user", "watch": "jobs", "whatif": "whatif",
}


class LazyCommands(MutableMapping[str, click.Command]):
    """A group's commands, each module imported the first time one of its commands is asked for (by name,
    or by iterating: ``horizon --help`` lists them all). Commands added are made to speak click
    (``speak_click``)."""

    def __init__(self, group: click.Group, modules: dict[str, str]) -> None:
        self._group = group
        self._modules = modules
        self._loaded: dict[str, click.Command] = {}
        self._imported: set[str] = set()

    def _load(self, name: str) -> None:
        module = self._modules.get(name)
        if name in self._loaded or module is None or module in self._imported:
            return
        importlib.import_module(f"services.front.cli.{module}").register(self._group)
        self._imported.add(module)

    def __getitem__(self, name: str) -> click.Command:
        self._load(name)
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        speak_click(command)
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        del self._loaded[name]

    def __contains__(self, name: object) -> bool:
        return name in self._loaded or name in self._modules

    def __iter__(self) -> Iterator[str]:
        return iter(sorted({*self._loaded, *self._modules}))

    def __len__(self) -> int:
        return len({*self._loaded, *self._modules})


cli.commands = LazyCommands(cli, COMMAND_MODULES)  # type: ignore[assignment]
for _command in (nats, schema):  # this module's own
    cli.commands[_command.name or ""] = _command


def main() -> None:
    try:
        cli(standalone_mode=True)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
