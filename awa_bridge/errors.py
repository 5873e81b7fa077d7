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


class MissingDependency(AwaError, ImportError):
    """A part of the suite needs a package that is not installed; the message says which to install."""


def require(module: str, extra: str, why: str) -> Any:
    """``module``, imported; ``MissingDependency`` naming it and its extra when it is not installed.

    The optional drivers and croniter are imported where they are first used, so that
    ``import awa_bridge`` needs neither: a user who skipped an extra learns it in one line
    (the CLI's ``error:``, a Django ``CommandError``), not from a traceback.
    """
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise  # installed, but something it imports is missing: its own traceback says what
        raise MissingDependency(
            f"{module} is not installed, and {why}: pip install {module} (or awa-bridge's extra [{extra}])"
        ) from exc


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


MIGRATE_HINT = "run `python -m awa_bridge migrate` (in a Django project: `python manage.py migrate`)"


class SchemaNotMigrated(AwaError):
    """The database lacks the awa schema, or it is older than this package needs.

    ``problem`` says what is missing, ``hint`` how to migrate (default ``MIGRATE_HINT``): a
    framework that has its own command for it (``manage.py migrate --database jobs``) gives its own.
    """

    def __init__(self, problem: str, hint: str = MIGRATE_HINT) -> None:
        super().__init__(problem, hint)
        self.problem = problem
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.problem}; {self.hint}"


# SQLSTATEs of a missing table, type or function: what any statement meets on a database
# that lacks the awa schema (or a newer part of it).
_UNDEFINED = {"42P01", "42704", "42883", "3F000"}


def missing_schema(exc: BaseException) -> SchemaNotMigrated | None:
    """The ``SchemaNotMigrated`` a driver error means, when it is about a missing ``awa`` object.

    Works for psycopg, psycopg2, asyncpg and the SQLAlchemy and Django wrappers (their
    ``orig`` / ``__cause__`` is followed); ``None`` for any other error.
    """
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return None
        if sqlstate_of(seen) in _UNDEFINED and "awa" in str(seen):  # sqlstate_of: psycopg2's pgcode too
            first = str(seen).strip().splitlines()[0]
            problem = f"the awa schema is missing or out of date on this database ({first})"
            return SchemaNotMigrated(problem)
        seen = seen.__cause__
    return None


class ForeignSchema(AwaError):
    """The database was migrated by the real Awa (Rust); our runner must not touch it."""


class MigrationChecksumMismatch(AwaError):
    """An already-applied migration file was edited after it was applied."""


class StaleAttempt(AwaError):
    """A write guarded by ``run_lease`` matched no row: the attempt was superseded."""


class JobNotFound(AwaError, LookupError):
    """No job matches: the id does not exist (or no job holds that unique key).

    ``job_id`` is the id asked for, ``None`` for a lookup by unique key.
    """

    def __init__(self, job_id: int | None, message: str | None = None) -> None:
        self.job_id = job_id
        super().__init__(message or f"no job with id {job_id}")


class InvalidState(AwaError):
    """The job exists but its state does not allow the action; nothing was changed.

    ``state`` is the state the job was found in, ``allowed`` the states the
    action accepts.
    """

    def __init__(self, job_id: int, action: str, state: str, allowed: tuple[str, ...]) -> None:
        self.job_id = job_id
        self.action = action
        self.state = state
        self.allowed = allowed
        super().__init__(
            f"cannot {action} job {job_id}: it is {state}; {action} applies to jobs that are {', '.join(allowed)}"
        )


class CallbackNotFound(AwaError, LookupError):
    """No job holds this callback id (never registered, or replaced by a later attempt's)."""

    def __init__(self, callback_id: str, message: str | None = None) -> None:
        self.callback_id = callback_id
        super().__init__(message or f"no job is waiting on callback {callback_id}")


class CallbackNotWaiting(CallbackNotFound):
    """The callback's job no longer awaits it: already resolved, or the wait timed out.

    ``job_id`` and ``state`` say where the job is now; nothing was changed.
    """

    def __init__(self, callback_id: str, job_id: int, state: str, timed_out: bool) -> None:
        self.job_id = job_id
        self.state = state
        self.timed_out = timed_out
        why = "its wait timed out" if timed_out else "it was already resolved"
        super().__init__(
            callback_id, f"callback {callback_id} of job {job_id} can no longer be resolved: {why} (the job is {state})"
        )


class ReceiptConflict(AwaError):
    """An operation key was already recorded with a different payload.

    Reusing a key for different work is a bug in the caller: the effect is
    neither repeated nor reused. ``tenant`` and ``operation_key`` name the key.
    """

    def __init__(
        self, tenant: str, operation_key: str, recorded: bytes, given: bytes, *, pending: bool = False
    ) -> None:
        self.tenant = tenant
        self.operation_key = operation_key
        # A pending receipt is a claim whose outcome was never recorded (what an operator settles).
        state = "claimed (its outcome not recorded yet)" if pending else "recorded"
        super().__init__(
            f"operation key {operation_key!r} (tenant {tenant!r}) was already {state} with a different "
            f"payload (fingerprint {bytes(recorded).hex()[:16]}..., this payload {given.hex()[:16]}...); "
            "the effect is neither repeated nor reused"
        )


class OutcomeUnknown(AwaError):
    """An earlier attempt started this effect but its outcome was never recorded.

    Happens when the receipt was committed before the effect finished (the
    external-effect pattern: ``external_effect(..., idempotent=False)``) and
    the process stopped in between. A handler parks its job with
    ``park_for_reconciliation``. Reconcile with the provider (the idempotency
    key identifies the request), then record what happened with
    ``awa_bridge.receipts.resolve_receipt``, or ``release_receipt`` if the
    provider never acted.
    """

    def __init__(self, tenant: str, operation_key: str, started_at: Any) -> None:
        self.tenant = tenant
        self.operation_key = operation_key
        self.started_at = started_at
        super().__init__(
            f"operation key {operation_key!r} (tenant {tenant!r}) was started at {started_at} and its outcome "
            "was never recorded: reconcile it with the provider, then call resolve_receipt() (or release_receipt() "
            "if the provider never acted); "
            "it is not retried blindly"
        )


class ReceiptNotFound(AwaError, LookupError):
    """No receipt is stored for that operation key."""


class ReceiptNotSaved(AwaError):
    """A receipt block claimed an operation key and ended without ``save()``.

    Raised on leaving the block so the caller's transaction (which holds the
    claim and, presumably, the effect) is rolled back rather than committed
    without an outcome.
    """


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
        name: str | None = getattr(current, "constraint_name", None)  # asyncpg
        if name:
            return name
        diag = getattr(current, "diag", None)  # psycopg
        if diag is not None:
            diag_name: str | None = getattr(diag, "constraint_name", None)
            if diag_name:
                return diag_name
        current = getattr(current, "orig", None) or current.__cause__
    return None
