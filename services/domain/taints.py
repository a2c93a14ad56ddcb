"""Taints and tolerations, with Kubernetes' matching rules. Pure; shared by inventory and placement.

A node's taint repels jobs: ``NoSchedule`` keeps new jobs off it,
``PreferNoSchedule`` makes it a last resort, ``NoExecute`` does both and also
evicts the jobs already on it (inventory asks their agents to stop them).
A job's tolerations lift that, taint by taint. The rules are Kubernetes'
``Toleration.ToleratesTaint``, kept exactly so that people who know them are
not surprised:

* a toleration with an ``effect`` matches only taints of that effect; an
  empty effect matches every effect;
* a toleration with a ``key`` matches only taints of that key; an empty key
  matches every key (meant together with ``Exists``: "tolerate everything");
* ``Exists`` then matches whatever the value; ``Equal`` (the default, also
  when the operator is empty) only the same value, so an empty key with
  ``Equal`` matches only taints with an empty value (Kubernetes refuses that
  combination at admission; Horizon's submission does not, so it is defined
  here the way the Kubernetes function defines it);
* any other operator matches nothing.

``taint_text`` writes a taint the way ``kubectl`` and ``horizon node taint``
take it (``key=value:Effect``) and ``parse_taint`` reads that form back; both
are here so that reasons, the CLI and the nodes view spell taints alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from events import catalogue as c
from events.vocabulary import TAINT_KEY_MAX, TAINT_KEY_PATTERN, TAINT_VALUE_MAX, TAINT_VALUE_PATTERN

__all__ = ["tolerates", "untolerated", "taint_text", "parse_taint", "check_taint", "TaintSyntaxError"]

_KEY = re.compile(TAINT_KEY_PATTERN)
_VALUE = re.compile(TAINT_VALUE_PATTERN)
MAX_KEY = TAINT_KEY_MAX
MAX_VALUE = TAINT_VALUE_MAX


def tolerates(tolerations: Iterable[c.Toleration], taint: c.Taint) -> bool:
    """Whether any of ``tolerations`` tolerates ``taint``."""
    return any(_matches(t, taint) for t in tolerations)


def _matches(tol: c.Toleration, taint: c.Taint) -> bool:
    if tol.effect and tol.effect != taint.effect:
        return False
    if tol.key and tol.key != taint.key:
        return False
    if tol.operator == "Exists":
        return True
    if tol.operator in ("Equal", ""):
        return tol.value == taint.value
    return False


def untolerated(
    tolerations: Iterable[c.Toleration], taints: Iterable[c.Taint], effects: Iterable[str] = c.TAINT_EFFECTS
) -> list[c.Taint]:
    """The taints with one of ``effects`` that no toleration tolerates, in the node's order.

    ``effects=("NoSchedule", "NoExecute")`` is what keeps a new job off a node,
    ``("NoExecute",)`` what evicts a running one, ``("PreferNoSchedule",)``
    what a score counts.
    """
    tols = tuple(tolerations)
    wanted = frozenset(effects)
    return [t for t in taints if t.effect in wanted and not tolerates(tols, t)]


def taint_text(taint: c.Taint) -> str:
    """``key=value:Effect``, or ``key:Effect`` when the value is empty."""
    return f"{taint.key}={taint.value}:{taint.effect}" if taint.value else f"{taint.key}:{taint.effect}"


class TaintSyntaxError(ValueError):
    pass


def parse_taint(text: str, *, effect_required: bool = True) -> c.Taint:
    """Read ``key[=value]:Effect`` (``kubectl taint`` syntax). Without ``effect_required`` the
    ``:Effect`` may be left out, and the taint's effect is then empty ("every effect", for untaint)."""
    body, colon, effect = text.rpartition(":")
    if not colon:
        if effect_required:
            raise TaintSyntaxError(f"{text!r}: write KEY=VALUE:EFFECT, the effect one of {', '.join(c.TAINT_EFFECTS)}")
        body, effect = text, ""
    key, _, value = body.partition("=")
    taint = c.Taint(key=key, value=value, effect=effect)
    problem = check_taint(taint, effect_required=effect_required)
    if problem:
        raise TaintSyntaxError(problem)
    return taint


def check_taint(taint: c.Taint, *, effect_required: bool = True) -> str:
    """What is wrong with ``taint`` as an operator wrote it ("" if nothing): Kubernetes' rules for
    label keys and values, and a known effect (or, without ``effect_required``, none)."""
    if not taint.key:
        return "a taint needs a key"
    if len(taint.key) > MAX_KEY or not _KEY.fullmatch(taint.key):
        return (f"taint key {taint.key!r}: at most {MAX_KEY} letters, digits and '_', '.', '/', '-', "
                "starting and ending with a letter or digit")
    if len(taint.value) > MAX_VALUE or not _VALUE.fullmatch(taint.value):
        return (f"taint value {taint.value!r}: at most {MAX_VALUE} letters, digits and '_', '.', '-', "
                "starting and ending with a letter or digit")
    if taint.effect not in c.TAINT_EFFECTS and (effect_required or taint.effect):
        return f"taint effect {taint.effect!r} is not one of {', '.join(c.TAINT_EFFECTS)}"
    return ""
