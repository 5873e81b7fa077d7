"""Job arguments: coercion, kind derivation and canonical JSON.

Every driver goes through these functions, so validation and the bytes that
are hashed into unique keys are computed in exactly one place.

Canonical JSON is what Rust's ``serde_json`` writes for the same value (the
bytes awa-pg hashes): sorted keys, no spaces, UTF-8 unescaped, and floats as
Python's ``repr`` except that magnitudes in [1e-5, 1e-4) are plain decimals
and negative exponents carry no zero padding.

Only values awa-pg 0.6.9's worker can decode are accepted, so a job enqueued
here never strands in ``running`` there: integers in the signed 64-bit range
(larger ones are refused, not rounded to floats: send them as strings),
finite floats of magnitude at most ``MAX_FLOAT`` (awa-pg cannot read back
the largest doubles, ``1.7976931348623157e308``), and at most ``MAX_DEPTH``
levels of nested lists and dicts, the top-level object counting as one
(probed against awa-pg 0.6.9's worker: it read jobs nested 126 levels deep,
while jobs of 127 or 128 levels failed or stayed stuck; a report against it
saw failures from 64 levels on, so the limit stays at 64).
A structure that contains itself is refused by the same depth check.

A JSON value (args, metadata, progress, a result, a payload) is at most
``MAX_JSON_BYTES`` of UTF-8 text. PostgreSQL's own limits are higher but
fail on the server, after the statement was sent, and abort the caller's
transaction: a jsonb string or container holds at most 268,435,455 bytes,
and jsonb's binary form can take up to four times the text's size (an array
of small numbers). A job's args are read at every claim and kept for the
finished job's retention; a payload larger than this belongs in storage of
its own, with a reference in the args.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import json.encoder
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import ValidationError

_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1
MAX_FLOAT = 1e308
MAX_DEPTH = 64
MAX_JSON_BYTES = 16 * 1024 * 1024

_ASCII_DIGITS = frozenset("0123456789")


# Lowercase (Unicode's Other_Lowercase) since Unicode 15.0, not in 14.0, which Python 3.11's
# str.islower() follows; awa-pg (Rust) says lowercase. The only such characters Python 3.11
# already knew; the others were new in 15.0 and are no identifier before Python 3.12.
_LOWERCASE_SINCE_UNICODE_15 = frozenset("\u10fc\ua7f2\ua7f3\ua7f4\uab69")


def _is_lower(char: str) -> bool:
    return char.islower() or char in _LOWERCASE_SINCE_UNICODE_15


@functools.lru_cache(maxsize=1024)
def derive_kind(class_name: str) -> str:
    """Snake-case a class name exactly as awa-pg does (``SMTPEmail`` → ``smtp_email``).

    Character by character, with Unicode's Uppercase / Lowercase properties
    (so ``CaféOrder`` → ``café_order``): an uppercase character becomes the
    first character of its lowercase mapping, preceded by ``_`` when the
    character before it is lowercase or an ASCII digit, or is uppercase and
    the one after it lowercase. Anything else is kept as it is.
    """
    out: list[str] = []
    last = len(class_name) - 1
    for index, char in enumerate(class_name):
        if not char.isupper():
            out.append(char)
            continue
        if index > 0:
            prev = class_name[index - 1]
            if (
                _is_lower(prev)
                or prev in _ASCII_DIGITS
                or (prev.isupper() and index < last and _is_lower(class_name[index + 1]))
            ):
                out.append("_")
        out.append(char.lower()[0])
    return "".join(out)


# Field values that ``dataclasses.asdict`` would return unchanged (it deep-copies
# everything else), so a dataclass holding only these can be read field by field.
_FLAT_TYPES = frozenset({str, int, float, bool, type(None)})


@functools.lru_cache(maxsize=1024)
def _dataclass_shape(cls: type) -> tuple[tuple[str, ...], str] | None:
    """A dataclass's field names and derived kind, or None for any other class: probed once per class."""
    if not dataclasses.is_dataclass(cls):
        return None
    return tuple(f.name for f in dataclasses.fields(cls)), derive_kind(cls.__name__)


def coerce_args(args: Any) -> tuple[Any, str | None]:
    """Turn job args into plain JSON data and the kind their type implies.

    Accepts a dataclass instance, a pydantic model, or a mapping. The second
    value is ``None`` for a mapping, whose kind must be given explicitly.
    """
    if type(args) is dict:  # the common case first: no dataclass or pydantic probing
        return dict(args), None
    cls: type = type(args)
    shape = None if isinstance(args, type) else _dataclass_shape(cls)
    if shape is not None:
        names, kind = shape
        data = {name: getattr(args, name) for name in names}
        if not _FLAT_TYPES.issuperset(map(type, data.values())):
            # Nested dataclasses, lists, dicts ...: asdict converts and copies them.
            data = _converted(dataclasses.asdict, args)
        return data, kind
    model_dump = getattr(args, "model_dump", None)
    if callable(model_dump) and not isinstance(args, type):
        return _converted(lambda value: model_dump(mode="json"), args), derive_kind(type(args).__name__)
    if isinstance(args, Mapping):
        return dict(args), None
    raise TypeError(
        "job args must be a dataclass instance, a pydantic model or a dict "
        f"(with an explicit kind), got {type(args).__name__}"
    )


def plain_args(args: Any) -> tuple[dict[str, Any], str | None, str] | None:
    """The data, derived kind and canonical JSON of the most common args, in one pass; else None.

    Plain args are a dataclass instance, or a dict with ASCII string keys,
    whose values are all ASCII strings without NUL, integers in the signed
    64-bit range, booleans or None: what ``coerce_args`` returns for them is
    data ``canonical_json`` accepts as it is (nothing to name, no number to
    respell). Anything else gives None and goes through ``coerce_args`` and
    ``canonical_json``, which say what is wrong. The kind is None for a dict,
    as from ``coerce_args``. Why a second path: after each round trip to the
    server a single enqueue runs cache-cold, where what costs is the amount of
    code touched, and this one loop replaces the read, the flatness test and
    the walk of the full path (a third of a single enqueue's own time:
    README, "Enqueue").
    """
    kind: str | None = None
    if type(args) is dict:
        data = dict(args)
    else:
        cls: type = type(args)
        # A class passed as args is refused by coerce_args, even one whose metaclass is a dataclass.
        shape = None if isinstance(args, type) else _dataclass_shape(cls)
        if shape is None:
            return None
        names, kind = shape
        data = {}
        for name in names:
            data[name] = getattr(args, name)
    for key, value in data.items():
        if type(key) is not str or "\x00" in key or not key.isascii():
            return None
        kind_of = type(value)
        if kind_of is str:
            if "\x00" in value or not value.isascii():
                return None
        elif kind_of is int:
            if not _I64_MIN <= value <= _I64_MAX:
                return None
        elif value is not None and kind_of is not bool:
            return None
    return data, kind, sized(_json_text(data), "args")


def _converted(convert: Any, args: Any) -> Any:
    """``convert(args)``, with a cyclic or absurdly deep object refused as bad args."""
    try:
        return convert(args)
    except RecursionError:
        raise ValidationError(
            "args", f"a {type(args).__name__} that contains itself (or is nested thousands deep) is not JSON"
        ) from None


def canonical_json(value: Any, field: str = "args") -> str:
    """Validate ``value`` and return its canonical JSON text.

    Raises ``ValidationError`` naming the path of the first offending value:
    a NUL character or lone surrogate in a string or key, a non-string key, a
    value JSON cannot carry, a number awa-pg cannot read (see the module
    docstring), or nesting deeper than ``MAX_DEPTH``.
    """
    if _check(value, field, 1):
        # Some number needs serde_json's spelling; build the text by hand.
        return sized("".join(_encode(value)), field)
    return sized(_json_text(value), field)


def sized(text: str, field: str) -> str:
    """``text``, unless it is more than ``MAX_JSON_BYTES`` of UTF-8 (counted only when it could be)."""
    if len(text) > MAX_JSON_BYTES // 4:  # at most four bytes a character
        size = len(text.encode("utf-8"))
        if size > MAX_JSON_BYTES:
            raise ValidationError(
                field,
                f"is {size:,} bytes of JSON; the limit is {MAX_JSON_BYTES:,} (16 MiB): keep large data"
                " elsewhere (a file, an object store, a table of your own) and pass a reference to it",
            )
    return text


def _make_json_text() -> Callable[[Any], str]:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)``, built once.

    ``JSONEncoder.encode`` builds CPython's C encoder anew on every call, half
    of the cost of encoding a small args dict; this keeps one and calls it. It
    skips the encoder's check for containers that hold themselves, which
    ``_check`` has already refused by their depth. Where the C encoder is
    missing or takes other arguments, the encoder's own ``encode`` is used.
    """
    encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    make: Callable[..., Callable[[Any, int], Iterable[str]]] | None = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return encoder.encode
    try:
        iterencode = make(None, encoder.default, json.encoder.encode_basestring, None, ":", ",", True, False, True)
    except TypeError:  # a signature of a future Python
        return encoder.encode
    return lambda value: "".join(iterencode(value, 0))


_json_text = _make_json_text()


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


def _check(value: Any, path: str, depth: int) -> bool:
    """Validate recursively; return True when a number needs special spelling.

    ``depth`` is the nesting level of ``value`` (1 for the top). Plain
    strings, in-range integers, booleans and None inside containers are
    checked inline, so the path of a child is only spelled out when it is
    needed (for an error, or to descend into it).
    """
    if value is None or value is True or value is False:
        return False
    if isinstance(value, str):
        _check_str(value, path)
        return False
    if isinstance(value, int):
        _check_i64(value, path)
        return False
    if isinstance(value, float):
        if not math.isfinite(value) or abs(value) > MAX_FLOAT:
            raise ValidationError(
                path, f"{value!r} is out of range: numbers must be finite and at most {MAX_FLOAT:g} in magnitude"
            )
        return value != 0.0 and abs(value) < 1e-4
    if isinstance(value, (dict, list, tuple)) and depth > MAX_DEPTH:
        raise ValidationError(path, f"is nested deeper than {MAX_DEPTH} levels of lists and dicts (or contains itself)")
    special = False
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValidationError(path, f"keys must be strings, got {type(key).__name__} key {key!r}")
            # ``_str_ok`` inlined for the ASCII case: two calls fewer per entry.
            if ("\x00" in key or not key.isascii()) and not _str_ok(key):
                _check_str(key, f"{path} (key {key!r})")
            kind = type(item)
            if kind is str:
                if ("\x00" in item or not item.isascii()) and not _str_ok(item):
                    _check_str(item, f"{path}.{key}")
            elif kind is int:
                if not _I64_MIN <= item <= _I64_MAX:
                    _check_i64(item, f"{path}.{key}")
            elif item is not None and kind is not bool:
                special |= _check(item, f"{path}.{key}", depth + 1)
        return special
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            kind = type(item)
            if kind is str:
                if ("\x00" in item or not item.isascii()) and not _str_ok(item):
                    _check_str(item, f"{path}[{index}]")
            elif kind is int:
                if not _I64_MIN <= item <= _I64_MAX:
                    _check_i64(item, f"{path}[{index}]")
            elif item is not None and kind is not bool:
                special |= _check(item, f"{path}[{index}]", depth + 1)
        return special
    raise ValidationError(
        path,
        f"a value of type {type(value).__name__} is not JSON-serializable "
        "(use str, int, float, bool, None, list or dict; convert dates, UUIDs and "
        "decimals to strings, or use a pydantic model)",
    )


def _check_i64(value: int, path: str) -> None:
    if not _I64_MIN <= value <= _I64_MAX:
        raise ValidationError(
            path,
            "is outside the signed 64-bit range (-2**63 to 2**63-1) that awa-pg reads exactly; "
            "send larger integers as strings",
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
        yield str(value)
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
