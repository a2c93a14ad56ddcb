"""The values of single sbatch options, each read from its text (``Problem`` names what is wrong): node
counts, partitions, nice, arrays, ``--export``, constraints, ``--exclusive``, output patterns, licenses. Values in
Slurm's general syntax (times, memory, dependencies, GPUs) are ``slurm_values.py``'s.
"""

from __future__ import annotations

import re
from typing import Any

from events.arrays import parse_array
from events.subjects import valid_partition
from events.vocabulary import LICENSE_PATTERN, MAX_LICENSE_COUNT, NICE_LIMIT
from services.domain.features import ConstraintError, parse_constraint
from services.domain.output import pattern_problem
from services.front.slurm.slurm_values import Problem, whole_number

__all__ = ["node_counts", "partition_list", "nice_value", "array_spec", "export_list", "choice", "non_empty",
           "constraint_text", "exclusive_mode", "output_pattern", "license_list"]


def node_counts(text: str) -> tuple[int, int]:
    """``N`` or ``MIN-MAX`` -> (MIN, MAX)."""
    low, sep, high = text.partition("-")
    n = whole_number(low, "a number of nodes")
    most = whole_number(high, "a number of nodes") if sep else n
    if most < n:
        raise Problem(f"{text!r}: the most nodes is fewer than the least")
    return n, most


def partition_list(text: str) -> list[str]:
    """``-p a,b``: the partitions the job may run in, the first that can run it taken (as Slurm)."""
    names = [name.strip() for name in text.split(",")]
    if not any(names):
        raise Problem("is empty")
    if not all(names):
        raise Problem(f"{text!r}: an empty partition name in the list")
    for name in names:
        if not valid_partition(name):  # Slurm's test.q too; a subject carries its partition_token
            raise Problem(f"{name!r} is not a partition name (letters, digits, '_', '-' or '.')")
    return list(dict.fromkeys(names))


_LICENSE_NAME = re.compile(LICENSE_PATTERN)


def license_list(text: str) -> dict[str, int]:
    """``-L``/``--licenses``: ``NAME[@SERVER][:COUNT][,NAME[:COUNT]...]`` -> name -> count, as Slurm's
    ``_build_license_list`` reads it: a count of 1 when none is given, ``*`` (Slurm before 2.5) for ``:``,
    ``;`` for ``,``, a license named twice counted once with the sum. The OR form (``a|b``: any one of
    them, Slurm 23.02) is refused: Horizon gives a job every license it names."""
    if not text.strip():
        raise Problem("is empty")
    if "|" in text:
        raise Problem(f"{text!r}: the OR form (a|b, any one of them) is not supported here: Horizon gives a job "
                      "every license it names; name the ones it needs joined by ','")
    out: dict[str, int] = {}
    for token in re.split(r"[,;]", text):
        if not token:
            raise Problem(f"{text!r}: an empty license in the list")
        name, _sep, count_text = token.replace("*", ":", 1).partition(":")
        if not _LICENSE_NAME.match(name):
            raise Problem(f"{name!r} is not a license name (letters, digits, '_', '.', '+', '-', and @SERVER; "
                          "then :COUNT)")
        count = whole_number(count_text, f"a count of {name} licenses") if _sep else 1
        out[name] = out.get(name, 0) + count
        if out[name] > MAX_LICENSE_COUNT:
            raise Problem(f"{name}: {out[name]} licenses is more than {MAX_LICENSE_COUNT}")
    return dict(sorted(out.items()))


def nice_value(text: str) -> int:
    if text == "":
        return 100  # Slurm's --nice without a value
    try:
        value = int(text)
    except ValueError:
        raise Problem(f"{text!r} is not a whole number") from None
    if not -NICE_LIMIT <= value <= NICE_LIMIT:
        raise Problem(f"{value} is outside -{NICE_LIMIT}..{NICE_LIMIT}")
    return value


def array_spec(text: str) -> str:
    parse_array(text, "--array")
    return text.strip()


def _quote_tokens(text: str) -> list[str]:
    """``--export``'s items as Slurm's ``find_quote_token`` cuts them: at commas outside quotes; a token
    quoted whole loses its quotes (``'A=1,2'`` is ``A=1,2``), others keep theirs (``A="1,2"``)."""
    tokens, start, quote = [], 0, ""
    for i, ch in enumerate(text + ","):
        if ch in "'\"" and i < len(text):
            quote = "" if quote == ch else (quote or ch)
        elif ch == "," and not quote or i == len(text):
            token = text[start:i]
            if len(token) >= 2 and token[0] == token[-1] and token[0] in "'\"":
                token = token[1:-1]
            tokens.append(token)
            start = i + 1
    return tokens


def export_list(text: str) -> list[tuple[str, str | None]]:
    """``--export``: ``[]`` for NONE or NIL, else ``(name, value or None)`` items, ``("ALL", None)`` first."""
    items = [x.strip() for x in _quote_tokens(text) if x.strip()]
    if not items:
        raise Problem("is empty")
    if items[0].upper() in ("NONE", "NIL") and len(items) == 1:
        return []
    out: list[tuple[str, str | None]] = []
    if items[0].upper() == "ALL":  # Slurm's default; the variables named with it: see sbatch.py's _environment
        out.append(("ALL", None))
        items = items[1:]
    for item in items:
        name, eq, value = item.partition("=")
        if name.upper() in ("ALL", "NONE", "NIL"):
            raise Problem(f"{name} comes first, alone or before the variables (--export=ALL,VAR=value)")
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise Problem(f"{name!r} is not a variable name")
        out.append((name, value if eq else None))
    return out


def choice(*allowed: str) -> Any:
    def parse(text: str) -> str:
        if text.lower() not in allowed:
            raise Problem(f"{text!r} is not one of {', '.join(allowed)}")
        return text.lower()

    return parse


def non_empty(text: str) -> str:
    if not text.strip():
        raise Problem("is empty")
    return text


def constraint_text(text: str) -> str:
    try:
        return parse_constraint(text).text
    except ConstraintError as exc:
        raise Problem(f"{text!r}: {exc}") from None


def exclusive_mode(text: str) -> str:
    """``--exclusive[=exclusive|allocation|user|mcs|topo|oversubscribe]``, normalised (no value: exclusive)."""
    value = text.strip().lower() or "exclusive"
    if value == "allocation":
        value = "exclusive"
    if value not in ("exclusive", "user", "mcs", "topo", "oversubscribe"):
        raise Problem(f"{text!r} is not one of exclusive, allocation, user, mcs, topo, oversubscribe")
    return value


def output_pattern(text: str) -> str:
    """An ``--output``/``--error`` pattern the agent can expand (services/domain/output.py)."""
    problem = pattern_problem(text)
    if problem is not None:
        raise Problem(problem)
    return text
