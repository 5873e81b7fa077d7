"""Operations on queues and jobs, shared by the CLI, the Django admin and SQLAlchemy apps.

Every operation is ONE guarded statement (a named block of ``sql/queries.sql``)
and takes either a database URL (a short-lived autocommit psycopg connection
is opened and closed) or any connection the bridge supports: a psycopg
``Connection``, a SQLAlchemy ``Connection`` / ``Session`` or Django's
connection (``*_async`` twins take asyncpg, psycopg ``AsyncConnection`` and
SQLAlchemy's async objects). On a connection the statement runs inside the
caller's transaction and is committed or rolled back with it.

Bad input raises before anything is written: ``ValidationError`` for a
malformed value, ``JobNotFound`` for an unknown id, ``InvalidState`` when the
job's state does not allow the action. The state check and the change happen
in the same statement under a row lock, so of two operators racing on one
job exactly the changes a serial order allows succeed and the others get a
typed error (R9 in docs/reliability.md).

Semantics follow Awa's admin API:

* ``retry_job``: failed, cancelled, retryable or waiting_external → available
  now with a fresh attempt budget (``attempt`` reset to 0); errors and
  progress stay as history; callback fields are cleared.
* ``retry_failed``: the same for every failed job of a kind and/or queue.
* ``cancel_job``: scheduled, available, retryable, waiting_external or
  running → cancelled at once. A running handler finds out cooperatively
  (``job.cancelled`` turns true at its worker's next heartbeat) and its late
  completion is fenced: the job stays cancelled.
* ``run_now``: scheduled or retryable → available, ``run_at = now()``.
* ``delete_job``: any state but running.
* ``cancel_by_unique_key``: cancels the job holding a unique key.
* ``queue_stats``: per queue counts of the live states and failed jobs, lag
  of the oldest available job, completions in the last hour, paused flag.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from .args import canonical_json, coerce_args
from .drivers import detect_async, detect_sync
from .enqueue import row_to_job
from .errors import (
    ForeignSchema,
    InvalidState,
    JobNotFound,
    UniqueConflict,
    ValidationError,
    constraint_of,
    sqlstate_of,
)
from .foreign import AWA_PG_QUEUE_STORAGE
from .sql import QUERIES
from .types import Job, JobState
from .unique import UniqueOpts, unique_key
from .validation import check_name

__all__ = [
    "CANCELLABLE_STATES",
    "DELETABLE_STATES",
    "RETRYABLE_STATES",
    "RUN_NOW_STATES",
    "QueueStats",
    "cancel_by_unique_key",
    "cancel_by_unique_key_async",
    "cancel_job",
    "cancel_job_async",
    "delete_job",
    "delete_job_async",
    "pause_queue",
    "queue_stats",
    "queue_stats_async",
    "resume_queue",
    "retry_failed",
    "retry_failed_async",
    "retry_job",
    "retry_job_async",
    "run_now",
    "run_now_async",
]

S = JobState
RETRYABLE_STATES: tuple[str, ...] = (S.failed, S.cancelled, S.retryable, S.waiting_external)
CANCELLABLE_STATES: tuple[str, ...] = (S.scheduled, S.available, S.running, S.retryable, S.waiting_external)
RUN_NOW_STATES: tuple[str, ...] = (S.scheduled, S.retryable)
DELETABLE_STATES: tuple[str, ...] = tuple(s for s in JobState if s is not S.running)

_MAX_JOB_ID = 2**63 - 1
T = TypeVar("T")


@dataclass(frozen=True)
class QueueStats:
    """One queue at a glance (Awa's ``QueueStat`` fields).

    Completed and cancelled jobs are history and are not counted in full:
    ``completed_last_hour`` says how much work finished recently.
    ``lag_seconds`` is how long the oldest available job has been due
    (``None`` when nothing is available).
    """

    queue: str
    scheduled: int
    available: int
    running: int
    retryable: int
    waiting_external: int
    failed: int
    completed_last_hour: int
    lag_seconds: float | None
    paused: bool

    @property
    def total_queued(self) -> int:
        """Jobs waiting to run: scheduled + available + retryable."""
        return self.scheduled + self.available + self.retryable


@dataclass(frozen=True)
class _Op:
    """One operation: its statement, parameters and how to read the result."""

    query: str
    params: dict[str, Any]
    finish: Callable[[list[dict[str, Any]]], Any]
    unique_key: bytes | None = None


# -- running one statement ------------------------------------------------------


def _translate(exc: Exception, op: _Op) -> Exception | None:
    state = sqlstate_of(exc)
    if state == "23505":
        return UniqueConflict(
            op.unique_key,
            constraint_of(exc),
            "the job would duplicate a unique key another job holds; nothing was changed",
        )
    if state == "0A000" and "queue_storage" in str(exc):
        # awa-pg's queue storage refuses writes through its awa.jobs view.
        return ForeignSchema(f"{AWA_PG_QUEUE_STORAGE}; nothing was changed")
    return None


def _run(conn_or_url: Any, op: _Op) -> Any:
    query = QUERIES[op.query]
    try:
        if isinstance(conn_or_url, str):
            import psycopg

            from .drivers.psycopg import PsycopgSync

            with psycopg.connect(conn_or_url, autocommit=True) as conn:
                rows = PsycopgSync(conn).fetch_all(query, op.params)
        else:
            rows = detect_sync(conn_or_url).fetch_all(query, op.params)
    except Exception as exc:
        mapped = _translate(exc, op)
        if mapped is None:
            raise
        raise mapped from exc
    return op.finish(rows)


async def _run_async(conn_or_url: Any, op: _Op) -> Any:
    query = QUERIES[op.query]
    try:
        if isinstance(conn_or_url, str):
            import psycopg

            from .drivers.psycopg import PsycopgAsync

            async with await psycopg.AsyncConnection.connect(conn_or_url, autocommit=True) as conn:
                rows = await PsycopgAsync(conn).fetch_all(query, op.params)
        else:
            rows = await detect_async(conn_or_url).fetch_all(query, op.params)
    except Exception as exc:
        mapped = _translate(exc, op)
        if mapped is None:
            raise
        raise mapped from exc
    return op.finish(rows)


# -- validation -------------------------------------------------------------------


def _check_name(field: str, value: Any, optional: bool = False) -> None:
    if value is None and optional:
        return
    check_name(field, value)


def _check_queue(queue: str) -> None:
    _check_name("queue", queue)


def _check_job_id(job_id: Any) -> int:
    if isinstance(job_id, bool) or not isinstance(job_id, int) or not 1 <= job_id <= _MAX_JOB_ID:
        raise ValidationError("job_id", f"must be a positive integer (a job id), got {job_id!r}")
    return job_id


# -- single-job operations ----------------------------------------------------------


def _job_from(row: dict[str, Any]) -> Job:
    return row_to_job({k: v for k, v in row.items() if k not in ("prior_state", "notified", "target_id")})


def _single_job(query: str, action: str, job_id: Any, allowed: tuple[str, ...]) -> _Op:
    job_id = _check_job_id(job_id)

    def finish(rows: list[dict[str, Any]]) -> Job:
        if not rows:
            raise JobNotFound(job_id)
        row = rows[0]
        if row["id"] is None:
            raise InvalidState(job_id, action, row["prior_state"], tuple(str(s) for s in allowed))
        return _job_from(row)

    return _Op(query, {"id": job_id, "allowed": [str(s) for s in allowed]}, finish)


def retry_job(conn_or_url: Any, job_id: int) -> Job:
    """Make a failed, cancelled, retryable or waiting_external job available now, attempts reset.

    Returns the job as it is now. Raises ``JobNotFound``, ``InvalidState``, or
    ``UniqueConflict`` when another job holds its unique key meanwhile.
    """
    return _run(conn_or_url, _single_job("retry_job", "retry", job_id, RETRYABLE_STATES))


def cancel_job(conn_or_url: Any, job_id: int) -> Job:
    """Cancel a job that has not finished, running ones included (cooperatively).

    The row is cancelled at once. A running handler sees ``job.cancelled``
    become true at its worker's next heartbeat and should stop; whatever it
    returns afterwards is fenced (the job stays cancelled). Raises
    ``JobNotFound`` or ``InvalidState`` (completed, failed, cancelled).
    """
    return _run(conn_or_url, _single_job("cancel_job", "cancel", job_id, CANCELLABLE_STATES))


def run_now(conn_or_url: Any, job_id: int) -> Job:
    """Move a scheduled or retryable job to available with ``run_at = now()``; workers are notified."""
    return _run(conn_or_url, _single_job("run_job_now", "run-now", job_id, RUN_NOW_STATES))


def delete_job(conn_or_url: Any, job_id: int) -> Job:
    """Delete a job in any state but running (cancel a running job first); returns the deleted row."""
    return _run(conn_or_url, _single_job("delete_job", "delete", job_id, DELETABLE_STATES))


async def retry_job_async(conn_or_url: Any, job_id: int) -> Job:
    """Async form of ``retry_job``."""
    return await _run_async(conn_or_url, _single_job("retry_job", "retry", job_id, RETRYABLE_STATES))


async def cancel_job_async(conn_or_url: Any, job_id: int) -> Job:
    """Async form of ``cancel_job``."""
    return await _run_async(conn_or_url, _single_job("cancel_job", "cancel", job_id, CANCELLABLE_STATES))


async def run_now_async(conn_or_url: Any, job_id: int) -> Job:
    """Async form of ``run_now``."""
    return await _run_async(conn_or_url, _single_job("run_job_now", "run-now", job_id, RUN_NOW_STATES))


async def delete_job_async(conn_or_url: Any, job_id: int) -> Job:
    """Async form of ``delete_job``."""
    return await _run_async(conn_or_url, _single_job("delete_job", "delete", job_id, DELETABLE_STATES))


# -- by unique key ----------------------------------------------------------------------


def _cancel_by_unique_key(kind: str | None, queue: str | None, args: Any, by_period: int | None) -> _Op:
    json_args = ""
    if args is not None:
        try:
            data, derived = coerce_args(args)
        except TypeError as exc:
            raise ValidationError("args", str(exc)) from None
        kind = kind if kind is not None else derived
        json_args = canonical_json(data, "args")
    _check_name("kind", kind)
    _check_name("queue", queue, optional=True)
    if by_period is not None and (
        isinstance(by_period, bool) or not isinstance(by_period, int) or not -(2**63) <= by_period < 2**63
    ):
        raise ValidationError("by_period", f"must be a signed 64-bit integer, got {by_period!r}")
    opts = UniqueOpts(by_queue=queue is not None, by_args=args is not None, by_period=by_period)
    key = unique_key(kind, queue or "", json_args, opts)  # type: ignore[arg-type]
    parts = [f"kind {kind!r}"]
    if queue is not None:
        parts.append(f"queue {queue!r}")
    if args is not None:
        parts.append(f"args {json_args}")
    if by_period is not None:
        parts.append(f"by_period {by_period}")

    def finish(rows: list[dict[str, Any]]) -> Job:
        if not rows:
            raise JobNotFound(
                None,
                f"no job holds unique key {key.hex()} ({', '.join(parts)}) in a state its unique_states enforce",
            )
        row = rows[0]
        if row["id"] is None:
            raise InvalidState(row["target_id"], "cancel", row["prior_state"], tuple(map(str, CANCELLABLE_STATES)))
        return _job_from(row)

    params = {"unique_key": key, "allowed": [str(s) for s in CANCELLABLE_STATES]}
    return _Op("cancel_by_unique_key", params, finish, unique_key=key)


def cancel_by_unique_key(
    conn_or_url: Any,
    kind: str | None,
    queue: str | None = None,
    args: Any = None,
    by_period: int | None = None,
) -> Job:
    """Cancel the job holding the unique key these inputs produce.

    The key is computed exactly as at insert time (``awa_bridge.unique``):
    pass ``queue`` only if the job was inserted with ``by_queue``, ``args``
    (a dict, dataclass or pydantic model; ``kind`` may then be ``None``) only
    with ``by_args`` (the bridge's default, so usually yes), and
    ``by_period`` only if the job had one. The job holding the key is the
    one whose state its own ``unique_states`` enforce. Raises ``JobNotFound``
    when no job holds the key and ``InvalidState`` when it is held by a
    completed (or otherwise finished) job.
    """
    return _run(conn_or_url, _cancel_by_unique_key(kind, queue, args, by_period))


async def cancel_by_unique_key_async(
    conn_or_url: Any,
    kind: str | None,
    queue: str | None = None,
    args: Any = None,
    by_period: int | None = None,
) -> Job:
    """Async form of ``cancel_by_unique_key``."""
    return await _run_async(conn_or_url, _cancel_by_unique_key(kind, queue, args, by_period))


# -- bulk and queues ---------------------------------------------------------------------


def _retry_failed(kind: str | None, queue: str | None, with_skipped: bool = False) -> _Op:
    _check_name("kind", kind, optional=True)
    _check_name("queue", queue, optional=True)

    def finish(rows: list[dict[str, Any]]) -> Any:
        retried, skipped = int(rows[0]["retried"]), int(rows[0]["skipped"])
        return (retried, skipped) if with_skipped else retried

    return _Op("retry_failed_jobs", {"kind": kind, "queue": queue}, finish)


def retry_failed(conn_or_url: Any, kind: str | None = None, queue: str | None = None) -> int:
    """Retry every failed job (of ``kind`` and/or in ``queue``, if given); returns how many.

    Attempts are reset as in ``retry_job``. A failed job whose unique key is
    held meanwhile by another live job stays failed (it would be a
    duplicate), and so does every failed job but the oldest of a set sharing
    one key.
    """
    return _run(conn_or_url, _retry_failed(kind, queue))


async def retry_failed_async(conn_or_url: Any, kind: str | None = None, queue: str | None = None) -> int:
    """Async form of ``retry_failed``."""
    return await _run_async(conn_or_url, _retry_failed(kind, queue))


def retry_failed_report(conn_or_url: Any, kind: str | None = None, queue: str | None = None) -> tuple[int, int]:
    """``retry_failed`` that also says how many failed jobs it left for unique-key reasons: (retried, skipped)."""
    return _run(conn_or_url, _retry_failed(kind, queue, with_skipped=True))


def _queue_stats(queue: str | None) -> _Op:
    _check_name("queue", queue, optional=True)

    def finish(rows: list[dict[str, Any]]) -> list[QueueStats]:
        return [
            QueueStats(
                queue=row["queue"],
                scheduled=int(row["scheduled"]),
                available=int(row["available"]),
                running=int(row["running"]),
                retryable=int(row["retryable"]),
                waiting_external=int(row["waiting_external"]),
                failed=int(row["failed"]),
                completed_last_hour=int(row["completed_last_hour"]),
                lag_seconds=None if row["lag_seconds"] is None else max(float(row["lag_seconds"]), 0.0),
                paused=bool(row["paused"]),
            )
            for row in rows
        ]

    return _Op("queue_stats", {"queue": queue}, finish)


def queue_stats(conn_or_url: Any, queue: str | None = None) -> list[QueueStats]:
    """Statistics for every known queue (ordered by name), or for ``queue`` only (one entry, zeros if unused).

    Index-backed: it stays fast with millions of finished jobs in the table
    (see benchmarks/bench_admin_stats.py).
    """
    return _run(conn_or_url, _queue_stats(queue))


async def queue_stats_async(conn_or_url: Any, queue: str | None = None) -> list[QueueStats]:
    """Async form of ``queue_stats``."""
    return await _run_async(conn_or_url, _queue_stats(queue))


def _queue_op(query: str, params: dict[str, Any]) -> _Op:
    _check_queue(params["queue"])
    return _Op(query, params, lambda rows: None)


def pause_queue(conn_or_url: Any, queue: str, paused_by: str | None = None) -> None:
    """Stop every worker from claiming on ``queue`` (within one poll interval). Running jobs finish."""
    _run(conn_or_url, _queue_op("pause_queue", {"queue": queue, "paused_by": paused_by}))


def queue_known(conn_or_url: Any, queue: str) -> bool:
    """Whether a job, a pause or a live worker has used ``queue`` (for refusing a typo'd name)."""
    _check_queue(queue)
    return bool(_run(conn_or_url, _Op("queue_known", {"queue": queue}, lambda rows: rows[0]["known"])))


def resume_queue(conn_or_url: Any, queue: str) -> None:
    """Let workers claim on ``queue`` again."""
    _run(conn_or_url, _queue_op("resume_queue", {"queue": queue}))
