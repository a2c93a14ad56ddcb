"""Horizon's event catalogue: the Structs, the codec, the subjects and the schema."""

from events.base import AccountId, DeviceId, Event, JobId, NodeId, Seq, Tenant
from events.catalogue import *  # noqa: F403 - the catalogue is the package's public surface
from events.catalogue import EVENT_TYPES, AnyEvent
from events.codec import DecodeError, decode, decode_as, encode, to_builtins
from events.resources import GpuModel, ResourceError

__all__ = [
    "AccountId", "DeviceId", "Event", "JobId", "NodeId", "Seq", "Tenant",
    "EVENT_TYPES", "AnyEvent", "DecodeError", "decode", "decode_as", "encode", "to_builtins",
    "GpuModel", "ResourceError",
]
