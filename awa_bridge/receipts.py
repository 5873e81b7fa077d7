"""Receipts: make a business effect safe to repeat (docs/howto/receipts.md).

At-least-once delivery means a handler can run twice: a worker that commits
an effect and dies before its job is marked completed gets the job rescued
and run again. A receipt records an operation key (``tenant`` + a stable
business key such as ``"invoice:42:email"``) with a fingerprint of its
payload and the outcome, in the SAME transaction as the effect:

    with conn.transaction():                       # the caller's transaction
        with receipt(conn, "acme", f"refund:{order_id}", payload) as r:
            if r.recorded:
                return r.outcome                   # a repeat: reuse, don't redo
            refund_id = refunds.create(conn, order_id, amount)
            r.save({"refund_id": refund_id})

or, the same thing as a function: ``record_effect(conn, "acme", key, payload,
lambda: ...)``. The first attempt claims the key (a row with no outcome yet)
and ``save`` records the outcome; the effect and the receipt commit or roll
back together. A repeat with the same key and payload gets ``r.recorded``
and the recorded outcome. The same key with a different payload raises
``ReceiptConflict``: reusing a key for different work is a bug, never a
silent repeat. Concurrent first attempts serialize on the key: the second
waits for the first's transaction, then sees its receipt (or, if it rolled
back, claims the key itself).

External effects (an email or payment API) cannot join the transaction:
``external_effect(conn, tenant, key, payload, send, idempotent=...,
record=...)`` (``external_effect_async`` for async connections, defined in
``receipts_external``) commits the claim, calls ``send(idempotency_key)``
and records the outcome with the caller's business effect. A repeat after
an unknown outcome re-sends with the same key when the provider is declared
idempotent; otherwise it raises ``OutcomeUnknown`` (report it, never blindly
retry: ``park_for_reconciliation`` parks the job), and after checking with
the provider an operator records what happened with ``resolve_receipt``, or
``release_receipt`` when the provider never acted.

Works on every connection the bridge supports (psycopg, SQLAlchemy, Django;
asyncpg, psycopg async and SQLAlchemy async with ``async with`` /
``record_effect_async``). At READ COMMITTED (the default) concurrent first
attempts serialize as described; at REPEATABLE READ or SERIALIZABLE the
second one gets a serialization failure instead, to be retried as usual.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import blake3

from .args import canonical_json
from .drivers import detect_async, detect_sync
from .errors import AwaError, OutcomeUnknown, ReceiptConflict, ReceiptNotFound, ReceiptNotSaved, ValidationError
from .sql import QUERIES
from .validation import check_text

__all__ = [
    "DEFAULT_PARK_SECONDS",
    "AsyncReceipt",
    "ExternalEffect",
    "Receipt",
    "ReceiptRecord",
    "external_effect",
    "external_effect_async",
    "fingerprint",
    "get_receipt",
    "idempotency_key",
    "park_for_reconciliation",
    "park_for_reconciliation_async",
    "prune_receipts",
    "receipt",
    "record_effect",
    "record_effect_async",
    "release_receipt",
    "resolve_receipt",
]

MAX_TENANT_LENGTH = 200
MAX_KEY_LENGTH = 1000
_FINGERPRINT_DOMAIN = b"awa-receipt-payload-v1\x00"
_IDEMPOTENCY_DOMAIN = b"awa-receipt-idempotency-v1\x00"
# begin_receipt returns no row only when a concurrent first attempt committed
# while this statement waited for it; the next run sees that receipt.
_BEGIN_TRIES = 5


# -- keys and fingerprints -----------------------------------------------------------


def _check_key(tenant: Any, operation_key: Any) -> None:
    for field, value, limit in (
        ("tenant", tenant, MAX_TENANT_LENGTH),
        ("operation_key", operation_key, MAX_KEY_LENGTH),
    ):
        if not isinstance(value, str):
            raise ValidationError(field, f"must be a string, got {type(value).__name__}")
        if not 1 <= len(value) <= limit:
            raise ValidationError(field, f"must be 1 to {limit} characters long, got {len(value)}")
        check_text(field, value)  # no NUL, no lone surrogate: PostgreSQL text takes neither


def fingerprint(payload: Any) -> bytes:
    """32-byte BLAKE3 fingerprint of a payload.

    JSON-like values (dicts, lists, strings, numbers...), dataclasses and
    pydantic models are hashed as canonical JSON, so key order does not
    matter; ``bytes`` are hashed as they are.
    """
    if isinstance(payload, (bytes, bytearray, memoryview)):
        data = b"bytes\x00" + bytes(payload)
    else:
        if dataclasses.is_dataclass(payload) and not isinstance(payload, type):
            payload = dataclasses.asdict(payload)
        elif callable(getattr(payload, "model_dump", None)) and not isinstance(payload, type):
            payload = payload.model_dump(mode="json")
        data = b"json\x00" + canonical_json(payload, "payload").encode("utf-8")
    return blake3.blake3(_FINGERPRINT_DOMAIN + data).digest()


def idempotency_key(tenant: str, operation_key: str) -> str:
    """A short, fixed-length key for providers (``awa-`` + 32 hex digits), stable for (tenant, key)."""
    _check_key(tenant, operation_key)
    digest = blake3.blake3(_IDEMPOTENCY_DOMAIN + tenant.encode() + b"\x00" + operation_key.encode())
    return "awa-" + digest.hexdigest(length=16)


# -- the receipt objects -----------------------------------------------------------


@dataclass
class _State:
    tenant: str
    operation_key: str
    fingerprint: bytes
    recorded: bool
    outcome: Any = None
    created_at: datetime | None = None
    recorded_at: datetime | None = None
    saved: bool = False


class _Base:
    def __init__(self, state: _State) -> None:
        self._state = state

    @property
    def tenant(self) -> str:
        return self._state.tenant

    @property
    def operation_key(self) -> str:
        return self._state.operation_key

    @property
    def fingerprint(self) -> bytes:
        return self._state.fingerprint

    @property
    def recorded(self) -> bool:
        """True when an earlier attempt already recorded this operation: use ``outcome``, skip the effect."""
        return self._state.recorded

    @property
    def outcome(self) -> Any:
        """The recorded outcome (JSON value), or what ``save`` recorded in this attempt."""
        return self._state.outcome

    @property
    def created_at(self) -> datetime | None:
        return self._state.created_at

    @property
    def idempotency_key(self) -> str:
        """Pass this to an external provider as its idempotency key."""
        return idempotency_key(self.tenant, self.operation_key)

    def _save_params(self, outcome: Any) -> dict[str, Any]:
        if self._state.recorded:
            raise AwaError(
                f"operation key {self.operation_key!r} is already recorded; reuse r.outcome instead of saving again"
            )
        if self._state.saved:
            raise AwaError(f"operation key {self.operation_key!r}: save() was already called")
        text = canonical_json(outcome, "outcome")
        return {"tenant": self.tenant, "operation_key": self.operation_key, "outcome": text}

    def _saved(self, rows: list[dict[str, Any]], outcome: Any) -> Any:
        if not rows:
            raise AwaError(
                f"operation key {self.operation_key!r}: the claimed receipt is gone (was its transaction rolled back?)"
            )
        self._state.saved = True
        self._state.outcome = outcome
        self._state.recorded_at = rows[0]["recorded_at"]
        return outcome

    def _check_exit(self, failed: bool) -> None:
        if not failed and not self._state.recorded and not self._state.saved:
            raise ReceiptNotSaved(
                f"operation key {self.operation_key!r} (tenant {self.tenant!r}) was claimed but the block ended "
                "without r.save(outcome); roll the transaction back, or save the outcome"
            )

    def __repr__(self) -> str:
        status = "recorded" if self.recorded else ("saved" if self._state.saved else "claimed")
        return f"<{type(self).__name__} {self.tenant}/{self.operation_key} {status}>"


class Receipt(_Base):
    """The receipt of one operation key inside a ``with receipt(...)`` block (sync connections)."""

    def __init__(self, state: _State, conn: Any) -> None:
        super().__init__(state)
        self._conn = conn

    def save(self, outcome: Any) -> Any:
        """Record the outcome (any JSON value) in the caller's transaction; returns it."""
        params = self._save_params(outcome)
        return self._saved(detect_sync(self._conn).fetch_all(QUERIES["save_receipt"], params), outcome)


class AsyncReceipt(_Base):
    """The receipt of one operation key inside an ``async with receipt(...)`` block."""

    def __init__(self, state: _State, conn: Any) -> None:
        super().__init__(state)
        self._conn = conn

    async def save(self, outcome: Any) -> Any:
        """Record the outcome (any JSON value) in the caller's transaction; returns it."""
        params = self._save_params(outcome)
        return self._saved(await detect_async(self._conn).fetch_all(QUERIES["save_receipt"], params), outcome)


def _interpret(tenant: str, operation_key: str, fp: bytes, rows: list[dict[str, Any]]) -> _State:
    row = rows[0]
    recorded_fp = bytes(row["payload_fingerprint"])
    if recorded_fp != fp:
        raise ReceiptConflict(tenant, operation_key, recorded_fp, fp, pending=row["recorded_at"] is None)
    if row["claimed"]:
        return _State(tenant, operation_key, fp, recorded=False, created_at=row["created_at"])
    if row["recorded_at"] is None:
        raise OutcomeUnknown(tenant, operation_key, row["created_at"])
    return _State(
        tenant,
        operation_key,
        fp,
        recorded=True,
        outcome=json.loads(row["outcome"]),
        created_at=row["created_at"],
        recorded_at=row["recorded_at"],
    )


def _no_receipt(tenant: str, operation_key: str) -> AwaError:
    return AwaError(
        f"operation key {operation_key!r} (tenant {tenant!r}): could not claim or read its receipt after "
        f"{_BEGIN_TRIES} tries (it keeps being claimed and rolled back concurrently)"
    )


class _ReceiptScope:
    """What ``receipt()`` returns: a context manager, sync (``with``) or async (``async with``)."""

    def __init__(self, conn: Any, tenant: str, operation_key: str, payload: Any) -> None:
        _check_key(tenant, operation_key)
        self._conn = conn
        self._tenant, self._key, self._fingerprint = tenant, operation_key, fingerprint(payload)
        self._params = {"tenant": tenant, "operation_key": operation_key, "fingerprint": self._fingerprint}
        self._receipt: Any = None

    def __enter__(self) -> Receipt:
        driver = detect_sync(self._conn)
        for _ in range(_BEGIN_TRIES):
            rows = driver.fetch_all(QUERIES["begin_receipt"], self._params)
            if rows:
                break
        else:
            raise _no_receipt(self._tenant, self._key)
        receipt = Receipt(_interpret(self._tenant, self._key, self._fingerprint, rows), self._conn)
        self._receipt = receipt
        return receipt

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._receipt._check_exit(exc_type is not None)

    async def __aenter__(self) -> AsyncReceipt:
        driver = detect_async(self._conn)
        for _ in range(_BEGIN_TRIES):
            rows = await driver.fetch_all(QUERIES["begin_receipt"], self._params)
            if rows:
                break
        else:
            raise _no_receipt(self._tenant, self._key)
        receipt = AsyncReceipt(_interpret(self._tenant, self._key, self._fingerprint, rows), self._conn)
        self._receipt = receipt
        return receipt

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._receipt._check_exit(exc_type is not None)


def receipt(conn: Any, tenant: str, operation_key: str, payload: Any) -> _ReceiptScope:
    """Claim ``(tenant, operation_key)`` for ``payload`` in the caller's transaction, or find its receipt.

    Use as ``with receipt(conn, ...) as r`` (sync connections) or
    ``async with receipt(conn, ...) as r`` (async ones). Inside, ``r.recorded``
    says whether an earlier attempt already recorded the outcome
    (``r.outcome``); otherwise do the effect and ``r.save(outcome)``
    (``await r.save(...)`` in async code). Leaving the block without saving
    raises ``ReceiptNotSaved``; an exception leaves everything to the
    caller's transaction. Raises ``ReceiptConflict`` (same key, different
    payload) and ``OutcomeUnknown`` (claimed earlier, never recorded).
    """
    return _ReceiptScope(conn, tenant, operation_key, payload)


def record_effect(conn: Any, tenant: str, operation_key: str, payload: Any, effect: Callable[[], Any]) -> Any:
    """Run ``effect()`` once per operation key and return its outcome (recorded, or reused on a repeat).

    ``effect`` runs inside the caller's transaction (use the same ``conn`` for
    its writes) and returns a JSON value, which is recorded.
    """
    with receipt(conn, tenant, operation_key, payload) as r:
        if r.recorded:
            return r.outcome
        return r.save(effect())


async def record_effect_async(
    conn: Any, tenant: str, operation_key: str, payload: Any, effect: Callable[[], Awaitable[Any] | Any]
) -> Any:
    """Async form of ``record_effect``; ``effect`` may be a coroutine function."""
    async with receipt(conn, tenant, operation_key, payload) as r:
        if r.recorded:
            return r.outcome
        result = effect()
        if inspect.isawaitable(result):
            result = await result
        return await r.save(result)


# -- inspection, reconciliation, retention ------------------------------------------------


@dataclass(frozen=True)
class ReceiptRecord:
    """A stored receipt. ``outcome`` is ``None`` and ``pending`` true when it was never recorded."""

    tenant: str
    operation_key: str
    payload_fingerprint: bytes
    outcome: Any
    created_at: datetime
    recorded_at: datetime | None

    @property
    def pending(self) -> bool:
        return self.recorded_at is None


def get_receipt(conn: Any, tenant: str, operation_key: str) -> ReceiptRecord | None:
    """Read a receipt (sync connection), or None."""
    _check_key(tenant, operation_key)
    rows = detect_sync(conn).fetch_all(QUERIES["get_receipt"], {"tenant": tenant, "operation_key": operation_key})
    if not rows:
        return None
    row = rows[0]
    return ReceiptRecord(
        tenant=tenant,
        operation_key=operation_key,
        payload_fingerprint=bytes(row["payload_fingerprint"]),
        outcome=None if row["outcome"] is None else json.loads(row["outcome"]),
        created_at=row["created_at"],
        recorded_at=row["recorded_at"],
    )


def resolve_receipt(conn: Any, tenant: str, operation_key: str, payload: Any, outcome: Any) -> ReceiptRecord:
    """Record the outcome of a pending receipt after reconciling it with the provider.

    Raises ``ReceiptNotFound`` if there is no receipt, ``ReceiptConflict`` if the
    payload differs, and ``AwaError`` if it already has an outcome.
    """
    existing = get_receipt(conn, tenant, operation_key)
    if existing is None:
        raise ReceiptNotFound(f"no receipt for operation key {operation_key!r} (tenant {tenant!r})")
    fp = fingerprint(payload)
    if existing.payload_fingerprint != fp:
        raise ReceiptConflict(tenant, operation_key, existing.payload_fingerprint, fp, pending=existing.pending)
    text = canonical_json(outcome, "outcome")
    params = {"tenant": tenant, "operation_key": operation_key, "outcome": text}
    rows = detect_sync(conn).fetch_all(QUERIES["save_receipt"], params)
    if not rows:
        raise AwaError(f"operation key {operation_key!r} (tenant {tenant!r}) already has a recorded outcome")
    return dataclasses.replace(existing, outcome=outcome, recorded_at=rows[0]["recorded_at"])


def release_receipt(conn: Any, tenant: str, operation_key: str, payload: Any) -> None:
    """Forget a pending receipt after reconciling that the provider never acted on it.

    The next attempt then claims the key and sends afresh. Raises
    ``ReceiptNotFound`` unless a receipt without outcome exists for that key
    and payload (a recorded outcome is never released; a different payload is
    ``ReceiptConflict``).
    """
    existing = get_receipt(conn, tenant, operation_key)
    fp = fingerprint(payload)
    if existing is not None and existing.payload_fingerprint != fp:
        raise ReceiptConflict(tenant, operation_key, existing.payload_fingerprint, fp, pending=existing.pending)
    params = {"tenant": tenant, "operation_key": operation_key, "fingerprint": fp}
    if existing is None or not detect_sync(conn).fetch_all(QUERIES["release_receipt"], params):
        state = "no receipt" if existing is None else "no pending receipt (its outcome is recorded)"
        raise ReceiptNotFound(f"{state} for operation key {operation_key!r} (tenant {tenant!r})")


def prune_receipts(conn: Any, older_than_seconds: float, tenant: str | None = None) -> int:
    """Delete recorded receipts created more than ``older_than_seconds`` ago; returns how many.

    Pending receipts (outcome unknown) are kept until reconciled. Keep
    receipts at least as long as a job can still be retried.
    """
    if isinstance(older_than_seconds, bool) or not isinstance(older_than_seconds, (int, float)):
        raise ValidationError("older_than_seconds", f"must be a number of seconds, got {older_than_seconds!r}")
    if older_than_seconds < 0:
        raise ValidationError("older_than_seconds", f"must be >= 0, got {older_than_seconds}")
    if tenant is not None:
        _check_key(tenant, "-")
    params = {"older_than_seconds": float(older_than_seconds), "tenant": tenant}
    return int(detect_sync(conn).fetch_all(QUERIES["prune_receipts"], params)[0]["deleted"])


# The external-effect helper lives in its own module (it needs the pieces above).
from .receipts_external import (  # noqa: E402
    DEFAULT_PARK_SECONDS,
    ExternalEffect,
    external_effect,
    external_effect_async,
    park_for_reconciliation,
    park_for_reconciliation_async,
)
