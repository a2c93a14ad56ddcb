"""JSON encoding and decoding of events, with upcasting of older versions.

One ``Encoder`` and one typed ``Decoder`` per process (msgspec's advice:
building them is the expensive part). Decoding:

1. fast path: decode straight into the tagged union; if the event is at its
   current version, done (unknown fields from newer producers are ignored);
2. otherwise read just ``type`` and ``v``; an unknown type or a version newer
   than this code knows raises ``DecodeError`` (the consumer dead-letters it);
   an older version is decoded as a plain dict, passed through the chain of
   upcasters ``v1 -> v2 -> ...`` for its type, and converted to the Struct.

Upcasters are pure functions of a dict, registered per (type, from_version).
Old payloads must decode forever: ``tests/data/golden`` holds real ones.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgspec

from events.base import Event
from events.catalogue import EVENT_TYPES, AnyEvent

__all__ = ["DecodeError", "encode", "decode", "decode_as", "decode_json", "upcaster", "UPCASTERS", "to_builtins"]


class DecodeError(ValueError):
    """Bytes that are not a Horizon event this code can read; the text says why."""


Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
UPCASTERS: dict[tuple[str, int], Upcaster] = {}


def upcaster(event_type: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register ``fn`` to turn a ``from_version`` payload of ``event_type`` into ``from_version + 1``."""

    def register(fn: Upcaster) -> Upcaster:
        UPCASTERS[(event_type, from_version)] = fn
        return fn

    return register


@upcaster("JobSubmitted", 1)
def upcast_job_submitted_v1_v2(old: dict[str, Any]) -> dict[str, Any]:
    """v1 (flat resources, minutes) -> v2 (nested ``resources``, seconds).

    v1: ``{"cpus": 4, "memory": "16g", "gpus": 2, "gpu_type": "a100",
    "time_limit_min": 90, ...}``.
    """
    new = dict(old)
    resources = {key: new.pop(key) for key in ("cpus", "memory", "gpus", "gpu_type") if key in new}
    if "resources" not in new:
        new["resources"] = resources
    minutes = new.pop("time_limit_min", None)
    if minutes is not None and "time_limit_s" not in new:
        new["time_limit_s"] = minutes * 60 if isinstance(minutes, (int, float)) and not isinstance(minutes, bool) else minutes
    new["v"] = 2
    return new


# The version of a payload that leaves out "v", by type, where the answer is not simply "the
# current one": a client that writes JobSubmitted's v1 fields (flat ``gpus``, ``time_limit_min``)
# without "v" means v1, and gets the resources it asked for, not the defaults.
_V1_JOB_FIELDS = ("cpus", "memory", "gpus", "gpu_type", "time_limit_min")
UNVERSIONED: dict[str, Callable[[dict[str, Any]], int]] = {
    "JobSubmitted": lambda p: 1 if "resources" not in p and any(k in p for k in _V1_JOB_FIELDS) else 2,
}


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(AnyEvent)
_header_decoder = msgspec.json.Decoder()


class _Header(msgspec.Struct):
    type: Any = None
    v: Any = None  # absent means the current version, as the Struct default does


_header_only = msgspec.json.Decoder(_Header)


def encode(event: Event) -> bytes:
    return _encoder.encode(event)


def to_builtins(event: Event) -> dict[str, Any]:
    """The event as plain JSON-ready Python objects (with its ``type``)."""
    return msgspec.to_builtins(event)  # type: ignore[no-any-return]


def decode(data: bytes | str) -> Event:
    """Decode one event, upcasting old versions. Raises ``DecodeError`` with a readable reason.

    msgspec raises two other errors on hostile input, which a consumer would not expect:
    ``UnicodeDecodeError`` for a string that is not UTF-8 (a lone surrogate written raw) and
    ``RecursionError`` for arrays or objects nested too deeply (``[[[[...`` 10,000 times).
    Both are bad input like any other, so they become ``DecodeError`` too.
    """
    try:
        try:
            event: Event = _decoder.decode(data)
        except msgspec.DecodeError as exc:
            first_error: str | None = str(exc)
        else:
            if event.v == type(event).VERSION and not _older_unversioned(event.event_type, data):
                return event
            first_error = None
        return _slow_decode(data, first_error)
    except UnicodeDecodeError as exc:
        raise DecodeError(f"not UTF-8: {exc.reason} at byte {exc.start}") from None
    except RecursionError:
        raise DecodeError("nested too deeply to be a Horizon event") from None


def _older_unversioned(event_type: str, data: bytes | str) -> bool:
    """True if the payload has no "v" key and ``UNVERSIONED`` reads it as an older version (a
    cheap look first: a "v" anywhere in the payload counts as one)."""
    detect = UNVERSIONED.get(event_type)
    if detect is None:
        return False
    if (b'"v"' in data) if isinstance(data, (bytes, bytearray)) else ('"v"' in str(data)):
        return False
    payload = _whole(data, event_type)
    return isinstance(payload, dict) and detect(payload) < EVENT_TYPES[event_type].VERSION


def _whole(data: bytes | str, event_type: str) -> Any:
    """The body as plain JSON values; what msgspec cannot represent (a number out of range such as
    ``1e9308``) is bad input like any other, a ``DecodeError``."""
    try:
        return _header_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise DecodeError(f"{event_type}: {exc}") from None


def _slow_decode(data: bytes | str, first_error: str | None) -> Event:
    try:
        header = _header_only.decode(data)
    except msgspec.DecodeError as exc:
        raise DecodeError(f"not a JSON object: {exc}") from None
    event_type = header.type
    if not isinstance(event_type, str):
        raise DecodeError('missing or non-string "type" field: not a Horizon event')
    cls = EVENT_TYPES.get(event_type)
    if cls is None:
        raise DecodeError(f"unknown event type {event_type!r}")
    if header.v is None and event_type in UNVERSIONED:
        payload = _whole(data, event_type)
        version = UNVERSIONED[event_type](payload) if isinstance(payload, dict) else cls.VERSION
    else:
        version = cls.VERSION if header.v is None else header.v
    if isinstance(version, bool) or not isinstance(version, int):
        raise DecodeError(f'{event_type}: field "v" must be an integer, got {version!r}')
    if version > cls.VERSION:
        raise DecodeError(f"{event_type} v{version} is newer than this Horizon understands (v{cls.VERSION})")
    if version < 1:
        raise DecodeError(f"{event_type}: version {version} is not valid")
    if version == cls.VERSION:
        # The fast path failed on a current-version event: its own error is the answer.
        raise DecodeError(f"{event_type}: {first_error}")
    payload = _whole(data, event_type)
    for step in range(version, cls.VERSION):
        fn = UPCASTERS.get((event_type, step))
        if fn is None:
            raise DecodeError(f"{event_type} v{step} has no upcaster to v{step + 1}")
        payload = fn(payload)
    try:
        return msgspec.convert(payload, cls)
    except msgspec.ValidationError as exc:
        raise DecodeError(f"{event_type} v{version} (upcast to v{cls.VERSION}): {exc}") from None


def decode_json(data: bytes | bytearray | str) -> Any:
    """Any JSON, as Python objects: for a reader that wants a body's fields, not its event (the
    dashboard's charts, a query's request, an agent's answer). What a tenant's input can hold is
    bad input like any other, a ``DecodeError`` (so a ``ValueError``): arrays or objects nested
    100,000 deep make Python's ``json`` raise ``RecursionError``, which ``except ValueError`` let
    through and which ended the dashboard's log follower (issue 31)."""
    try:
        return json.loads(data)
    except RecursionError:
        raise DecodeError("nested too deeply to read") from None


def decode_as(data: bytes | str, cls: type[Event]) -> Event:
    """Decode and check the type, e.g. an input subject that admits only one event type."""
    event = decode(data)
    if not isinstance(event, cls):
        raise DecodeError(f"expected {cls.__struct_config__.tag}, got {event.event_type}")
    return event
