"""What a handler can return (or raise) besides plain success, as in awa.

``RetryAfter``, ``Snooze`` and ``Cancel`` may be returned or raised;
``TerminalError`` is raised. Any other exception is retried with backoff
until attempts run out.
"""

from __future__ import annotations

import logging
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
    #: The handler's own decision (RetryAfter, TerminalError) and its reason ("" if none): logged
    #: as a decision, without a traceback; None for an exception the handler did not mean.
    decided: str | None = None


#: The outcome of a handler that returned normally (one shared instance: it is immutable).
COMPLETED = Outcome("completed")


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
    return COMPLETED


def outcome_of_exception(exc: BaseException, attempt: int, max_attempts: int) -> Outcome:
    """Map what a handler raised (or returned, for the control-flow types)."""
    if isinstance(exc, Snooze):
        state = "scheduled" if exc.seconds > 0 else "available"
        return Outcome(state, delay=exc.seconds, refund=True, label="snoozed")
    if isinstance(exc, Cancel):
        return Outcome("cancelled", error=error_record(exc, attempt, exc.reason), label="cancelled")
    if isinstance(exc, TerminalError):
        return Outcome("failed", error=error_record(exc, attempt), label="exhausted", decided=str(exc))
    decided = exc.reason if isinstance(exc, RetryAfter) else None
    delay = exc.seconds if isinstance(exc, RetryAfter) else backoff_seconds(attempt)
    if attempt >= max_attempts:
        return Outcome("failed", error=error_record(exc, attempt), label="exhausted", decided=decided)
    return Outcome("retryable", delay=delay, error=error_record(exc, attempt), label="retried", decided=decided)


def log_outcome(log: logging.Logger, job: Any, outcome: Outcome) -> None:
    """Tell an operator what became of an attempt, at the level it deserves.

    An exception to be retried is a WARNING naming the error and when the job
    runs again; a failure for good is an ERROR, with the traceback when the
    handler raised an exception it did not mean (not for ``TerminalError``);
    what the handler decided (``RetryAfter``, a snooze, a cancel) or a wait is
    INFO; a plain completion is not logged (it is the normal case, and hooks
    or DEBUG logging can report it). ``job`` is the attempt's context (id,
    kind, queue, attempt, max_attempts). The fields are also passed as
    ``extra`` (``awa_job_id``, ``awa_kind`` ...) for structured log handlers.
    The message is one line; a traceback is the record's ``exc_text``, which a
    text formatter prints after it and ``--log-format json`` as ``traceback``.
    """
    if outcome.label == "completed":
        return
    where = f"job {job.id} ({job.kind} on {job.queue}, attempt {job.attempt}/{job.max_attempts})"
    error = outcome.error or {}
    what = f"{error.get('type', 'Error')}: {error.get('error', '')}".rstrip(": ")
    extra = {
        "awa_job_id": job.id,
        "awa_kind": job.kind,
        "awa_queue": job.queue,
        "awa_attempt": job.attempt,
        "awa_outcome": outcome.label,
    }
    decided = outcome.decided
    if outcome.label == "retried" and decided is not None:
        because = f": {decided}" if decided else ""
        log.info("%s: retry in %s, as its handler asked%s", where, _seconds(outcome.delay), because, extra=extra)
    elif outcome.label == "retried":
        log.warning("%s: %s; retry in %s", where, what, _seconds(outcome.delay), extra=extra)
    elif outcome.label == "exhausted":
        trace = "" if decided is not None else str(error.get("traceback") or "").rstrip()
        _log(log, logging.ERROR, trace, "%s failed for good: %s", where, what, extra=extra)
    elif outcome.label == "snoozed":
        log.info("%s snoozed for %s (attempt not spent)", where, _seconds(outcome.delay), extra=extra)
    elif outcome.label == "cancelled":
        log.info("%s cancelled: %s", where, error.get("error") or "by its handler", extra=extra)
    else:
        log.info("%s: %s", where, outcome.label, extra=extra)


def _log(log: logging.Logger, level: int, trace: str, msg: str, *args: Any, extra: dict[str, Any]) -> None:
    """``log.log(level, msg, *args)`` with ``trace`` (traceback text, may be empty) as the record's
    ``exc_text``: every ``logging.Formatter`` prints it after the message, as for ``exc_info``."""
    if not log.isEnabledFor(level):
        return
    fn, lno, func, _ = log.findCaller(stacklevel=2)
    record = log.makeRecord(log.name, level, fn, lno, msg, args, None, func, extra)
    record.exc_text = trace or None
    log.handle(record)


def _seconds(value: float) -> str:
    if value < 10:
        return f"{value:.1f} s"
    if value < 120:
        return f"{value:.0f} s"
    if value < 7200:
        return f"{value / 60:.0f} min"
    return f"{value / 3600:.1f} h"
