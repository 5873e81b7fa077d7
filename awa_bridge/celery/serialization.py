"""Celery's JSON (kombu's ``json`` serializer): datetime, date, time, UUID and Decimal round-trip.

kombu writes these values as ``{"__type__": "datetime", "__value__": "2026-01-02T03:04:05+00:00"}``
(``date``, ``time`` and ``decimal`` likewise; a UUID as ``{"__type__": "uuid",
"__value__": {"hex": ...}}``) and turns such objects back into the value when a
message is read. Task arguments and return values are stored in PostgreSQL in
the same envelopes, so a task written for Celery sees the same Python values
here; tuples become lists, as through kombu. ``encode`` runs where a value
enters the database (``delay``, ``set_result``), ``decode`` where it leaves
(the worker, ``AsyncResult``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

from ..errors import ValidationError

_ENVELOPE = frozenset({"__type__", "__value__"})

# datetime before date: a datetime is a date too.
_ENCODERS: tuple[tuple[type, str, Callable[[Any], Any]], ...] = (
    (datetime, "datetime", datetime.isoformat),
    (date, "date", date.isoformat),
    (time, "time", time.isoformat),
    (Decimal, "decimal", str),
    (uuid.UUID, "uuid", lambda value: {"hex": value.hex}),
)

_DECODERS: dict[str, Callable[[Any], Any]] = {
    "datetime": datetime.fromisoformat,
    "date": lambda text: datetime.fromisoformat(text).date(),
    "time": time.fromisoformat,
    "decimal": Decimal,
    "uuid": lambda value: uuid.UUID(**value),
}


def encode(value: Any, field: str = "args") -> Any:
    """``value`` with kombu's envelopes in place of the types it carries; JSON-native otherwise.

    Raises ``ValidationError`` naming ``field`` for a value kombu's JSON cannot carry either.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {_key(k, field): encode(v, f"{field}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v, f"{field}[{i}]") for i, v in enumerate(value)]
    for cls, marker, to_json in _ENCODERS:
        if isinstance(value, cls):
            return {"__type__": marker, "__value__": to_json(value)}
    reducer = getattr(value, "__json__", None)
    if callable(reducer):
        return encode(reducer(), field)
    raise ValidationError(
        field,
        f"{type(value).__name__} is not JSON-serializable (Celery's JSON carries str, numbers, lists, dicts, "
        "datetime, date, time, UUID and Decimal)",
    )


def decode(value: Any) -> Any:
    """The Python values of a stored structure: kombu's envelopes become datetime, UUID, Decimal..."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if value.keys() == _ENVELOPE:
            decoder = _DECODERS.get(value["__type__"])
            if decoder is not None:
                return decoder(value["__value__"])
        return {k: decode(v) for k, v in value.items()}
    return value


def _key(key: Any, field: str) -> str:
    """JSON object keys are strings; like json.dumps, numbers and booleans are written as text."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    if isinstance(key, (int, float)):
        return str(key)
    raise ValidationError(field, f"keys must be str, int, float, bool or None, not {type(key).__name__}")
