"""One error hierarchy for the whole suite.

The names follow awa-pg's (``AwaError``, ``UniqueConflict``, ``ValidationError``...)
so code written against awa-pg keeps working when it switches imports.
"""

from __future__ import annotations

from typing import Any


class AwaError(Exception):
    """Base class of every error this package raises on purpose."""


class ValidationError(AwaError, ValueError):
    """Bad input caught before anything reaches PostgreSQL.

    ``field`` names the offending option or the path inside args/metadata
    (``args.items[2].name``), so a caller can point at it.
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class UnsupportedConnection(AwaError, TypeError):
    """The object handed to the bridge is not a connection type it knows."""


class UniqueConflict(AwaError):
    """A job with the same unique key already exists in an enforced state.

    ``unique_key`` is the 16-byte key that collided and ``constraint`` the
    index that reported it (``jobs_unique_key_idx`` on our schema).
    """

    def __init__(self, unique_key: bytes | None, constraint: str | None, detail: str = "") -> None:
        self.unique_key = unique_key
        self.constraint = constraint
        key = unique_key.hex() if unique_key else "?"
        msg = f"a job with unique key {key} already exists (constraint {constraint or '?'})"
        super().__init__(msg + (f": {detail}" if detail else ""))


class SchemaNotMigrated(AwaError):
    """The database lacks the awa schema, or it is older than this package needs."""


class ForeignSchema(AwaError):
    """The database was migrated by the real Awa (Rust); our runner must not touch it."""


class MigrationChecksumMismatch(AwaError):
    """An already-applied migration file was edited after it was applied."""


class StaleAttempt(AwaError):
    """A write guarded by ``run_lease`` matched no row: the attempt was superseded."""


class DatabaseError(AwaError):
    """A driver error we wrap; the original stays in ``__cause__``."""


def sqlstate_of(exc: BaseException) -> str | None:
    """Return the SQLSTATE of a driver error, whatever wrapped it.

    asyncpg exposes ``sqlstate``, psycopg 3 ``sqlstate``, psycopg2 ``pgcode``;
    SQLAlchemy keeps the driver error in ``orig`` and Django in ``__cause__``.
    """
    seen: set[int] = set()
    current: Any = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for attr in ("sqlstate", "pgcode"):
            value = getattr(current, attr, None)
            if isinstance(value, str):
                return value
        current = getattr(current, "orig", None) or current.__cause__
    return None


def constraint_of(exc: BaseException) -> str | None:
    """Best-effort name of the constraint a driver error reports."""
    seen: set[int] = set()
    current: Any = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        name = getattr(current, "constraint_name", None)  # asyncpg
        if name:
            return name
        diag = getattr(current, "diag", None)  # psycopg
        if diag is not None and getattr(diag, "constraint_name", None):
            return diag.constraint_name
        current = getattr(current, "orig", None) or current.__cause__
    return None
