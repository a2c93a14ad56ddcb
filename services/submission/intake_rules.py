"""The tenant boundary's rules, pure: what the intake stores of a tenant's input, and how the
submission core reads what it stored.

The intake (``services/submission/intake.py``) is the only way a tenant's input reaches the log
under accounts (docs/tenants.md). Of the headers a client sent it keeps only ``Nats-Msg-Id``
(namespaced per tenant, ``in/<tenant>/<id>``) and the trace context; a header of the server's
(``Nats-*``: rollup, TTL, atomic batches, expected sequences ...) or of Horizon's (``Horizon-*``)
is refused: the input is stored without it and answered with ``InputRejected``. It marks the
stored input with ``Horizon-Intake: <tenant>``, and the core then reads every job id in it as
that tenant's own: ``<tenant>:<id>`` (``events.subjects.job_key``). So a tenant can name neither
another tenant's job nor a service's decision id, and two tenants may use the same job id.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import msgspec

from events import catalogue as c
from events.base import Event
from events.subjects import (CLIENT_MSG_ID_HEADER, INTAKE_HEADER, REFUSED_HEADER, USER_HEADER, Subject, job_key,
                             login_user, valid_token)
from services.domain.envelope import Decider
from services.domain.quoting import bounded_id, clipped
from services.domain.protocol import MSG_ID, Record

__all__ = ["screen", "authenticated_user", "intake_msg_id", "scoped", "scoped_spec", "malformed_input", "error_path", "KEPT_HEADERS"]

# What a client may send and the log keeps; anything else is dropped, and a Nats-* or Horizon-*
# header besides Nats-Msg-Id refuses the input.
KEPT_HEADERS = ("traceparent", "tracestate")
_RESERVED = ("nats-", "horizon-")
# Added by the server itself to every request that crosses an account's service import (the
# requester's account and round-trip time): on every tenant input under accounts, never the
# client's doing. Not stored, not refused.
_SERVER_ADDED = ("nats-request-info",)
_PATH = re.compile(r"at `(\$[^`]*)`")
_MISSING = re.compile(r"missing required field `([^`]+)`")
# What the decoder says of the `type` field (services/runtime/consume.py, events/codec.py).
_TYPE_ERRORS = ('missing or non-string "type" field', "unknown event type", " is not accepted on ")


def intake_msg_id(tenant: str, client_msg_id: str) -> str:
    """The Nats-Msg-Id the log dedupes a tenant's input on: in the tenant's own namespace, so it
    can collide with nothing but that tenant's own inputs (never a decision's ``<service>/...``)."""
    return f"in/{tenant}/{client_msg_id}"


def authenticated_user(tenant: str, request_info: str | None) -> str:
    """Which of ``tenant``'s users sent an input: the NATS user the server names in the
    ``Nats-Request-Info`` it adds to a request crossing a shared service import (a client's own header
    of that name is replaced by the server's), read back into the user's name (``login_user``);
    "-" when the server did not say or named a login that is not the tenant's."""
    try:
        info = json.loads(request_info or "")
    except ValueError:
        return "-"
    login = info.get("user") if isinstance(info, dict) else None
    name = login_user(tenant, login) if isinstance(login, str) else None
    return name if name else "-"


def screen(tenant: str, headers: Mapping[str, str] | None) -> tuple[dict[str, str], list[str]]:
    """The headers to store with a tenant's input, and the names of those refused (sorted). The
    input is marked with its tenant (``Horizon-Intake``) and its authenticated user (``Horizon-User``)."""
    out: dict[str, str] = {INTAKE_HEADER: tenant}
    info = next((value for name, value in (headers or {}).items() if name.lower() == "nats-request-info"), None)
    out[USER_HEADER] = authenticated_user(tenant, info)
    refused: list[str] = []
    for name, value in (headers or {}).items():
        lower = name.lower()
        if lower == MSG_ID.lower():
            if value:
                out[MSG_ID] = intake_msg_id(tenant, value)
                out[CLIENT_MSG_ID_HEADER] = value
        elif lower in KEPT_HEADERS:
            out[lower] = value
        elif lower in _SERVER_ADDED:
            continue
        elif lower.startswith(_RESERVED):
            refused.append(name)
    if refused:
        out[REFUSED_HEADER] = ", ".join(sorted(refused))
    return out, sorted(refused)


def scoped(event: Event, tenant: str) -> Event:
    """``event`` (a tenant's input) with every job id it names read as ``tenant``'s own."""
    if isinstance(event, c.JobSubmitted):
        return msgspec.structs.replace(
            event, job_id=job_key(tenant, event.job_id),
            dependencies=[msgspec.structs.replace(d, job_id=job_key(tenant, d.job_id)) for d in event.dependencies])
    if hasattr(event, "job_id"):
        return msgspec.structs.replace(event, job_id=job_key(tenant, event.job_id))  # type: ignore[attr-defined]
    return event


def scoped_spec(spec: c.JobSpec, tenant: str) -> c.JobSpec:
    """An accepted spec with the ids it names (dependencies, its array) as ``tenant``'s keys, and
    charged to the tenant's own account ``<tenant>`` when it names none (``default``): under
    accounts, tenants share no account unless an operator opens one to several."""
    return msgspec.structs.replace(
        spec,
        account=tenant if spec.account == c.DEFAULT_ACCOUNT else spec.account,
        dependencies=tuple(msgspec.structs.replace(d, job_id=job_key(tenant, d.job_id)) for d in spec.dependencies),
        array=None if spec.array is None else job_key(tenant, spec.array))


def error_path(error: str) -> str:
    """The JSON path of the field a decoding ``error`` is about: the one msgspec names (``- at
    `$.resources.gpus```), a missing required field's own (`$.job_id`, `$.affinity.node_required[0].key`:
    msgspec names the object it is missing from), `$.type` for an event type the subject does not
    take; empty when it is not one field's (not JSON, not an object)."""
    found = _PATH.search(error)
    missing = _MISSING.search(error)
    if missing:
        return f"{found.group(1) if found else '$'}.{missing.group(1)}"
    if found:
        return found.group(1)
    if any(text in error for text in _TYPE_ERRORS):
        return "$.type"
    return ""


class _Guess(msgspec.Struct):
    job_id: Any = None


_guess = msgspec.json.Decoder(_Guess)


def malformed_input(record: Record, subject: Subject, headers: Mapping[str, str], error: str,
                    path: str = "") -> c.InputRejected:
    """The verdict on a client input that cannot be taken (the decision round sets ``ts`` and
    ``basis_seq``). ``path``: the JSON path msgspec names in ``error``, if none is given."""
    tenant = subject.owner
    job_id = ""
    try:
        guess = _guess.decode(record.data).job_id
    except Exception:  # noqa: BLE001 - not JSON, not an object, too deep: no job id to name
        guess = None
    if isinstance(guess, str) and valid_token(guess):
        job_id = job_key(tenant, guess) if headers.get(INTAKE_HEADER) == tenant else guess
    if not path:
        path = error_path(error)
    return Decider("submission", source="submission", ts=0.0)(
        c.InputRejected, record.seq, causation_id=f"seq:{record.seq}", correlation_id=job_id or f"seq-{record.seq}",
        tenant=bounded_id(tenant), input_seq=record.seq, subject=clipped(record.subject), verb=bounded_id(subject.name),
        msg_id=clipped(headers.get(CLIENT_MSG_ID_HEADER) or headers.get(MSG_ID) or ""), job_id=job_id,
        path=clipped(path), reason=clipped(error))
