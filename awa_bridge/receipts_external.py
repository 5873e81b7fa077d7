"""External effects guarded by a receipt: ``external_effect`` (docs/design.md, Receipts; docs/howto/receipts.md).

An email or payment API cannot join a database transaction, so the receipt
of such an effect is written in two short transactions around the request:

1. claim the operation key and COMMIT the claim: a process that dies after
   the request now leaves a trace (a receipt without outcome);
2. call ``send(idempotency_key)``: the provider gets the operation key (as
   ``idempotency_key(tenant, key)``, ``awa-`` + 32 hex digits) as its
   idempotency key;
3. record the outcome and the caller's business effect (``record(outcome)``,
   written on the same connection) in ONE transaction.

A repeat that finds the outcome recorded returns it without a request. A
repeat that finds a claim without outcome (the crash window between 1 and
3) cannot know whether the provider acted. With ``idempotent=True`` (the
caller declares that the provider honours idempotency keys, see
docs/howto/receipts.md for what that must mean) it sends again with the same
key: the provider answers with the original result instead of acting twice,
and that answer is recorded. With ``idempotent=False`` it raises
``OutcomeUnknown`` and never sends: a job handler passes that to
``park_for_reconciliation``, which parks the job in ``waiting_external``
until someone has asked the provider and settled the receipt
(``resolve_receipt`` or ``release_receipt``, then ``retry_external``).

Because the claim must really commit before the request, the connection must
not be inside a transaction when the helper is called (``ValidationError``
naming ``conn`` otherwise, before anything is written).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from .args import canonical_json
from .callbacks import WaitForCallback
from .drivers import AsyncDriver, SyncDriver, detect_async, detect_sync
from .drivers.transactions import committed_transaction, committed_transaction_async
from .errors import AwaError, OutcomeUnknown, ValidationError
from .receipts import _BEGIN_TRIES, _check_key, _interpret, _no_receipt, fingerprint, idempotency_key
from .sql import QUERIES

__all__ = [
    "DEFAULT_PARK_SECONDS",
    "ExternalEffect",
    "external_effect",
    "external_effect_async",
    "park_for_reconciliation",
    "park_for_reconciliation_async",
]

# How long a job parked on an unknown outcome waits for an operator before the
# maintenance leader times the wait out (the attempt is spent; the job is
# retried, parks again, or fails when its attempts are used up).
DEFAULT_PARK_SECONDS = 7 * 24 * 3600.0

Status = Literal["sent", "resent", "reused"]


@dataclass(frozen=True)
class ExternalEffect:
    """What ``external_effect`` did.

    ``status``: ``"sent"`` (first request for this key), ``"resent"`` (a
    repeat after an unknown outcome, same key, idempotent provider) or
    ``"reused"`` (the outcome was already recorded; no request made).
    """

    outcome: Any
    idempotency_key: str
    status: Status

    @property
    def requested(self) -> bool:
        """True when this call made a request to the provider."""
        return self.status != "reused"


@dataclass(frozen=True)
class _Call:
    params: dict[str, Any]
    key: str
    idempotent: bool

    @property
    def tenant(self) -> str:
        return str(self.params["tenant"])

    @property
    def operation_key(self) -> str:
        return str(self.params["operation_key"])


def _prepare(tenant: Any, operation_key: Any, payload: Any, send: Any, idempotent: Any, record: Any) -> _Call:
    _check_key(tenant, operation_key)
    fp = fingerprint(payload)
    if not isinstance(idempotent, bool):
        raise ValidationError(
            "idempotent", f"must be True or False (does the provider honour idempotency keys?), got {idempotent!r}"
        )
    if not callable(send):
        raise ValidationError("send", f"must be a callable taking the idempotency key, got {type(send).__name__}")
    if record is not None and not callable(record):
        raise ValidationError("record", f"must be a callable taking the outcome, or None, got {type(record).__name__}")
    params = {"tenant": tenant, "operation_key": operation_key, "fingerprint": fp}
    return _Call(params, idempotency_key(tenant, operation_key), idempotent)


def _after_claim(call: _Call, rows: list[dict[str, Any]]) -> ExternalEffect | Status:
    """The recorded outcome, or whether the request to make is a first send or a re-send."""
    try:
        state = _interpret(call.tenant, call.operation_key, call.params["fingerprint"], rows)
    except OutcomeUnknown:
        if not call.idempotent:
            raise  # the provider may have acted and would act again: report, never re-send
        return "resent"
    if state.recorded:
        return ExternalEffect(state.outcome, call.key, "reused")
    return "sent"


def _save_params(call: _Call, outcome: Any) -> dict[str, Any]:
    return {"tenant": call.tenant, "operation_key": call.operation_key, "outcome": canonical_json(outcome, "outcome")}


def _not_saved(call: _Call, rows: list[dict[str, Any]]) -> ExternalEffect:
    """save_receipt matched nothing: a concurrent attempt or an operator settled the key first; theirs stands."""
    if rows and rows[0]["recorded_at"] is not None:
        state = _interpret(call.tenant, call.operation_key, call.params["fingerprint"], rows)
        return ExternalEffect(state.outcome, call.key, "reused")
    raise AwaError(
        f"operation key {call.operation_key!r} (tenant {call.tenant!r}): its receipt was released or pruned "
        "while the provider was being called; the outcome was not recorded"
    )


def _claim_sync(driver: SyncDriver, call: _Call) -> list[dict[str, Any]]:
    for _ in range(_BEGIN_TRIES):
        rows = driver.fetch_all(QUERIES["begin_receipt"], call.params)
        if rows:
            return rows
    raise _no_receipt(call.tenant, call.operation_key)


async def _claim_async(driver: AsyncDriver, call: _Call) -> list[dict[str, Any]]:
    for _ in range(_BEGIN_TRIES):
        rows = await driver.fetch_all(QUERIES["begin_receipt"], call.params)
        if rows:
            return rows
    raise _no_receipt(call.tenant, call.operation_key)


def _lookup_params(call: _Call) -> dict[str, Any]:
    return {"tenant": call.tenant, "operation_key": call.operation_key}


def external_effect(
    conn: Any,
    tenant: str,
    operation_key: str,
    payload: Any,
    send: Callable[[str], Any],
    *,
    idempotent: bool,
    record: Callable[[Any], Any] | None = None,
) -> ExternalEffect:
    """Make the external request for ``(tenant, operation_key)`` at most once per recorded outcome.

    ``send(idempotency_key)`` makes the request (pass the key to the provider
    as its idempotency key) and returns the provider's answer as a JSON
    value; a definite refusal is an answer too. ``record(outcome)``, if
    given, writes the business effect on ``conn``; it runs in the transaction
    that records the outcome, so both commit or neither. ``conn`` (psycopg,
    SQLAlchemy ``Connection``/``Session``, Django's connection) must be
    outside any transaction. ``idempotent``: whether the provider honours
    idempotency keys; it decides what a repeat after an unknown outcome does
    (re-send with the same key, or raise ``OutcomeUnknown``). Raises
    ``ReceiptConflict`` (same key, different payload) before any request.
    An exception from ``send`` leaves the claim pending (outcome unknown).
    """
    call = _prepare(tenant, operation_key, payload, send, idempotent, record)
    with committed_transaction(conn):  # checks the connection type and that no transaction is open
        driver = detect_sync(conn)
        decided = _after_claim(call, _claim_sync(driver, call))
    if isinstance(decided, ExternalEffect):
        return decided
    outcome = send(call.key)
    params = _save_params(call, outcome)
    with committed_transaction(conn):
        if not driver.fetch_all(QUERIES["save_receipt"], params):
            return _not_saved(call, driver.fetch_all(QUERIES["get_receipt"], _lookup_params(call)))
        if record is not None:
            record(outcome)
    return ExternalEffect(outcome, call.key, decided)


async def _maybe_await(value: Awaitable[Any] | Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def external_effect_async(
    conn: Any,
    tenant: str,
    operation_key: str,
    payload: Any,
    send: Callable[[str], Awaitable[Any] | Any],
    *,
    idempotent: bool,
    record: Callable[[Any], Awaitable[Any] | Any] | None = None,
) -> ExternalEffect:
    """Async form of ``external_effect`` (asyncpg, psycopg ``AsyncConnection``, SQLAlchemy async).

    ``send`` and ``record`` may be coroutine functions.
    """
    call = _prepare(tenant, operation_key, payload, send, idempotent, record)
    async with committed_transaction_async(conn):  # checks the connection type and that no transaction is open
        driver = detect_async(conn)
        decided = _after_claim(call, await _claim_async(driver, call))
    if isinstance(decided, ExternalEffect):
        return decided
    outcome = await _maybe_await(send(call.key))
    params = _save_params(call, outcome)
    async with committed_transaction_async(conn):
        if not await driver.fetch_all(QUERIES["save_receipt"], params):
            return _not_saved(call, await driver.fetch_all(QUERIES["get_receipt"], _lookup_params(call)))
        if record is not None:
            await _maybe_await(record(outcome))
    return ExternalEffect(outcome, call.key, decided)


# -- parking a job whose effect has an unknown outcome ------------------------------------


def _park_note(unknown: OutcomeUnknown) -> dict[str, Any]:
    if not isinstance(unknown, OutcomeUnknown):
        raise ValidationError("unknown", f"must be the OutcomeUnknown that was raised, got {type(unknown).__name__}")
    return {
        "outcome_unknown": {
            "tenant": unknown.tenant,
            "operation_key": unknown.operation_key,
            "idempotency_key": idempotency_key(unknown.tenant, unknown.operation_key),
            "started_at": str(unknown.started_at),
        }
    }


def park_for_reconciliation(
    job: Any, unknown: OutcomeUnknown, timeout: float = DEFAULT_PARK_SECONDS
) -> WaitForCallback:
    """From a sync handler: ``return park_for_reconciliation(job, exc)`` parks the job in ``waiting_external``.

    The job's metadata gets ``outcome_unknown`` (tenant, operation key,
    idempotency key, when the claim was made) so operators can find it; a
    callback with ``timeout`` seconds is registered for the wake-up: settle
    the receipt (``resolve_receipt`` / ``release_receipt``), then
    ``retry_external(conn, job.callback_id)`` and the job runs again.
    """
    note = _park_note(unknown)
    job.update_metadata(note)
    return WaitForCallback(job.register_callback(timeout))


async def park_for_reconciliation_async(
    job: Any, unknown: OutcomeUnknown, timeout: float = DEFAULT_PARK_SECONDS
) -> WaitForCallback:
    """From an async handler: ``return await park_for_reconciliation_async(job, exc)``."""
    note = _park_note(unknown)
    job.update_metadata(note)
    return WaitForCallback(await job.register_callback(timeout))
