"""Slurm's commands read their options with ``getopt_long``; click does not, in one way tools rely on.

``getopt_long`` takes any prefix of a long option that names one option: Parsl's ``SlurmProvider`` polls
``sacct -X --noheader --format=jobid,state%20 --job '12,13'`` (or ``squeue --noheader --format='%i %t'
--job '12'``), and ``--job`` is Slurm's ``--jobs``. ``SlurmCommand`` is a ``click.Command`` that spells
such a prefix out before click parses; the rest is click's (``sbatch`` and ``srun`` read their own
options, ``services/front/slurm/sbatch_options.py``'s ``getopt`` and ``srun_options.py``).

The rules, as glibc's ``getopt_long``:

1. a name given in full is that option (``--state`` and ``--states`` are both squeue's ``-t``);
2. else the options whose names begin with it: one option (however many names it has) is that
   option; several is an error, ``option '--no' is ambiguous; possibilities: '--noheader' '--nodelist'``;
   none is left to click, which says ``No such option``;
3. an option's value is never read as an option (``--name --jobs`` names a job ``--jobs``), nor is
   anything after ``--``; a command that stops at its first operand (``allow_interspersed_args``
   false) is read up to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
import click

__all__ = ["SlurmCommand", "spell_out"]


def _option_names(params: Iterable[click.Parameter]) -> tuple[dict[str, tuple[int, bool, bool]], dict[str, bool]]:
    """Each long name -> (which option, its negative form?, takes a value?); each short letter -> takes a value?"""
    longs: dict[str, tuple[int, bool, bool]] = {}
    shorts: dict[str, bool] = {}
    for index, param in enumerate(params):
        if not isinstance(param, click.Option):
            continue
        takes = not (param.is_flag or param.count)
        for negative, names in ((False, param.opts), (True, param.secondary_opts)):
            for name in names:
                if name.startswith("--"):
                    longs[name] = (index, negative, takes)
                elif len(name) == 2 and name.startswith("-"):
                    shorts[name[1]] = takes
    return longs, shorts


def spell_out(params: Sequence[click.Parameter], args: Sequence[str], interspersed: bool = True) -> list[str]:
    """``args`` with every long option given by a prefix written in full (the module's rules); raises
    ``click.UsageError`` for an ambiguous prefix."""
    longs, shorts = _option_names(params)
    out: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if token == "--":
            out.append(token)
            out.extend(args[i:])
            break
        if token.startswith("--"):
            name, eq, value = token.partition("=")
            if name not in longs:
                found: dict[tuple[int, bool], str] = {}
                for candidate in sorted(longs):
                    if candidate.startswith(name):
                        found.setdefault(longs[candidate][:2], candidate)
                if len(found) > 1:
                    possible = " ".join(f"'{n}'" for n in sorted(found.values()))
                    raise click.UsageError(f"option '{name}' is ambiguous; possibilities: {possible}")
                if found:
                    name = next(iter(found.values()))
                    token = name + eq + value
            out.append(token)
            if name in longs and longs[name][2] and not eq and i < len(args):
                out.append(args[i])  # its value, whatever it looks like
                i += 1
            continue
        out.append(token)
        if token.startswith("-") and token != "-":
            letters = token[1:]
            for position, letter in enumerate(letters):
                if shorts.get(letter):  # takes a value: the rest of the token, else the next one
                    if position == len(letters) - 1 and i < len(args):
                        out.append(args[i])
                        i += 1
                    break
        elif not interspersed:
            out.extend(args[i:])
            break
    return out


class SlurmCommand(click.Command):
    """A click command whose long options may be shortened as Slurm's (``getopt_long``): the module's rules."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, spell_out(self.get_params(ctx), args, self.allow_interspersed_args))
