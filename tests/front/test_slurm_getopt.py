"""Long options shortened as Slurm's getopt_long takes them (services/front/cli/slurm_getopt.py): Parsl polls
``sacct ... --job '12'`` and ``squeue ... --job '12'``, getopt's ``--jobs``. The command lines the tools run,
against a running Horizon: tests/front/test_workflow_tool_commands.py."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from services.front.cli.main import cli
from services.front.cli.slurm_getopt import spell_out


def _params(name: str) -> list[click.Parameter]:
    command = cli.commands[name]
    return command.get_params(click.Context(command))


@pytest.mark.parametrize("command, given, spelled", [
    # a prefix of one option: that option, with its value as given (=, or the next word)
    ("sacct", ["-X", "--noheader", "--format=jobid,state%20", "--job", "12,13"],
     ["-X", "--noheader", "--format=jobid,state%20", "--jobs", "12,13"]),
    ("squeue", ["--noheader", "--format=%i %t", "--job", "12"], ["--noheader", "--format=%i %t", "--jobs", "12"]),
    ("sacct", ["--job=12", "--parsable2"], ["--jobs=12", "--parsable2"]),
    ("sacct", ["--allo"], ["--allocations"]),
    # a name in full is itself, though it begins another (squeue's --state and --states are -t)
    ("squeue", ["--state", "R", "--name", "x"], ["--state", "R", "--name", "x"]),
    ("sacct", ["--user", "ann"], ["--user", "ann"]),
    # several names of one option: that option (--account, --accounts)
    ("squeue", ["--acc", "a"], ["--account", "a"]),
    # a value is never an option, nor anything after --; short options' values too (-o, -nu root)
    ("sacct", ["--name", "--job", "--job", "1"], ["--name", "--job", "--jobs", "1"]),
    ("sacct", ["-o", "--job", "-nu", "--job"], ["-o", "--job", "-nu", "--job"]),
    ("sacct", ["-ojobid", "--job", "1"], ["-ojobid", "--jobs", "1"]),
    ("scancel", ["--", "--job"], ["--", "--job"]),
    # no option of that prefix: left for click to refuse
    ("sacct", ["--frobnicate"], ["--frobnicate"]),
])
def test_a_prefix_is_spelled_out(command, given, spelled):
    assert spell_out(_params(command), given) == spelled


def test_an_ambiguous_prefix_is_an_error_naming_the_options():
    with pytest.raises(click.UsageError) as caught:
        spell_out(_params("sacct"), ["--no", "-X"])
    assert str(caught.value) == "option '--no' is ambiguous; possibilities: '--nodelist' '--noheader'"


def test_a_command_that_stops_at_its_first_operand_is_read_up_to_it():
    command = click.Command("x", params=[click.Option(["--jobs"])])
    assert spell_out(command.params, ["--job", "1", "run", "--job"], interspersed=False) == [
        "--jobs", "1", "run", "--job"]


@pytest.mark.parametrize("command, helps, ambiguous", [
    ("sacct", "--help", "option '--he' is ambiguous; possibilities: '--help' '--helpformat'"),
    ("squeue", "--he", "option '--n' is ambiguous; possibilities: '--name' '--nats' '--nodelist' '--noheader'"),
    ("scancel", "--he", "option '--n' is ambiguous; possibilities: '--name' '--nats' '--nodelist'"),
    ("sinfo", "--he", "option '--n' is ambiguous; possibilities: '--nats' '--nodes' '--noheader'"),
])
def test_the_commands_take_prefixes_and_say_an_ambiguous_one(command, helps, ambiguous):
    done = CliRunner().invoke(cli, [command, helps])
    assert done.exit_code == 0 and "Usage:" in done.stdout, done.output
    given = ambiguous.split("'")[1]
    done = CliRunner().invoke(cli, [command, given])
    assert done.exit_code == 2 and ambiguous in done.stderr, done.output
