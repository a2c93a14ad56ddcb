"""Submission's decisions: ``horizon.evt.submission.<Type>.<job_id>``, the verdicts on
the inputs among them."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from events.base import Event, JobId
from events.catalogue.values import JobSpec


class JobAccepted(Event, tag="JobAccepted", kw_only=True):
    job_id: JobId
    spec: JobSpec
    submitted_seq: int = 0
    submitted_ts: float = 0.0
    basis_seq: int = 0
    # What the submitter should know though the job was accepted, e.g. "partition 'gpu' is not
    # defined here; the job runs in 'main'" (horizon sbatch and submit print them on stderr).
    warnings: list[str] = []
    # A task of an array: how many tasks the array has, so the submitter knows how many JobAccepted
    # (one per task, each with the same causation_id) its submission gets; 0: not an array's task.
    array_tasks: Annotated[int, Meta(description=(
        "A task of an array: how many tasks the array has, which is how many JobAccepted its submission gets "
        "(one per task, each with the submission's `causation_id`); 0: the job is not an array's task."))] = 0


class JobRejected(Event, tag="JobRejected", kw_only=True):
    job_id: JobId
    tenant: str
    reason: Annotated[str, Meta(description="Why, in words a person can act on: the value and what is accepted.")]
    field: Annotated[str, Meta(description="The field at fault (`resources.memory`), or empty.")] = ""
    submitted_seq: int = 0
    basis_seq: int = 0
    # The tenant limit the submission would pass (``max_pending_jobs``, ``max_array_tasks``,
    # ``max_pending_array_tasks``: TenantConfigured); empty: not a limit's refusal.
    limit: Annotated[str, Meta(description=(
        "The tenant limit it would pass (`max_pending_jobs`, `max_array_tasks`, `max_pending_array_tasks`; "
        "`horizon tenant set`), or empty."))] = ""


class InputRejected(Event, tag="InputRejected", kw_only=True):
    """The verdict on a client input that is not a well-formed request: not JSON, not an event,
    a field of the wrong type (``path`` is the JSON path, e.g. ``$.resources.gpus``), an event
    its subject does not take, a header a client may not send, or a body naming another tenant.
    ``causation_id`` is ``seq:<input_seq>``, the sequence the publisher's PubAck carried;
    ``msg_id`` the ``Nats-Msg-Id`` it sent (as sent); ``job_id`` the job id its body names, when
    one can be read. Published by submission, on the sender's feed like every verdict."""

    tenant: str
    input_seq: Annotated[int, Meta(description="The input's sequence, as its PubAck said.")]
    subject: str = ""
    verb: str = ""
    msg_id: Annotated[str, Meta(description="The Nats-Msg-Id the client sent, as sent.")] = ""
    job_id: JobId = ""
    path: Annotated[str, Meta(description=(
        "The JSON path of the field at fault, e.g. `$.resources.gpus`, a missing field's own (`$.job_id`), "
        "`$.type` for an event type the subject does not take; `headers` for a refused header; empty when the "
        "problem is not one field's (not JSON, not an object)."))] = ""
    reason: str
    basis_seq: int = 0


class JobCancelled(Event, tag="JobCancelled", kw_only=True):
    job_id: JobId
    reason: str = ""
    attempt: int = 0
    basis_seq: int = 0


class JobHeld(Event, tag="JobHeld", kw_only=True):
    job_id: JobId
    reason: str = ""
    basis_seq: int = 0


class JobReleased(Event, tag="JobReleased", kw_only=True):
    job_id: JobId
    basis_seq: int = 0


class JobPriorityChanged(Event, tag="JobPriorityChanged", kw_only=True):
    job_id: JobId
    priority_class: str
    nice: int = 0
    basis_seq: int = 0


class JobStopRequested(Event, tag="JobStopRequested", kw_only=True):
    """Submission asks the agent running ``job_id`` to stop it (a cancel of a started job).

    The agent signals the process, waits up to ``grace_period_s``, kills it,
    and reports ``JobCancelled`` for the attempt: the job's resources are
    released only then, so nothing else starts on its GPUs while it dies.
    """

    job_id: JobId
    attempt: int
    reason: str = ""
    grace_period_s: float = 10.0
    basis_seq: int = 0


class RequestRejected(Event, tag="RequestRejected", kw_only=True):
    """A cancel, hold, release or update that cannot be carried out, and why."""

    job_id: JobId
    tenant: str
    verb: Annotated[str, Meta(description="The verb of the request answered (`cancel`, `submit`, ...).")]
    reason: str
    request_seq: int = 0
    basis_seq: int = 0


class LogLayoutChanged(Event, tag="LogLayoutChanged", kw_only=True):
    """The log's subject layout from this record on (docs/architecture.md, "One filter per service").

    Submission publishes it once, the first time it decides on a log that has none (id
    ``submission/LogLayoutChanged/<layout>``). Layout 2: from here on submission relays every operator
    input (``horizon.in._admin.<verb>`` but the job requests) as an ``InputRelayed``, every other
    service applies the relays and no raw input, and so reads ``horizon.evt.>`` alone. Before it (a log
    an earlier version wrote), the services apply the raw inputs where they are, as they always did."""

    layout: Annotated[int, Meta(description="The layout from here on: 2, operator inputs relayed as events.")] = 2
    basis_seq: int = 0


class InputRelayed(Event, tag="InputRelayed", kw_only=True):
    """An operator's input relayed by submission as it was stored, so that the services that apply it
    read ``horizon.evt.>`` alone (layout 2, ``LogLayoutChanged``). Only an input on its own admin
    subject (``horizon.in._admin.<verb>``, the event type that verb takes) is relayed, once, in log
    order: id ``submission/InputRelayed/<request_seq>``, ``causation_id`` ``seq:<request_seq>``. Every
    service applies the input it carries at the relay's place in the log and answers it as before:
    ``ConfigRejected.request_seq`` and inventory's answers name ``request_seq``, the input's own
    sequence."""

    request_seq: Annotated[int, Meta(description="The sequence of the operator's input relayed.")]
    verb: Annotated[str, Meta(description="Its admin verb (`account`, `policy`, `node`, ...).")]
    # Raw: the stored bytes themselves, not a string of them (no escaping: a relay is the input's size
    # and a few hundred bytes), decoded by each reader as the input (events.codec.decode)
    input: Annotated[msgspec.Raw, Meta(description=(
        "The input exactly as stored: the event the verb takes, as JSON; `null` for one too large to relay "
        "(`omitted_bytes`), which no service applies."))]
    omitted_bytes: Annotated[int, Meta(description=(
        "The size of an input too large to relay within a message (its body is left out); 0: relayed."))] = 0
    basis_seq: int = 0
