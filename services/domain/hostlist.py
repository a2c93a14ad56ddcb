"""Slurm's host list expressions, read without a Slurm: ``node[01-04,07],gpu-1`` -> the names. Pure.

What Slurm writes and people paste (``SLURM_JOB_NODELIST``, ``Nodes=`` of a partition,
``scontrol show hostnames``):

* a comma-separated list at the top level (commas inside ``[...]`` separate ranges);
* each item a name with any number of bracket groups: ``rack[1-2]-node[01-04]`` is the
  cartesian product, in order (the last group varies fastest, as Slurm expands it);
* a bracket group holds numbers and ranges ``lo-hi``; the width of ``lo`` as written is the
  width of every number of that range (``[01-10]`` gives ``01`` .. ``10``, ``[1-10]`` gives
  ``1`` .. ``10``, as Slurm pads).

``expand`` gives the names in order (duplicates kept once), refusing an expression that would
name more than ``MAX_NAMES``. ``compress`` is the inverse Slurm prints (``node-[01-03],gpu-7``).
``NodePattern`` is what a partition's ``nodes`` holds: host list items and shell globs
(``gpu-*``, ``node-?``; an item with ``*`` or ``?`` is a glob, its brackets a character class),
and ``ALL`` or ``*`` for every node.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

__all__ = ["HostlistError", "expand", "compress", "number_ranges", "split_items", "NodePattern", "MAX_NAMES"]

MAX_NAMES = 65_536  # names one expression may stand for (a cluster's worth, not a typo's 10**9)

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class HostlistError(ValueError):
    """An expression that is not a host list; the message says where and why."""


def split_items(expression: str) -> list[str]:
    """The top-level items of ``expression``: split at commas outside brackets."""
    items: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(expression):
        if ch == "[":
            if depth:
                raise HostlistError(f"{expression!r}: '[' inside brackets")
            depth = 1
        elif ch == "]":
            if not depth:
                raise HostlistError(f"{expression!r}: ']' without '['")
            depth = 0
        elif ch == "," and not depth:
            items.append(expression[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"{expression!r}: '[' is not closed")
    items.append(expression[start:])
    return [item.strip() for item in items if item.strip()]


def _numbers(group: str, item: str) -> list[str]:
    out: list[str] = []
    for part in group.split(","):
        m = _RANGE.match(part.strip())
        if m is None:
            raise HostlistError(f"{item!r}: {part.strip()!r} is not a number or a range lo-hi")
        lo, hi = m[1], m[2] if m[2] is not None else m[1]
        if int(hi) < int(lo):
            raise HostlistError(f"{item!r}: the range {lo}-{hi} goes down")
        if int(hi) - int(lo) + 1 > MAX_NAMES:
            raise HostlistError(f"{item!r}: the range {lo}-{hi} names more than {MAX_NAMES} hosts")
        width = len(lo)
        out.extend(f"{n:0{width}d}" for n in range(int(lo), int(hi) + 1))
    return out


def _expand_item(item: str) -> list[str]:
    names = [""]
    rest = item
    while rest:
        open_ = rest.find("[")
        if open_ < 0:
            names = [n + rest for n in names]
            break
        close = rest.index("]", open_)
        prefix, group, rest = rest[:open_], rest[open_ + 1:close], rest[close + 1:]
        numbers = _numbers(group, item)
        if len(names) * len(numbers) > MAX_NAMES:
            raise HostlistError(f"{item!r} names more than {MAX_NAMES} hosts")
        names = [n + prefix + x for n in names for x in numbers]
    return names


def expand(expression: str) -> list[str]:
    """Every host an expression names, in order, each once: ``node[1-3],x`` -> node1 node2 node3 x."""
    out: dict[str, None] = {}
    for item in split_items(expression):
        if any(ch in item for ch in " \t\n"):
            raise HostlistError(f"{item!r}: a host name has no spaces")
        for name in _expand_item(item):
            out[name] = None
            if len(out) > MAX_NAMES:
                raise HostlistError(f"{expression[:200]!r} names more than {MAX_NAMES} hosts")
    return list(out)


def number_ranges(numbers: Iterable[int], width: int = 0) -> str:
    """Whole numbers as Slurm and the kernel write them, sorted, without repeats: ``(0, 1, 2, 5)`` ->
    ``0-2,5`` (each zero-padded to ``width``): host lists, CPU lists, array indices, het groups."""
    ordered = sorted(set(numbers))
    out: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        first, last = f"{ordered[i]:0{width}d}", f"{ordered[j]:0{width}d}"
        out.append(first if i == j else f"{first}-{last}")
        i = j + 1
    return ",".join(out)


def compress(names: Iterable[str]) -> str:
    """Slurm's compressed host list: node-01,node-02,node-03,gpu-7 -> ``gpu-7,node-[01-03]``."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for name in dict.fromkeys(names):
        m = re.match(r"^(.*?)(\d+)$", name)
        if m is None:
            plain.append(name)
        else:
            groups.setdefault((m[1], len(m[2])), []).append(int(m[2]))
    out = list(plain)
    for (prefix, width), numbers in groups.items():
        ranges = number_ranges(numbers, width).split(",")
        out.append(f"{prefix}{ranges[0]}" if len(ranges) == 1 and "-" not in ranges[0] else
                   f"{prefix}[{','.join(ranges)}]")
    return ",".join(sorted(out))


class NodePattern:
    """Which node names a list of host list expressions and globs covers (a partition's ``nodes``).

    ``NodePattern(["node[01-04]", "gpu-*"])``; ``ALL`` or ``*`` covers every node. Raises
    ``HostlistError`` for an expression that is neither a host list nor a glob.
    """

    __slots__ = ("names", "globs", "every")

    def __init__(self, expressions: Iterable[str]) -> None:
        names: set[str] = set()
        globs: list[str] = []
        every = False
        for expression in expressions:
            for item in split_items(expression):
                if item.upper() == "ALL" or item == "*":
                    every = True
                elif "*" in item or "?" in item:
                    globs.append(item)
                else:
                    names.update(expand(item))
                    if len(names) > MAX_NAMES:
                        raise HostlistError(f"the node list names more than {MAX_NAMES} hosts")
        self.names = frozenset(names)
        self.globs = tuple(globs)
        self.every = every

    def matches(self, node: str) -> bool:
        return self.every or node in self.names or any(fnmatch.fnmatchcase(node, g) for g in self.globs)
