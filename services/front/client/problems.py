"""What a front library says when a command cannot go on: its own error types, without click.

The libraries of ``services/front/`` (client, slurm, host) raise these; the CLI turns each into the
click exception of the same words, once, where it runs a command (``services/front/cli/main.py``), so
the ``Usage:`` line, ``Error: Invalid value for --format: ...`` and the exit code are click's:

- ``UsageProblem``: options that cannot go together (click's ``UsageError``: the usage, exit 2);
- ``BadValue``: one option's value, named by ``option`` (``--format``, ``JOBID``; click's
  ``BadParameter`` with that ``param_hint``; without one, click's ``Invalid value: ...``), exit 2;
- ``Failure``: the command could not do what it was asked (click's ``ClickException``), exit
  ``exit_code`` (1 unless said).
"""

from __future__ import annotations

__all__ = ["Problem", "UsageProblem", "BadValue", "Failure"]


class Problem(Exception):
    """A command's problem a person can act on: one message, never a traceback."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UsageProblem(Problem):
    """Options that cannot go together, or one missing that must be given."""


class BadValue(Problem):
    """An option's (or argument's) value this command cannot take; ``option`` names it as written."""

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


class Failure(Problem):
    """The command could not do what it was asked; it ends with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code
