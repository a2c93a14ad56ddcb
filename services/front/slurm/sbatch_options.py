"""The options ``sbatch`` knows and the ``#SBATCH`` directives of a script, read the way ``sbatch`` reads them.

* directives are lines that *begin* with ``#SBATCH`` (``#SLURM``, the old
  prefix, too), in the leading block of comments and blank lines: the first
  other line ends the block, and ``#SBATCH`` lines after it are comments;
* a directive line holds one or more options, split like a command line
  (quotes group, a backslash escapes, an unquoted ``#`` starts a comment);
  ``--opt=value``, ``--opt value``, ``-Xvalue``, ``-X value``, and long
  options may be shortened to a unique prefix (``getopt_long``).

``OPTIONS`` is the table of every sbatch option and what Horizon does with it (docs/slurm.md is its
prose): honoured, accepted with a warning (``warn``: what it does in Slurm and not here, for the
options that change how fast or where a job runs, or who is told, not what it computes), refused
with the reason (``unsupported``), another spelling (``alias``), or Horizon's own (``horizon``). Pure: text in, ``Directive`` objects and problems out; what the values mean is
``services/front/slurm/sbatch_resolve.py``'s and ``sbatch.py``'s business.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from services.front.slurm.slurm_values import Problem

__all__ = ["SbatchError", "Directive", "OPTIONS", "COMMAND_LINE_ONLY", "getopt", "read_directives"]


class SbatchError(ValueError):
    """One or more problems with a batch script or sbatch options; the message lists each with its line."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(problems[0] if len(problems) == 1 else
                         f"{len(problems)} problems:\n  " + "\n  ".join(problems))



# --------------------------------------------------------------------------
# The options sbatch knows, and what Horizon does with each
# --------------------------------------------------------------------------

REQUIRED, OPTIONAL, NONE = "required", "optional", "none"


@dataclass(frozen=True)
class _Opt:
    long: str
    short: str | None
    arg: str  # REQUIRED | OPTIONAL | NONE
    unsupported: str | None = None  # why Horizon cannot honour it (None: supported)
    horizon: bool = False  # a horizon sbatch option (command line only), not Slurm's
    warn: str | None = None  # accepted with this warning: what it does in Slurm that it does not do here
    alias: str | None = None  # another spelling of this option (Slurm's deprecated --tasks-per-node)


def _opts() -> dict[str, _Opt]:
    ok = [
        ("account", "A", REQUIRED), ("array", "a", REQUIRED), ("begin", "b", REQUIRED), ("chdir", "D", REQUIRED),
        ("comment", None, REQUIRED),
        ("constraint", "C", REQUIRED), ("container-image", None, REQUIRED),
        ("cpus-per-gpu", None, REQUIRED), ("cpus-per-task", "c", REQUIRED), ("deadline", None, REQUIRED),
        ("dependency", "d", REQUIRED),
        ("error", "e", REQUIRED), ("exclude", "x", REQUIRED), ("exclusive", None, OPTIONAL), ("export", None, REQUIRED),
        ("export-file", None, REQUIRED),
        ("gpus", "G", REQUIRED), ("gpus-per-node", None, REQUIRED), ("gpus-per-task", None, REQUIRED),
        ("gres", None, REQUIRED), ("hold", "H", NONE), ("ignore-pbs", None, NONE), ("immediate", "I", OPTIONAL),
        ("job-name", "J", REQUIRED), ("kill-on-invalid-dep", None, REQUIRED), ("licenses", "L", REQUIRED),
        ("mem", None, REQUIRED),
        ("mem-per-cpu", None, REQUIRED), ("mem-per-gpu", None, REQUIRED), ("nice", None, OPTIONAL),
        ("nodelist", "w", REQUIRED), ("nodes", "N", REQUIRED), ("no-requeue", None, NONE), ("ntasks", "n", REQUIRED),
        ("ntasks-per-gpu", None, REQUIRED),
        ("ntasks-per-node", None, REQUIRED), ("open-mode", None, REQUIRED), ("output", "o", REQUIRED),
        ("parsable", None, NONE), ("partition", "p", REQUIRED), ("qos", "q", REQUIRED), ("quiet", "Q", NONE),
        ("requeue", None, OPTIONAL), ("signal", None, REQUIRED), ("time", "t", REQUIRED), ("time-min", None, REQUIRED),
        ("use-min-nodes", None, NONE), ("verbose", "v", NONE), ("wait", "W", NONE),
        ("wait-all-nodes", None, REQUIRED), ("wrap", None, REQUIRED),
    ]
    aliases = [("tasks-per-node", None, REQUIRED, "ntasks-per-node")]  # getopt_long: --tasks is its prefix
    no_layout = "Horizon gives tasks CPUs, memory and GPUs, with no socket, core or binding layout"
    # Accepted with a warning: they change how fast or where a job runs, or who is told, not what it computes.
    warned = [
        ("acctg-freq", None, REQUIRED, "Horizon samples no accounting data while a job runs"),
        ("batch", None, REQUIRED, "Horizon runs the script on the job's first node, whatever its features"),
        ("contiguous", None, NONE, "Horizon does not look for nodes with consecutive names"),
        ("core-spec", "S", REQUIRED, "Horizon reserves no cores for the system"),
        ("cores-per-socket", None, REQUIRED, no_layout),
        ("cpu-freq", None, REQUIRED, "Horizon does not set CPU frequencies"),
        ("delay-boot", None, REQUIRED, "Horizon does not reboot nodes"),
        ("distribution", "m", REQUIRED, "Horizon places a job's tasks in blocks, node by node, with no socket "
                                        "or core layout"),
        ("extra-node-info", "B", REQUIRED, no_layout),
        ("get-user-env", None, OPTIONAL, "Horizon runs no login shell to load your login environment: the job "
                                         "starts from the environment --export gives (your shell's by default) "
                                         "over the node's PATH and locale and your HOME, USER, LOGNAME, SHELL"),
        ("gpu-bind", None, REQUIRED, "Horizon does not bind tasks to GPUs: each task sees its node's GPUs of "
                                     "the job (srun --gpus-per-task gives each task its own)"),
        ("gpu-freq", None, REQUIRED, "Horizon does not set GPU frequencies"),
        ("gpus-per-socket", None, REQUIRED, no_layout),
        ("gres-flags", None, REQUIRED, no_layout),
        ("hint", None, REQUIRED, "Horizon does not lay out threads (compute_bound, nomultithread, ...): its tasks "
                                 "get CPUs, memory and GPUs, with no socket, core or binding layout"),
        ("mail-type", None, REQUIRED, "Horizon sends no mail; follow the job with horizon watch --job JOB"),
        ("mail-user", None, REQUIRED, "Horizon sends no mail; follow the job with horizon watch --job JOB"),
        ("mcs-label", None, REQUIRED, "Horizon has no MCS labels"),
        ("mem-bind", None, REQUIRED, "Horizon does not bind memory to NUMA nodes (its cgroup keeps a job's CPUs "
                                     "near its GPUs)"),
        ("mincpus", None, REQUIRED, "Horizon picks nodes by the CPUs the job asks (--cpus-per-task)"),
        ("network", None, REQUIRED, "Horizon has no network options"),
        ("no-kill", "k", OPTIONAL, "Horizon ends a job whose node is lost (and requeues it unless --no-requeue)"),
        ("ntasks-per-core", None, REQUIRED, no_layout),
        ("ntasks-per-socket", None, REQUIRED, no_layout),
        ("overcommit", "O", NONE, "Horizon never overcommits: each task gets its CPUs"),
        ("oversubscribe", "s", NONE, "Horizon shares a node's free resources between jobs anyway, never the "
                                     "same CPUs or GPUs"),
        ("power", None, REQUIRED, "Horizon has no power options"),
        ("prefer", None, REQUIRED, "Horizon has no soft node features (--constraint is honoured)"),
        ("priority", None, REQUIRED, "only operators set a job's priority; use --qos, --nice, or horizon sbatch "
                                     "--priority-class"),
        ("profile", None, REQUIRED, "Horizon does not profile jobs (a Horizon placement profile is "
                                    "horizon submit --profile)"),
        ("propagate", None, OPTIONAL, "Horizon does not copy your shell's resource limits (ulimit) to the job"),
        ("reboot", None, NONE, "Horizon does not reboot nodes"),
        ("reservation", None, REQUIRED, "Horizon's reservations belong to accounts: a job of the account uses "
                                        "them without naming them"),
        ("sockets-per-node", None, REQUIRED, no_layout),
        ("spread-job", None, NONE, "Horizon packs a job's tasks on as few nodes as its shape says"),
        ("switches", None, REQUIRED, "Horizon keeps a gang inside one interconnect domain when it can, by itself"),
        ("thread-spec", None, REQUIRED, no_layout),
        ("threads-per-core", None, REQUIRED, no_layout),
        ("tmp", None, REQUIRED, "Horizon does not schedule local disk: the job gets what its node has"),
        ("wckey", None, REQUIRED, "Horizon has no workload keys"),
    ]
    # Refused: running the job without them would compute something else, or do something else.
    unsupported = [
        ("bb", None, REQUIRED, "Horizon has no burst buffers: the data the job stages would not be there"),
        ("bbf", None, REQUIRED, "Horizon has no burst buffers: the data the job stages would not be there"),
        ("cluster-constraint", None, REQUIRED, "Horizon schedules one cluster"),
        ("clusters", "M", REQUIRED, "Horizon schedules one cluster"),
        ("container", None, REQUIRED, "Horizon takes an image, not an OCI bundle: use --container-image"),
        ("container-id", None, REQUIRED, "Horizon names its containers itself: use --container-image"),
        ("extra", None, REQUIRED, "Horizon has no node 'extra' data to match (node features: --constraint)"),
        ("gid", None, REQUIRED, "Horizon runs jobs as the node agent's user"),
        ("input", "i", REQUIRED, "Horizon does not connect a job's standard input"),
        ("jobid", None, REQUIRED, "Horizon job ids are given with horizon sbatch --job-id"),
        ("nodefile", "F", REQUIRED, "name the nodes with --nodelist"),
        ("test-only", None, NONE, "horizon sbatch --dry-run prints the job without submitting it (no start "
                                  "estimate)"),
        ("tres-per-task", None, REQUIRED, "give --cpus-per-task and --gpus-per-task"),
        ("uid", None, REQUIRED, "Horizon runs jobs as the node agent's user"),
        ("help", None, NONE, "run horizon sbatch --help"),
        ("usage", "u", NONE, "run horizon sbatch --help"),
        ("version", "V", NONE, "run horizon --version"),
    ]
    horizon = [
        ("nats", None, REQUIRED), ("data-dir", None, REQUIRED), ("tenant", None, REQUIRED), ("job-id", None, REQUIRED),
        ("json", None, NONE),
        ("dry-run", None, NONE), ("check", None, NONE), ("no-wait", None, NONE), ("sim-runtime", None, REQUIRED),
        ("priority-class", None, REQUIRED), ("dataset", None, REQUIRED),
    ]
    table: dict[str, _Opt] = {}
    for long, short, arg in ok:
        table[long] = _Opt(long, short, arg)
    for long, short, arg, target in aliases:
        table[long] = _Opt(long, short, arg, alias=target)
    for long, short, arg, why in warned:
        table[long] = _Opt(long, short, arg, warn=why)
    for long, short, arg, why in unsupported:
        table[long] = _Opt(long, short, arg, unsupported=why)
    for long, short, arg in horizon:
        table[long] = _Opt(long, short, arg, horizon=True)
    return table


OPTIONS: dict[str, _Opt] = _opts()
_SHORT: dict[str, _Opt] = {o.short: o for o in OPTIONS.values() if o.short}
# Slurm accepts --wrap only on the command line (--parsable, -Q and -v are directives too: sbatch's output).
COMMAND_LINE_ONLY = {"wrap"}


# --------------------------------------------------------------------------
# Reading directives
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Directive:
    """One option: its long name, value (``None`` for a flag), where it was given and how it was spelt."""

    option: str
    value: str | None
    where: str  # "line 7" or "command line"
    given: str  # "-N" or "--nodes"

    def problem(self, text: str) -> str:
        return f"{self.where}: {self.given}: {text}"


def _arguments(line: str, where: str) -> list[str]:
    """Split a directive line as Slurm's ``_get_argument`` does: quotes group, ``\\`` escapes, ``#`` comments."""
    args: list[str] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i].isspace():
            i += 1
        if i >= n:
            return args
        arg: list[str] = []
        quote = ""
        escaped = False
        while i < n and (quote or not line[i].isspace()):
            ch = line[i]
            i += 1
            if escaped:
                escaped = False
                arg.append(ch)
            elif ch == "\\":
                escaped = True
            elif quote:
                if ch == quote:
                    quote = ""
                else:
                    arg.append(ch)
            elif ch in "\"'":
                quote = ch
            elif ch == "#":
                if arg:
                    args.append("".join(arg))
                return args  # the rest of the line is a comment
            else:
                arg.append(ch)
        if quote:
            raise SbatchError([f"{where}: unmatched {quote} in {line.strip()!r}"])
        args.append("".join(arg))


def _find_long(name: str, where: str, given: str) -> _Opt:
    if name in OPTIONS:
        return OPTIONS[name]
    matches = [o for long, o in OPTIONS.items() if long.startswith(name)]
    if len(matches) == 1 and name:
        return matches[0]
    if len(matches) > 1:
        raise Problem(f"{where}: {given}: ambiguous: {', '.join('--' + m.long for m in matches)}")
    raise Problem(f"{where}: {given}: not an sbatch option")


def getopt(tokens: Sequence[str], where: str | Sequence[str]) -> tuple[list[Directive], int, list[str]]:
    """Options from ``tokens`` up to the first operand (``getopt_long`` rules without permutation).

    ``where`` is one place for all the tokens, or one per token. Returns the directives, the
    index of the first operand (``len(tokens)`` if none), and the problems found.
    """
    places = [where] * len(tokens) if isinstance(where, str) else list(where)
    out: list[Directive] = []
    problems: list[str] = []
    i = 0
    while i < len(tokens):
        token, place = tokens[i], places[i]
        if token == "--":
            return out, i + 1, problems
        if not token.startswith("-") or token == "-":
            return out, i, problems
        i += 1
        try:
            if token.startswith("--"):
                name, eq, value = token[2:].partition("=")
                opt = _find_long(name, place, token if not eq else f"--{name}")
                given = f"--{opt.long}"
                if opt.alias is not None:  # another spelling: the option it spells, as typed
                    opt = OPTIONS[opt.alias]
                if opt.arg == NONE:
                    if eq:
                        raise Problem(f"{place}: {given}: takes no value")
                    out.append(Directive(opt.long, None, place, given))
                elif eq or opt.arg == OPTIONAL:
                    out.append(Directive(opt.long, value if eq else None, place, given))
                elif i < len(tokens):
                    out.append(Directive(opt.long, tokens[i], place, given))
                    i += 1
                else:
                    raise Problem(f"{place}: {given}: needs a value")
                continue
            chars = token[1:]
            while chars:
                letter, chars = chars[0], chars[1:]
                opt = _SHORT.get(letter)  # type: ignore[assignment]
                if opt is None:
                    raise Problem(f"{place}: -{letter}: not an sbatch option")
                given = f"-{letter}"
                if opt.arg == NONE:
                    out.append(Directive(opt.long, None, place, given))
                    continue
                if chars:
                    value, chars = chars[1:] if chars.startswith("=") else chars, ""
                    out.append(Directive(opt.long, value, place, given))
                elif opt.arg == OPTIONAL:
                    out.append(Directive(opt.long, None, place, given))
                elif i < len(tokens):
                    out.append(Directive(opt.long, tokens[i], place, given))
                    i += 1
                else:
                    raise Problem(f"{place}: {given}: needs a value")
        except Problem as exc:
            problems.append(str(exc))
    return out, len(tokens), problems


_PREFIXES = ("#SBATCH", "#SLURM")


def read_directives(text: str) -> tuple[list[Directive], str, list[str]]:
    """The ``#SBATCH`` directives of a script's leading comment block, the rest of the script, and the
    problems found (bad syntax, options that are not sbatch's)."""
    lines = text.splitlines()
    directives: list[Directive] = []
    problems: list[str] = []
    body_start = len(lines)
    for number, line in enumerate(lines, 1):
        prefix = next((p for p in _PREFIXES if line.startswith(p)), None)
        if prefix is None:
            stripped = line.lstrip()
            if stripped and not stripped.startswith("#"):
                body_start = number - 1
                break
            continue
        where = f"line {number}"
        try:
            tokens = _arguments(line[len(prefix):], where)
        except SbatchError as exc:
            problems.extend(exc.problems)
            continue
        if any(t.lower() in ("packjob", "hetjob") for t in tokens):
            problems.append(f"{where}: {line.strip()}: heterogeneous jobs are not supported")
            continue
        found, stop, bad = getopt(tokens, where)
        problems.extend(bad)
        directives.extend(found)
        if stop < len(tokens):
            problems.append(f"{where}: {tokens[stop]!r} is not an option (a directive line holds options only)")
    return directives, "\n".join(lines[body_start:]), problems
