"""What the services that take operator configuration share: answering what they could not apply,
and checking weight tables. Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping

from events import catalogue as c
from services.domain.envelope import Decider
from services.domain.quoting import clipped

__all__ = ["config_rejected", "check_weights"]


def config_rejected(service: str, rejections: Mapping[int, tuple[str, str]], now: float,
                    basis_seq: int) -> list[c.Event]:
    """A ``ConfigRejected`` for every operator input (by its sequence) not applied, in log order.
    The reason is clipped: it may quote a value of any length (``services/domain/quoting.py``)."""
    decide = Decider(service, ts=now, source=service, basis_seq=basis_seq)
    return [
        decide(c.ConfigRejected, request_seq, correlation_id=f"seq-{request_seq}", causation_id=f"seq:{request_seq}",
               verb=clipped(verb, 64), reason=clipped(reason), request_seq=request_seq)
        for request_seq, (verb, reason) in sorted(rejections.items())
    ]


def check_weights(weights: Mapping[str, float], allowed: tuple[str, ...]) -> str | None:
    """Why a weight table cannot be applied: an unknown name, or a weight that is not a number >= 0."""
    for name, value in weights.items():
        if name not in allowed:
            return f"weights: {name!r} is not one of {', '.join(allowed)}"
        if not (value >= 0 and math.isfinite(value)):
            return f"weights.{name}: {value!r} must be 0 or more"
    return None
