"""Node features and Slurm's ``--constraint`` over them. Pure; shared by submission (is the
expression well formed, could any node ever match it), placement's ``Constraint`` filter and the
read side.

**A node's features** (compared without regard to case):

* the models of its GPUs, as type and as type-variant (``a100``, ``h100``, ``h100-80gb``), so that
  ``--constraint=a100`` or ``v100|a100|h100`` picks nodes by GPU model, as sites name them;
* the names in its ``features`` label, separated by commas (Slurm's ``Features=`` of a node:
  ``features=skylake,ib,bigmem``);
* every label whose value is ``true`` (``ib=true`` is the feature ``ib``).

**A constraint**, read as Slurm reads it:

* names joined by ``&`` (and; a ``,`` is read as ``&``, as Slurm does) and ``|`` (or), strictly
  from left to right, without precedence: ``a&b|c`` is ``(a&b)|c`` and ``a|b&c`` is ``(a|b)&c``;
* one level of parentheses groups: ``a&(b|c)``;
* one set of square brackets holds alternatives separated by ``|`` of which the job takes one
  for all its nodes ("matching OR"): ``[rack1|rack2]``, ``a100&[ib1|ib2]``.

Refused, naming what: node counts (``a*2``, ``[a*2&b*4]``), ``&`` inside brackets (Slurm's
counted sets), nested parentheses or brackets, a second set of brackets, characters that are not
part of a feature name.

``parse_constraint`` gives a ``Constraint``: ``alternatives`` is one formula per choice of the
bracket (one formula when there is none), each in disjunctive normal form (a tuple of clauses,
each a sorted tuple of features that must all be present); ``any_of`` is their union, what one
node is judged by.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["ConstraintError", "Constraint", "parse_constraint", "node_features", "holds", "describe", "formula_text", "MAX_CLAUSES"]

MAX_CLAUSES = 256  # a formula's clauses once multiplied out (a typo guard)
_NAME = re.compile(r"[A-Za-z0-9_.:@/+=-]+")

Clause = tuple[str, ...]  # features that must all be present (sorted, lower case)
Formula = tuple[Clause, ...]  # any one clause suffices (sorted)


class ConstraintError(ValueError):
    """A constraint Horizon cannot read or honour; the message says which part and why."""


@dataclass(frozen=True, slots=True)
class Constraint:
    text: str  # as normalised: no blanks, lower case, ',' written '&'
    alternatives: tuple[Formula, ...]  # one per choice of the matching-OR brackets (one if none)

    @property
    def any_of(self) -> Formula:
        """What one node must satisfy: any alternative."""
        if len(self.alternatives) == 1:
            return self.alternatives[0]
        return tuple(sorted(set().union(*self.alternatives)))

    @property
    def matching(self) -> bool:
        """Whether all nodes must agree on one alternative (a bracket with several)."""
        return len(self.alternatives) > 1


def holds(formula: Formula, features: frozenset[str]) -> bool:
    """Some clause has all its features among ``features``."""
    return any(all(f in features for f in clause) for clause in formula)


def _and(a: Formula, b: Formula) -> Formula:
    out = {tuple(sorted(set(x) | set(y))) for x in a for y in b}
    if len(out) > MAX_CLAUSES:
        raise ConstraintError(f"is too complex (more than {MAX_CLAUSES} combinations once multiplied out)")
    return tuple(sorted(out))


def _or(a: Formula, b: Formula) -> Formula:
    return tuple(sorted(set(a) | set(b)))


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        if ch in "&|()[]":
            out.append(ch)
            i += 1
            continue
        if ch == "*":
            raise ConstraintError("node counts (FEATURE*N) are not supported: every node of the job must "
                                  "satisfy the constraint")
        if ch == "!":
            raise ConstraintError("'!' (not) is not part of Slurm's --constraint")
        m = _NAME.match(text, i)
        if m is None:
            raise ConstraintError(f"{ch!r} cannot be part of a feature name")
        out.append(m[0].lower())
        i = m.end()
    return out


class _Reader:
    """Left to right, as Slurm's ``_feature_string2list``; one level of parentheses, one bracket set."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.i = 0
        self.bracket: list[Formula] | None = None  # the bracket's alternatives, once read

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> str:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def expression(self, stop: str | None, depth: int, in_bracket: bool) -> tuple[Formula, bool]:
        """A sequence ``term (op term)*`` until ``stop``; returns its formula and whether it holds
        the bracket (then the caller substitutes each alternative)."""
        acc, has_bracket = self.term(depth, in_bracket)
        while True:
            op = self.peek()
            if op is None or op == stop:
                return acc, has_bracket
            if op not in "&|":
                raise ConstraintError(f"expected & or | before {op!r}")
            self.take()
            if in_bracket and op == "&":
                raise ConstraintError("'&' inside [...] asks for counted node sets (Slurm's [a*2&b*4]), "
                                      "which Horizon does not support; inside brackets use | only")
            term, bracket_here = self.term(depth, in_bracket)
            if bracket_here and has_bracket:
                raise ConstraintError("only one set of [...] is allowed")
            has_bracket = has_bracket or bracket_here
            acc = _and(acc, term) if op == "&" else _or(acc, term)

    def term(self, depth: int, in_bracket: bool) -> tuple[Formula, bool]:
        token = self.peek()
        if token is None:
            raise ConstraintError("ends where a feature was expected")
        self.take()
        if token == "(":
            if depth:
                raise ConstraintError("parentheses cannot be nested")
            inner, bracket = self.expression(")", depth + 1, in_bracket)
            if self.peek() != ")":
                raise ConstraintError("'(' is not closed")
            self.take()
            return inner, bracket
        if token == "[":
            if in_bracket or depth:
                raise ConstraintError("brackets cannot be nested or put inside parentheses")
            if self.bracket is not None:
                raise ConstraintError("only one set of [...] is allowed")
            alternatives = [self.term(depth, True)[0]]
            while self.peek() == "|":
                self.take()
                alternatives.append(self.term(depth, True)[0])
            if self.peek() == "&":
                raise ConstraintError("'&' inside [...] asks for counted node sets (Slurm's [a*2&b*4]), "
                                      "which Horizon does not support; inside brackets use | only")
            if self.peek() != "]":
                raise ConstraintError("'[' is not closed")
            self.take()
            self.bracket = alternatives
            return _BRACKET, True
        if token in "&|)]":
            raise ConstraintError(f"{token!r} where a feature was expected")
        return ((token,),), False


_BRACKET: Formula = (("\x00bracket",),)  # a placeholder clause, replaced by each alternative


def _substitute(formula: Formula, alternative: Formula) -> Formula:
    out: Formula = ()
    for clause in formula:
        if "\x00bracket" in clause:
            rest = tuple(f for f in clause if f != "\x00bracket")
            out = _or(out, _and(((rest),), alternative) if rest else alternative)
        else:
            out = _or(out, (clause,))
    return out


def parse_constraint(text: str) -> Constraint:
    """Read a ``--constraint`` expression (see the module doc); raises ``ConstraintError``."""
    if len(text) > 1024:
        raise ConstraintError("is longer than 1024 characters")
    tokens = _tokens(text.replace(",", "&"))
    if not tokens:
        raise ConstraintError("is empty")
    compact = "".join(tokens)
    reader = _Reader(tokens)
    formula, has_bracket = reader.expression(None, 0, False)
    if reader.peek() is not None:
        raise ConstraintError(f"unexpected {reader.peek()!r}")
    if not has_bracket:
        return Constraint(compact, (formula,))
    assert reader.bracket is not None
    alternatives = tuple(_substitute(formula, alt) for alt in reader.bracket)
    return Constraint(compact, alternatives)


def node_features(labels: Mapping[str, str], gpu_models: Iterable[tuple[str, str | None]]) -> frozenset[str]:
    """The features of a node with these labels and GPU models (type, variant): see the module doc."""
    out: set[str] = set()
    for gpu_type, variant in gpu_models:
        out.add(gpu_type.lower())
        if variant:
            out.add(f"{gpu_type}-{variant}".lower())
    for name in labels.get("features", "").split(","):
        if name.strip():
            out.add(name.strip().lower())
    for key, value in labels.items():
        if value.strip().lower() == "true":
            out.add(key.lower())
    return frozenset(out)


def formula_text(formula: Formula) -> str:
    """A formula as a constraint that reads back as the same formula: ``(a&b)|(c)``."""
    return "|".join("(" + "&".join(clause) + ")" for clause in formula)


def describe(formula: Formula) -> str:
    """A formula as people read it: ``a100&ib | h100``."""
    return " | ".join("&".join(clause) for clause in formula)
