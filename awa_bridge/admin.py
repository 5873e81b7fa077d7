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
* Each takes ``operator=``: who acts, recorded on the job's timeline
  (``awa.job_actions``) by the same statement.
* ``cancel_by_unique_key``: cancels the job holding a unique key.
* ``retry_jobs`` / ``cancel_jobs`` / ``run_jobs_now`` / ``delete_jobs``: the
  same four over a set (ids, or all jobs matching state / kind / queue), ONE
  statement per batch, bounded (``max_jobs``, ``time_budget``) and
  interruptible (``should_stop``), returning a ``BulkResult`` whose
  ``summary()`` reads "24,981 retried; 19 skipped: completed". A job the
  action does not apply to is skipped and counted, never an error; with an
  ``operator`` name each change is recorded on the job's timeline.
* ``queue_stats``: per queue counts of the live states and failed jobs, lag
  of the oldest available job, completions in the last hour, paused flag.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar, overload

from .args import canonical_json, coerce_args
from .drivers.connect import async_driver_for, sync_driver_for
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
from .foreign import ADMIN_WRITE_REFUSAL, AWA_PG_QUEUE_STORAGE
from .sql import QUERIES
from .types import Job, JobState
from .unique import UniqueOpts, unique_key
from .validation import check_name

__all__ = [
    "BULK_BATCH_SIZE",
    "CANCELLABLE_STATES",
    "DELETABLE_STATES",
    "RETRYABLE_STATES",
    "RUN_NOW_STATES",
    "BulkResult",
    "QueueStats",
    "bulk_async",
    "cancel_by_unique_key",
    "cancel_by_unique_key_async",
    "cancel_job",
    "cancel_job_async",
    "cancel_jobs",
    "delete_job",
    "delete_job_async",
    "delete_jobs",
    "pause_queue",
    "pause_queue_async",
    "queue_stats",
    "queue_stats_async",
    "resume_queue",
    "resume_queue_async",
    "retry_failed",
    "retry_failed_async",
    "retry_job",
    "retry_job_async",
    "retry_jobs",
    "run_jobs_now",
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
class _Op(Generic[T]):
    """One operation: its statement, parameters and how to read the result."""

    query: str
    params: dict[str, Any]
    finish: Callable[[list[dict[str, Any]]], T]
    unique_key: bytes | None = None


# -- running one statement ------------------------------------------------------


def _translate(exc: Exception, op: _Op[Any]) -> Exception | None:
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
    if state == "42P01" and "job_actions" in str(exc):
        return ForeignSchema(f"{ADMIN_WRITE_REFUSAL}; nothing was changed")
    return None


def _run(conn_or_url: Any, op: _Op[T]) -> T:
    query = QUERIES[op.query]
    try:
        with sync_driver_for(conn_or_url) as driver:
            rows = driver.fetch_all(query, op.params)
    except Exception as exc:
        mapped = _translate(exc, op)
        if mapped is None:
            raise
        raise mapped from exc
    return op.finish(rows)


async def _run_async(conn_or_url: Any, op: _Op[T]) -> T:
    query = QUERIES[op.query]
    try:
        async with async_driver_for(conn_or_url) as driver:
            rows = await driver.fetch_all(query, op.params)
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


def check_job_id(job_id: Any) -> int:
    """``job_id``, or ``ValidationError`` when it cannot be an id of awa.jobs (a bigint from 1)."""
    if isinstance(job_id, bool) or not isinstance(job_id, int) or not 1 <= job_id <= _MAX_JOB_ID:
        raise ValidationError("job_id", f"must be a job id, an integer from 1 to {_MAX_JOB_ID}, got {job_id!r}")
    return job_id


# -- single-job operations ----------------------------------------------------------


def _job_from(row: dict[str, Any]) -> Job:
    return row_to_job({k: v for k, v in row.items() if k not in ("prior_state", "notified", "target_id")})


def _single_job(query: str, action: str, job_id: Any, allowed: tuple[str, ...], operator: str | None) -> _Op[Job]:
    job_id = check_job_id(job_id)
    _check_name("operator", operator, optional=True)

    def finish(rows: list[dict[str, Any]]) -> Job:
        if not rows:
            raise JobNotFound(job_id)
        row = rows[0]
        if row["id"] is None:
            raise InvalidState(job_id, action, row["prior_state"], tuple(str(s) for s in allowed))
        return _job_from(row)

    return _Op(query, {"id": job_id, "allowed": [str(s) for s in allowed], "operator": operator}, finish)


def retry_job(conn_or_url: Any, job_id: int, *, operator: str | None = None) -> Job:
    """Make a failed, cancelled, retryable or waiting_external job available now, attempts reset.

    Returns the job as it is now. Raises ``JobNotFound``, ``InvalidState``, or
    ``UniqueConflict`` when another job holds its unique key meanwhile.
    """
    return _run(conn_or_url, _single_job("retry_job", "retry", job_id, RETRYABLE_STATES, operator))


def cancel_job(conn_or_url: Any, job_id: int, *, operator: str | None = None) -> Job:
    """Cancel a job that has not finished, running ones included (cooperatively).

    The row is cancelled at once. A running handler sees ``job.cancelled``
    become true at its worker's next heartbeat and should stop; whatever it
    returns afterwards is fenced (the job stays cancelled). Raises
    ``JobNotFound`` or ``InvalidState`` (completed, failed, cancelled).
    """
    return _run(conn_or_url, _single_job("cancel_job", "cancel", job_id, CANCELLABLE_STATES, operator))


def run_now(conn_or_url: Any, job_id: int, *, operator: str | None = None) -> Job:
    """Move a scheduled or retryable job to available with ``run_at = now()``; workers are notified."""
    return _run(conn_or_url, _single_job("run_job_now", "run-now", job_id, RUN_NOW_STATES, operator))


def delete_job(conn_or_url: Any, job_id: int, *, operator: str | None = None) -> Job:
    """Delete a job in any state but running (cancel a running job first); returns the deleted row."""
    return _run(conn_or_url, _single_job("delete_job", "delete", job_id, DELETABLE_STATES, operator))


async def retry_job_async(conn_or_url: Any, job_id: int, *, operator: str | None = None) -> Job:
    """Async form of ``retry_job``."""
    return await _run_async(conn_or_url, _single_job("retry_job", "retry", job_id, RETRYABLE_STATES, operator))


async def cancel_job_async(conn_or_url: Any, job_id: int, *, operator: str | None = None) -> Job:
    """Async form of ``cancel_job``."""
    return await _run_async(conn_or_url, _single_job("cancel_job", "cancel", job_id, CANCELLABLE_STATES, operator))


async def run_now_async(conn_or_url: Any, job_id: int, *, operator: str | None = None) -> Job:
    """Async form of ``run_now``."""
    return await _run_async(conn_or_url, _single_job("run_job_now", "run-now", job_id, RUN_NOW_STATES, operator))


async def delete_job_async(conn_or_url: Any, job_id: int, *, operator: str | None = None) -> Job:
    """Async form of ``delete_job``."""
    return await _run_async(conn_or_url, _single_job("delete_job", "delete", job_id, DELETABLE_STATES, operator))


# -- by unique key ----------------------------------------------------------------------


def _cancel_by_unique_key(kind: str | None, queue: str | None, args: Any, by_period: int | None) -> _Op[Job]:
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


@overload
def _retry_failed(kind: str | None, queue: str | None, with_skipped: Literal[False] = False) -> _Op[int]: ...


@overload
def _retry_failed(kind: str | None, queue: str | None, with_skipped: Literal[True]) -> _Op[tuple[int, int]]: ...


def _retry_failed(kind: str | None, queue: str | None, with_skipped: bool = False) -> _Op[Any]:
    _check_name("kind", kind, optional=True)
    _check_name("queue", queue, optional=True)

    def finish(rows: list[dict[str, Any]]) -> int | tuple[int, int]:
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


async def retry_failed_report_async(
    conn_or_url: Any, kind: str | None = None, queue: str | None = None
) -> tuple[int, int]:
    """Async form of ``retry_failed_report``."""
    return await _run_async(conn_or_url, _retry_failed(kind, queue, with_skipped=True))


# -- set-based operations ------------------------------------------------------------------

#: Jobs changed per statement (and per transaction when called with a URL).
BULK_BATCH_SIZE = 1000
_BULK_QUERIES = {
    "retry": ("bulk_retry_jobs", RETRYABLE_STATES, "retried"),
    "cancel": ("bulk_cancel_jobs", CANCELLABLE_STATES, "cancelled"),
    "run_now": ("bulk_run_jobs_now", RUN_NOW_STATES, "made available now"),
    "delete": ("bulk_delete_jobs", DELETABLE_STATES, "deleted"),
}
_SKIP_HINTS = {
    ("delete", "running"): "running (cancel first)",
    ("retry", "unique key held"): "unique key held by another job",
    ("run_now", "unique key held"): "unique key held by another job",
}


@dataclass(frozen=True)
class BulkResult:
    """What a set-based operation did: how many jobs changed, and why the others were left alone.

    ``skipped`` maps a reason (the state a selected job was found in,
    ``"not found"``, ``"unique key held by another job"``) to a count.
    ``stopped`` says why it ended before running out of jobs (``"time
    budget"``, ``"max_jobs"``, ``"interrupted"``), or is ``None`` when every
    matching job was visited; the batches done before a stop stay done.
    """

    action: str
    changed: int
    skipped: dict[str, int]
    batches: int
    stopped: str | None = None

    @property
    def complete(self) -> bool:
        return self.stopped is None

    def summary(self) -> str:
        """One line for a person: ``"24,981 retried; 19 skipped: completed"``."""
        line = f"{self.changed:,} {_BULK_QUERIES[self.action][2]}"
        if self.skipped:
            reasons = sorted(self.skipped.items(), key=lambda item: (-item[1], item[0]))
            line += f"; {sum(self.skipped.values()):,} skipped: " + ", ".join(
                reason if len(reasons) == 1 else f"{count:,} {reason}" for reason, count in reasons
            )
        if self.stopped is not None:
            line += f" (stopped: {self.stopped}; more jobs may match, run it again to go on)"
        return line


@dataclass
class _Bulk:
    """The loop of one set-based operation: one statement per batch, bounded, interruptible."""

    action: str
    ids: list[int] | None
    params: dict[str, Any]
    batch_size: int
    max_jobs: int | None
    deadline: float | None
    should_stop: Callable[[], bool] | None
    changed: int = 0
    batches: int = 0
    after: int = 0
    position: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    stopped: str | None = None

    def next_params(self) -> dict[str, Any] | None:
        """Parameters of the next batch, or None when done or told to stop (``self.stopped`` says why)."""
        if self.batches and self.should_stop is not None and self.should_stop():
            self.stopped = "interrupted"
        elif self.batches and self.deadline is not None and time.monotonic() >= self.deadline:
            self.stopped = "time budget"
        limit = self.batch_size
        if self.max_jobs is not None:
            limit = min(limit, self.max_jobs - self.changed - sum(self.skipped.values()))
            if limit <= 0 and self.stopped is None:
                self.stopped = "max_jobs"
        if self.stopped is not None:
            return None
        if self.ids is not None:
            batch = self.ids[self.position : self.position + limit]
            if not batch:
                return None
            self.position += len(batch)
            return {**self.params, "ids": batch, "after": 0, "limit": len(batch)}
        return {**self.params, "ids": None, "after": self.after, "limit": limit}

    def take(self, params: dict[str, Any], rows: list[dict[str, Any]]) -> bool:
        """Count one batch's result; False when the set is exhausted."""
        row = rows[0]
        self.batches += 1
        self.changed += int(row["changed"])
        skipped: dict[str, int] = json.loads(row["skipped"])
        if params["ids"] is not None:
            missing = len(params["ids"]) - int(row["picked"])
            if missing:
                skipped["not found"] = missing
        for reason, count in skipped.items():
            reason = _SKIP_HINTS.get((self.action, reason), reason)
            self.skipped[reason] = self.skipped.get(reason, 0) + int(count)
        if params["ids"] is None:
            if row["last_id"] is None or int(row["picked"]) < params["limit"]:
                return False
            self.after = int(row["last_id"])
        return True

    def result(self) -> BulkResult:
        return BulkResult(self.action, self.changed, dict(self.skipped), self.batches, self.stopped)


def _bulk(
    action: str,
    ids: Iterable[int] | None,
    state: str | None,
    kind: str | None,
    queue: str | None,
    operator: str | None,
    batch_size: int,
    max_jobs: int | None,
    time_budget: float | None,
    should_stop: Callable[[], bool] | None,
) -> _Bulk:
    allowed = _BULK_QUERIES[action][1]
    _check_name("kind", kind, optional=True)
    _check_name("queue", queue, optional=True)
    _check_name("operator", operator, optional=True)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= 100_000:
        raise ValidationError("batch_size", f"must be an integer from 1 to 100000, got {batch_size!r}")
    if max_jobs is not None and (isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1):
        raise ValidationError("max_jobs", f"must be a positive integer, got {max_jobs!r}")
    if time_budget is not None and (not isinstance(time_budget, (int, float)) or time_budget <= 0):
        raise ValidationError("time_budget", f"must be a positive number of seconds, got {time_budget!r}")
    id_list: list[int] | None = None
    if ids is not None:
        if state is not None or kind is not None or queue is not None:
            raise ValidationError("ids", "give either job ids or a filter (state, kind, queue), not both")
        id_list = sorted({check_job_id(i) for i in ids})
    states = [str(s) for s in allowed]
    if state is not None:
        if state not in {s.value for s in JobState}:
            raise ValidationError("state", f"must be one of {', '.join(s.value for s in JobState)}, got {state!r}")
        if state not in states:
            raise ValidationError(
                "state", f"{action.replace('_', ' ')} applies to jobs in {', '.join(states)}, not {state!r} ones"
            )
        states = [state]
    params = {"states": states, "kind": kind, "queue": queue, "allowed": [str(s) for s in allowed]}
    params["operator"] = operator
    deadline = None if time_budget is None else time.monotonic() + time_budget
    return _Bulk(action, id_list, params, batch_size, max_jobs, deadline, should_stop)


def _run_bulk(conn_or_url: Any, loop: _Bulk) -> BulkResult:
    query = QUERIES[_BULK_QUERIES[loop.action][0]]

    def go(driver: Any) -> BulkResult:
        while (params := loop.next_params()) is not None:
            if not loop.take(params, driver.fetch_all(query, params)):
                break
        return loop.result()

    with sync_driver_for(conn_or_url) as driver:  # on a URL each batch commits on its own
        return go(driver)


async def _run_bulk_async(conn_or_url: Any, loop: _Bulk) -> BulkResult:
    query = QUERIES[_BULK_QUERIES[loop.action][0]]

    async def go(driver: Any) -> BulkResult:
        while (params := loop.next_params()) is not None:
            if not loop.take(params, await driver.fetch_all(query, params)):
                break
        return loop.result()

    async with async_driver_for(conn_or_url) as driver:
        return await go(driver)


def retry_jobs(
    conn_or_url: Any,
    ids: Iterable[int] | None = None,
    *,
    state: str | None = None,
    kind: str | None = None,
    queue: str | None = None,
    operator: str | None = None,
    batch_size: int = BULK_BATCH_SIZE,
    max_jobs: int | None = None,
    time_budget: float | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> BulkResult:
    """Retry (as ``retry_job``) the jobs ``ids``, or every job matching ``state`` / ``kind`` / ``queue``.

    A set-based operation: ONE statement per batch of ``batch_size`` jobs,
    not one per job. With a URL each batch commits on its own (so a stop
    keeps what was done); on a connection the batches run in the caller's
    transaction. It stops early after ``max_jobs`` jobs, after
    ``time_budget`` seconds, or when ``should_stop()`` turns true (checked
    between batches); ``BulkResult.stopped`` says so. Without ``ids`` only the
    states the action allows are visited (a ``state`` it does not allow is a
    ``ValidationError``), so a filter never reads the finished history.
    ``operator`` (who did it) is recorded on each changed job's timeline
    (``awa.job_actions``). Jobs found in a state that does not allow the
    action, unknown ids, and jobs whose unique key another live job holds
    are counted in ``skipped``, never raised.
    """
    loop = _bulk("retry", ids, state, kind, queue, operator, batch_size, max_jobs, time_budget, should_stop)
    return _run_bulk(conn_or_url, loop)


def cancel_jobs(
    conn_or_url: Any,
    ids: Iterable[int] | None = None,
    *,
    state: str | None = None,
    kind: str | None = None,
    queue: str | None = None,
    operator: str | None = None,
    batch_size: int = BULK_BATCH_SIZE,
    max_jobs: int | None = None,
    time_budget: float | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> BulkResult:
    """Cancel (as ``cancel_job``) a set of jobs; the set, batches and limits as in ``retry_jobs``."""
    loop = _bulk("cancel", ids, state, kind, queue, operator, batch_size, max_jobs, time_budget, should_stop)
    return _run_bulk(conn_or_url, loop)


def run_jobs_now(
    conn_or_url: Any,
    ids: Iterable[int] | None = None,
    *,
    state: str | None = None,
    kind: str | None = None,
    queue: str | None = None,
    operator: str | None = None,
    batch_size: int = BULK_BATCH_SIZE,
    max_jobs: int | None = None,
    time_budget: float | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> BulkResult:
    """Run now (as ``run_now``) a set of jobs; the set, batches and limits as in ``retry_jobs``."""
    loop = _bulk("run_now", ids, state, kind, queue, operator, batch_size, max_jobs, time_budget, should_stop)
    return _run_bulk(conn_or_url, loop)


def delete_jobs(
    conn_or_url: Any,
    ids: Iterable[int] | None = None,
    *,
    state: str | None = None,
    kind: str | None = None,
    queue: str | None = None,
    operator: str | None = None,
    batch_size: int = BULK_BATCH_SIZE,
    max_jobs: int | None = None,
    time_budget: float | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> BulkResult:
    """Delete (as ``delete_job``) a set of jobs, running ones skipped; set, batches and limits as in ``retry_jobs``.

    Over a filter without ``state`` this visits every state but running,
    finished history included: narrow it (``state="completed"``, a kind, a
    queue) on big tables.
    """
    loop = _bulk("delete", ids, state, kind, queue, operator, batch_size, max_jobs, time_budget, should_stop)
    return _run_bulk(conn_or_url, loop)


async def bulk_async(
    conn_or_url: Any,
    action: str,
    ids: Iterable[int] | None = None,
    *,
    state: str | None = None,
    kind: str | None = None,
    queue: str | None = None,
    operator: str | None = None,
    batch_size: int = BULK_BATCH_SIZE,
    max_jobs: int | None = None,
    time_budget: float | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> BulkResult:
    """Async form of ``retry_jobs`` / ``cancel_jobs`` / ``run_jobs_now`` / ``delete_jobs``.

    ``action`` is ``"retry"``, ``"cancel"``, ``"run_now"`` or ``"delete"``.
    """
    if action not in _BULK_QUERIES:
        raise ValidationError("action", f"must be one of {', '.join(_BULK_QUERIES)}, got {action!r}")
    loop = _bulk(action, ids, state, kind, queue, operator, batch_size, max_jobs, time_budget, should_stop)
    return await _run_bulk_async(conn_or_url, loop)


def _queue_stats(queue: str | None) -> _Op[list[QueueStats]]:
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


def _queue_op(query: str, params: dict[str, Any]) -> _Op[None]:
    _check_queue(params["queue"])
    return _Op(query, params, lambda rows: None)


def pause_queue(conn_or_url: Any, queue: str, paused_by: str | None = None) -> None:
    """Stop every worker from claiming on ``queue`` (within one poll interval). Running jobs finish."""
    _run(conn_or_url, _queue_op("pause_queue", {"queue": queue, "paused_by": paused_by}))


def queue_known(conn_or_url: Any, queue: str) -> bool:
    """Whether a job, a pause, a live worker or recorded throughput (``awa.queue_rollups``) has used
    ``queue`` (for refusing a typo'd name)."""
    _check_queue(queue)
    return bool(_run(conn_or_url, _Op("queue_known", {"queue": queue}, lambda rows: rows[0]["known"])))


def _resume_op(queue: str) -> _Op[bool]:
    _check_queue(queue)
    return _Op("resume_queue", {"queue": queue}, bool)


def resume_queue(conn_or_url: Any, queue: str) -> bool:
    """Let workers claim on ``queue`` again; False (nothing written) when it was not paused."""
    return _run(conn_or_url, _resume_op(queue))


async def pause_queue_async(conn_or_url: Any, queue: str, paused_by: str | None = None) -> None:
    """Async form of ``pause_queue``."""
    await _run_async(conn_or_url, _queue_op("pause_queue", {"queue": queue, "paused_by": paused_by}))


async def resume_queue_async(conn_or_url: Any, queue: str) -> bool:
    """Async form of ``resume_queue``."""
    return await _run_async(conn_or_url, _resume_op(queue))
