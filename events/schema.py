"""JSON Schema of the event catalogue, so that other languages can publish.

msgspec derives the schema from the Struct annotations: the annotations are
the schema, there is no second copy to drift.
"""

from __future__ import annotations

from typing import Any

import msgspec

from events.catalogue import EVENT_TYPES, AnyEvent

__all__ = ["catalogue_schema", "event_schema"]


def catalogue_schema() -> dict[str, Any]:
    """One schema for the whole tagged union (discriminated by ``type``)."""
    schema = msgspec.json.schema(AnyEvent)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "Horizon events"
    return schema


def event_schema(event_type: str) -> dict[str, Any]:
    """The schema of one event type, e.g. ``JobSubmitted``; ``KeyError`` lists the known types."""
    cls = EVENT_TYPES.get(event_type)
    if cls is None:
        raise KeyError(f"unknown event type {event_type!r}; known: {', '.join(sorted(EVENT_TYPES))}")
    schema = msgspec.json.schema(cls)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = event_type
    return schema
