"""What a handler can return (or raise) besides plain success, as in awa.

``RetryAfter``, ``Snooze`` and ``Cancel`` may be returned or raised;
``TerminalError`` is raised. Any other exception is retried with backoff
until attempts run out.
"""

from __future__ import annotations

import random
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..callbacks import WaitForCallback
from ..errors import AwaError

MAX_BACKOFF_SECONDS = 24 * 3600.0


class RetryAfter(AwaError):
    """Retry after ``seconds``; spends the attempt."""

    def __init__(self, seconds: float, reason: str = "") -> None:
        if seconds < 0:
            raise ValueError("RetryAfter seconds must be >= 0")
        self.seconds = float(seconds)
        self.reason = reason
        super().__init__(reason or f"retry after {seconds} s")


class Snooze(AwaError):
    """Run again after ``seconds`` WITHOUT spending an attempt."""

    def __init__(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("Snooze seconds must be >= 0")
        self.seconds = float(seconds)
        super().__init__(f"snoozed for {seconds} s")


class Cancel(AwaError):
    """Stop for good: the job becomes ``cancelled``."""

    def __init__(self, reason: str = "cancelled by handler") -> None:
        self.reason = reason
        super().__init__(reason)


class TerminalError(AwaError):
    """Fail at once, whatever attempts remain."""


def backoff_seconds(attempt: int, rng: random.Random | None = None) -> float:
    """``min(2^attempt s + up to 25% jitter, 24 h)``."""
    base = 2.0 ** min(attempt, 32)
    jitter = (rng or random).uniform(0, 0.25 * base)
    return min(base + jitter, MAX_BACKOFF_SECONDS)


@dataclass(frozen=True)
class Outcome:
    """The result of one attempt, ready for the completer."""

    state: str  # completed | retryable | failed | cancelled | scheduled | available
    delay: float = 0.0
    error: dict[str, Any] | None = None
    refund: bool = False  # give the attempt back (snooze)
    label: str = field(default="completed")  # for logs and hooks
    callback_id: str | None = None  # waiting_external: the callback the job parks on


def error_record(exc: BaseException | None, attempt: int, message: str | None = None) -> dict[str, Any]:
    """The entry appended to ``errors``: message, type, traceback text, attempt, time."""
    if exc is None:
        kind, text, tb = "Error", message or "", ""
    else:
        kind = type(exc).__name__
        text = message or str(exc) or kind
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return {
        "error": text,
        "type": kind,
        "traceback": tb,
        "attempt": attempt,
        "at": datetime.now(UTC).isoformat(),
    }


def outcome_of_result(result: Any, attempt: int, max_attempts: int) -> Outcome:
    """Map a handler's return value."""
    if isinstance(result, (RetryAfter, Snooze, Cancel)):
        return outcome_of_exception(result, attempt, max_attempts)
    if isinstance(result, WaitForCallback):
        return Outcome("waiting_external", label="waiting", callback_id=result.callback_id)
    return Outcome("completed")


def outcome_of_exception(exc: BaseException, attempt: int, max_attempts: int) -> Outcome:
    """Map what a handler raised (or returned, for the control-flow types)."""
    if isinstance(exc, Snooze):
        state = "scheduled" if exc.seconds > 0 else "available"
        return Outcome(state, delay=exc.seconds, refund=True, label="snoozed")
    if isinstance(exc, Cancel):
        return Outcome("cancelled", error=error_record(exc, attempt, exc.reason), label="cancelled")
    if isinstance(exc, TerminalError):
        return Outcome("failed", error=error_record(exc, attempt), label="exhausted")
    delay = exc.seconds if isinstance(exc, RetryAfter) else backoff_seconds(attempt)
    if attempt >= max_attempts:
        return Outcome("failed", error=error_record(exc, attempt), label="exhausted")
    return Outcome("retryable", delay=delay, error=error_record(exc, attempt), label="retried")
