"""The checks every entry point shares: names, text, limits, durations and timestamps.

Enqueue, queue configuration, the worker's settings, cron and the Django
settings all validate through these functions, so a value is refused the
same way (``ValidationError`` naming the field and the limit) whichever door
it came in by, and always before anything reaches PostgreSQL or awa-pg.

What is refused, and why:

* names (kind, queue, schedule): 1 to ``MAX_NAME_LENGTH`` characters, no
  control characters (a newline in a queue name breaks every page and log
  line that prints it), no line/paragraph separators and no lone surrogates
  (no driver can encode one as UTF-8);
* free text (tags, error messages, ordering keys): no NUL (PostgreSQL text
  cannot hold it) and valid UTF-8;
* durations: finite, positive (or >= 0 where 0 means "off") and at most
  ``MAX_SECONDS`` (``make_interval`` overflows far beyond it);
* timestamps: between ``MIN_TIMESTAMP`` and ``MAX_TIMESTAMP`` in UTC. Python
  cannot represent a UTC instant before year 1 or after 9999, so a row
  outside that range could be written by PostgreSQL but never read back; a
  day of margin on each side keeps it readable in every session time zone.
"""

from __future__ import annotations

import math
import unicodedata
from datetime import UTC, datetime, timedelta
from typing import Any

from .errors import ValidationError

MAX_NAME_LENGTH = 200
#: Ten years: longer than any deadline, interval or retention anyone configures.
MAX_SECONDS = 10 * 366 * 24 * 3600.0
MIN_TIMESTAMP = datetime(1, 1, 2, tzinfo=UTC)
MAX_TIMESTAMP = datetime(9999, 12, 30, tzinfo=UTC)

# Control characters, line/paragraph separators and surrogates.
_BAD_NAME_CATEGORIES = frozenset({"Cc", "Zl", "Zp", "Cs"})


def check_name(field: str, value: Any) -> str:
    """A kind, queue or schedule name, or ``ValidationError``."""
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {type(value).__name__}")
    if not value:
        raise ValidationError(field, f"must be a non-empty name (1 to {MAX_NAME_LENGTH} characters), got ''")
    if len(value) > MAX_NAME_LENGTH:
        raise ValidationError(
            field,
            f"must be a name of 1 to {MAX_NAME_LENGTH} characters; "
            f"it has {len(value)} (the limit is {MAX_NAME_LENGTH})",
        )
    if value.isascii():
        if value.isprintable():
            return value
        bad = next(ch for ch in value if not ch.isprintable())
    else:
        found = next((ch for ch in value if unicodedata.category(ch) in _BAD_NAME_CATEGORIES), None)
        if found is None:
            return value
        bad = found
    what = "a lone surrogate" if unicodedata.category(bad) == "Cs" else "a control character"
    raise ValidationError(field, f"contains {what} ({bad!a}); names must be printable text")


def check_text(field: str, value: Any) -> str:
    """Text stored as is (a tag, an error message): no NUL, valid UTF-8."""
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise ValidationError(field, "contains a NUL character, which PostgreSQL text cannot store")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValidationError(field, f"is not valid UTF-8 text ({exc.reason})") from None
    return value


def check_int(field: str, value: Any, low: int, high: int) -> int:
    """An integer (not a bool) in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(field, f"must be an integer between {low} and {high}, got {value!r}")
    if not low <= value <= high:
        raise ValidationError(field, f"must be between {low} and {high}, got {value}")
    return value


def check_count(field: str, value: Any, minimum: int) -> int:
    """An integer (not a bool) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValidationError(field, f"must be an integer >= {minimum}, got {value!r}")
    return value


def as_seconds(field: str, value: Any, *, allow_zero: bool = False, maximum: float = MAX_SECONDS) -> float:
    """A duration in seconds (a number or a ``timedelta``), finite and in range."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    what = "0 or a positive number of seconds" if allow_zero else "a positive number of seconds"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(field, f"must be {what}, got {value!r}")
    try:
        seconds = float(value)
    except OverflowError:  # an int beyond float range
        seconds = math.inf
    if not (seconds >= 0 if allow_zero else seconds > 0) or not seconds <= maximum:
        raise ValidationError(field, f"must be {what}, at most {maximum:.0f}, got {value!r}")
    return seconds


def check_timestamp(field: str, value: Any) -> datetime:
    """An aware ``datetime`` (naive ones are taken as UTC) PostgreSQL and Python both hold."""
    if not isinstance(value, datetime):
        raise ValidationError(field, f"must be a datetime, got {type(value).__name__}")
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    try:
        in_utc = aware.astimezone(UTC)
    except (OverflowError, ValueError):
        in_utc = None
    if in_utc is None or not MIN_TIMESTAMP <= in_utc <= MAX_TIMESTAMP:
        raise ValidationError(
            field,
            f"{value.isoformat()} is out of range: it must lie between {MIN_TIMESTAMP.isoformat()} "
            f"and {MAX_TIMESTAMP.isoformat()} (UTC)",
        )
    return aware
