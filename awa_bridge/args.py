"""Job arguments: coercion, kind derivation and canonical JSON.

Every driver goes through these functions, so validation and the bytes that
are hashed into unique keys are computed in exactly one place.

Canonical JSON is what Rust's ``serde_json`` writes for the same value (the
bytes awa-pg hashes): sorted keys, no spaces, UTF-8 unescaped, integers
outside the signed 64-bit range written as floats, and floats as Python's
``repr`` except that magnitudes in [1e-5, 1e-4) are plain decimals and
negative exponents carry no zero padding.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from .errors import ValidationError

_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1

_KIND_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


@functools.lru_cache(maxsize=1024)
def derive_kind(class_name: str) -> str:
    """Snake-case a class name the way awa does (``SMTPEmail`` → ``smtp_email``)."""
    return _KIND_BOUNDARY.sub("_", class_name).lower()


# Field values that ``dataclasses.asdict`` would return unchanged (it deep-copies
# everything else), so a dataclass holding only these can be read field by field.
_FLAT_TYPES = frozenset({str, int, float, bool, type(None)})


@functools.lru_cache(maxsize=1024)
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def coerce_args(args: Any) -> tuple[Any, str | None]:
    """Turn job args into plain JSON data and the kind their type implies.

    Accepts a dataclass instance, a pydantic model, or a mapping. The second
    value is ``None`` for a mapping, whose kind must be given explicitly.
    """
    if dataclasses.is_dataclass(args) and not isinstance(args, type):
        cls = type(args)
        data = {name: getattr(args, name) for name in _field_names(cls)}
        for value in data.values():
            if type(value) not in _FLAT_TYPES:
                # Nested dataclasses, lists, dicts ...: asdict converts and copies them.
                data = dataclasses.asdict(args)
                break
        return data, derive_kind(cls.__name__)
    model_dump = getattr(args, "model_dump", None)
    if callable(model_dump) and not isinstance(args, type):
        return model_dump(mode="json"), derive_kind(type(args).__name__)
    if isinstance(args, Mapping):
        return dict(args), None
    raise TypeError(
        "job args must be a dataclass instance, a pydantic model or a dict "
        f"(with an explicit kind), got {type(args).__name__}"
    )


def canonical_json(value: Any, field: str = "args") -> str:
    """Validate ``value`` and return its canonical JSON text.

    Raises ``ValidationError`` naming the path of the first offending value:
    a NUL character in a string or key, a non-string key, a value JSON cannot
    carry, or a non-finite float.
    """
    if _check(value, field):
        # Some number needs serde_json's spelling; build the text by hand.
        return "".join(_encode(value))
    return _ENCODER.encode(value)


# What json.dumps(..., ensure_ascii=False, separators=(",", ":"), sort_keys=True)
# builds on every call; built once.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _str_ok(text: str) -> bool:
    """True when ``_check_str`` would accept ``text`` (no NUL, encodable as UTF-8)."""
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check(value: Any, path: str) -> bool:
    """Validate recursively; return True when a number needs special spelling.

    Plain strings, in-range integers, booleans and None inside containers are
    checked inline, so the path of a child is only spelled out when it is
    needed (for an error, or to descend into it).
    """
    if value is None or value is True or value is False:
        return False
    if isinstance(value, str):
        _check_str(value, path)
        return False
    if isinstance(value, int):
        return not (_I64_MIN <= value <= _I64_MAX)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError(path, f"{value!r} is not a finite number and JSON cannot carry it")
        return value != 0.0 and abs(value) < 1e-4
    special = False
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValidationError(path, f"keys must be strings, got {type(key).__name__} key {key!r}")
            if not _str_ok(key):
                _check_str(key, f"{path} (key {key!r})")
            kind = type(item)
            if kind is str:
                if not _str_ok(item):
                    _check_str(item, f"{path}.{key}")
            elif kind is int:
                special |= not (_I64_MIN <= item <= _I64_MAX)
            elif item is not None and kind is not bool:
                special |= _check(item, f"{path}.{key}")
        return special
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            kind = type(item)
            if kind is str:
                if not _str_ok(item):
                    _check_str(item, f"{path}[{index}]")
            elif kind is int:
                special |= not (_I64_MIN <= item <= _I64_MAX)
            elif item is not None and kind is not bool:
                special |= _check(item, f"{path}[{index}]")
        return special
    raise ValidationError(
        path,
        f"a value of type {type(value).__name__} is not JSON-serializable "
        "(use str, int, float, bool, None, list or dict; convert dates, UUIDs and "
        "decimals to strings, or use a pydantic model)",
    )


def _check_str(text: str, path: str) -> None:
    if "\x00" in text:
        raise ValidationError(path, "contains a NUL character (\\u0000), which PostgreSQL jsonb cannot store")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(path, f"is not valid UTF-8 text ({exc.reason})") from None


def format_float(value: float) -> str:
    """Spell a finite float the way serde_json does."""
    text = repr(value)
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    exp = int(exponent)
    if exp == -5:
        # Magnitudes in [1e-5, 1e-4) are written as plain decimals.
        sign = "-" if mantissa.startswith("-") else ""
        digits = mantissa.lstrip("-").replace(".", "").rstrip("0") or "0"
        return f"{sign}0.{'0' * (-exp - 1)}{digits}"
    return f"{mantissa}e{exp:+d}" if exp > 0 else f"{mantissa}e{exp}"


def _encode(value: Any) -> Any:
    if value is None:
        yield "null"
    elif value is True:
        yield "true"
    elif value is False:
        yield "false"
    elif isinstance(value, str):
        yield json.dumps(value, ensure_ascii=False)
    elif isinstance(value, int):
        yield str(value) if _I64_MIN <= value <= _I64_MAX else format_float(float(value))
    elif isinstance(value, float):
        yield format_float(value)
    elif isinstance(value, dict):
        yield "{"
        for index, key in enumerate(sorted(value)):
            if index:
                yield ","
            yield json.dumps(key, ensure_ascii=False)
            yield ":"
            yield from _encode(value[key])
        yield "}"
    else:
        yield "["
        for index, item in enumerate(value):
            if index:
                yield ","
            yield from _encode(item)
        yield "]"
