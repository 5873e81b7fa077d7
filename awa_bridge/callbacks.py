"""External callbacks: park a job until another system answers.

Inside a handler::

    callback_id = await job.register_callback(timeout=3600)   # written before it is handed out
    await payments.start(order, notify_url=f"https://app.example/callbacks/{callback_id}")
    return WaitForCallback(callback_id)                        # frees the worker slot

From any process, when the answer arrives::

    complete_external(url_or_conn, callback_id, {"status": "paid"})   # -> completed
    fail_external(url_or_conn, callback_id, "card declined")          # -> failed
    retry_external(url_or_conn, callback_id)                          # -> runs again

An unknown id raises ``CallbackNotFound``; a callback that was already
resolved or whose wait timed out raises ``CallbackNotWaiting`` (a subclass).
Either way nothing changes. Waits past their timeout are rescued by the
maintenance leader: the attempt is spent and the job retried or failed.

For HTTP receivers, ``sign_callback`` / ``verify_callback`` implement Awa's
signature scheme (a BLAKE3 keyed hash of the callback id, compared in
constant time), so a receiver built here accepts the signatures Awa's own
workers send and vice versa. ``sign_request`` / ``verify_request`` are an
opt-in stronger scheme that also covers the action, a timestamp and the body.

A callback id is valid only for the attempt that registered it: once that
attempt ends (fails, is retried, rescued or released) its id is refused, and
after the next attempt starts it is unknown (see ``complete_external`` in
awa_bridge/sql/queries.sql).
"""

from __future__ import annotations

import hmac
import uuid
from typing import Any

import blake3

from .admin import _Op, _run, _run_async
from .args import canonical_json
from .errors import CallbackNotFound, CallbackNotWaiting, ValidationError
from .validation import check_text

SIGNATURE_HEADER = "X-Awa-Signature"
DEFAULT_PATH_PREFIX = "/api/callbacks"
MAX_TIMEOUT_SECONDS = 30 * 24 * 3600.0


class WaitForCallback:
    """Returned by a handler: park the job in ``waiting_external`` until the callback resolves."""

    def __init__(self, callback_id: str) -> None:
        self.callback_id = str(callback_id)

    def __repr__(self) -> str:
        return f"WaitForCallback({self.callback_id!r})"


def check_timeout(timeout: Any) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT_SECONDS:
        raise ValidationError(
            "timeout", f"must be a number of seconds in (0, {MAX_TIMEOUT_SECONDS:.0f}], got {timeout!r}"
        )
    return float(timeout)


def _check_id(callback_id: Any) -> str:
    try:
        return str(uuid.UUID(str(callback_id)))
    except ValueError:
        raise ValidationError("callback_id", f"must be a UUID, got {callback_id!r}") from None


def _resolution(query: str, callback_id: Any, params: dict[str, Any]) -> _Op[dict[str, Any]]:
    cid = _check_id(callback_id)

    def finish(rows: list[dict[str, Any]]) -> dict[str, Any]:
        if not rows:
            raise CallbackNotFound(cid)
        row = rows[0]
        if row["id"] is None:
            raise CallbackNotWaiting(cid, row["target_id"], row["prior_state"], bool(row["expired"]))
        return row

    return _Op(query, {"callback_id": cid, **params}, finish)


def _complete_op(callback_id: Any, payload: Any) -> _Op[dict[str, Any]]:
    return _resolution("complete_external", callback_id, {"payload": canonical_json(payload, "payload")})


def _fail_op(callback_id: Any, error: Any) -> _Op[dict[str, Any]]:
    if not isinstance(error, str) or not error:
        raise ValidationError("error", f"must be a non-empty message, got {error!r}")
    check_text("error", error)
    return _resolution("fail_external", callback_id, {"error": error})


def _retry_op(callback_id: Any) -> _Op[dict[str, Any]]:
    return _resolution("retry_external", callback_id, {})


def complete_external(conn_or_url: Any, callback_id: str, payload: Any = None) -> dict[str, Any]:
    """Complete the waiting job; ``payload`` (JSON) is kept in its metadata as ``callback_result``."""
    return _run(conn_or_url, _complete_op(callback_id, payload))


def fail_external(conn_or_url: Any, callback_id: str, error: str) -> dict[str, Any]:
    """Fail the waiting job for good, recording ``error``."""
    return _run(conn_or_url, _fail_op(callback_id, error))


def retry_external(conn_or_url: Any, callback_id: str) -> dict[str, Any]:
    """Run the waiting job again now (or fail it when its attempts are spent)."""
    return _run(conn_or_url, _retry_op(callback_id))


async def complete_external_async(conn_or_url: Any, callback_id: str, payload: Any = None) -> dict[str, Any]:
    return await _run_async(conn_or_url, _complete_op(callback_id, payload))


async def fail_external_async(conn_or_url: Any, callback_id: str, error: str) -> dict[str, Any]:
    return await _run_async(conn_or_url, _fail_op(callback_id, error))


async def retry_external_async(conn_or_url: Any, callback_id: str) -> dict[str, Any]:
    return await _run_async(conn_or_url, _retry_op(callback_id))


# -- signatures for HTTP receivers ---------------------------------------------------


def _check_secret(secret: bytes) -> bytes:
    if not isinstance(secret, (bytes, bytearray)) or len(secret) != 32:
        raise ValidationError("secret", "must be 32 bytes (BLAKE3 keyed hashing), e.g. bytes.fromhex(64 hex digits)")
    return bytes(secret)


def sign_callback(secret: bytes, callback_id: str) -> str:
    """The hex signature of a callback id: BLAKE3 keyed with the 32-byte secret."""
    return blake3.blake3(str(callback_id).encode("utf-8"), key=_check_secret(secret)).hexdigest()


def verify_callback(secret: bytes, callback_id: str, signature: str) -> bool:
    """Constant-time check of a signature from the ``X-Awa-Signature`` header."""
    expected = sign_callback(secret, callback_id)
    return hmac.compare_digest(expected.encode("ascii"), str(signature).strip().lower().encode("ascii", "replace"))


def sign_request(secret: bytes, callback_id: str, action: str, timestamp: int, body: bytes) -> str:
    """The opt-in request signature: BLAKE3 keyed over id, action, timestamp and body.

    The signed message is ``awa-callback-v1\n{callback_id}\n{action}\n{timestamp}\n``
    followed by the exact body bytes, so a captured request can be neither
    replayed as another action or body nor, past the receiver's ``max_age``,
    at all. Send it in ``X-Awa-Signature`` with the timestamp (Unix seconds)
    in ``X-Awa-Timestamp``.
    """
    if action not in ("complete", "fail", "retry"):
        raise ValidationError("action", f"must be complete, fail or retry, got {action!r}")
    if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
        raise ValidationError("timestamp", f"must be Unix seconds (a non-negative integer), got {timestamp!r}")
    if not isinstance(body, (bytes, bytearray)):
        raise ValidationError("body", f"must be the exact body bytes, got {type(body).__name__}")
    head = f"awa-callback-v1\n{callback_id}\n{action}\n{timestamp}\n".encode()
    return blake3.blake3(head + bytes(body), key=_check_secret(secret)).hexdigest()


def verify_request(secret: bytes, callback_id: str, action: str, timestamp: int, body: bytes, signature: str) -> bool:
    """Constant-time check of a ``sign_request`` signature (the timestamp's age is the caller's to check)."""
    expected = sign_request(secret, callback_id, action, timestamp, body)
    return hmac.compare_digest(expected.encode("ascii"), str(signature).strip().lower().encode("ascii", "replace"))


def callback_url(base: str, callback_id: str, action: str, prefix: str = DEFAULT_PATH_PREFIX) -> str:
    """``{base}{prefix}/{callback_id}/{action}`` for complete, fail or retry (Awa's layout)."""
    if action not in ("complete", "fail", "retry"):
        raise ValidationError("action", f"must be complete, fail or retry, got {action!r}")
    return f"{base.rstrip('/')}/{prefix.strip('/')}/{callback_id}/{action}"
