"""The job object a handler receives."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from ..args import canonical_json
from ..errors import StaleAttempt, ValidationError


class AttemptHandle(Protocol):
    """What a running attempt may ask of the worker that claimed it, and nothing more.

    A ``JobContext`` holds one of these instead of the whole runtime: its
    writes are lease-fenced statements on the worker's pool, run on the
    worker's event loop (``loop``). ``worker.attempt.AttemptWrites`` is the
    worker's implementation.
    """

    loop: asyncio.AbstractEventLoop
    database_url: str

    async def flush_progress(self, ctx: JobContext) -> None: ...

    async def register_callback(self, ctx: JobContext, timeout: float) -> str: ...

    async def raise_max_attempts(self, ctx: JobContext, at_least: int) -> int: ...


class AttemptState:
    """The worker's own bookkeeping of one attempt, read and written only by the worker.

    Class-level defaults, not dataclass fields: ``JobContext`` is built once
    per claimed job, and a dataclass ``__init__`` assigns every field, about
    half the cost of building one for these fourteen. An attempt gets an
    instance value only for what changes, and mutable values (the metadata
    patch, the completion effects) are replaced, never mutated in place, so
    that no instance shares one.
    """

    _cancelled: bool = False  # the worker gave the attempt up (deadline, shutdown, superseded); job.cancelled
    _progress_dirty: bool = False  # progress recorded since the last write
    _metadata_patch: dict[str, Any] | None = None  # metadata merged since the last write
    _task: Any = None  # the attempt's task (runtime._dispatch)
    _result_json: str | None = None  # the result to store with the completion (set_result)
    _on_complete: tuple[Any, ...] = ()  # completion effects (on_complete)
    _lost: bool = False  # superseded in the database (the heartbeat found it)
    _started: bool = False  # its handler began (see executor.check_start)
    _lingering: Any = None  # a sync handler's thread, still running past the deadline
    _write_uncertain: bool = False  # a write of its outcome was cut off
    _claim: Any = None  # the claim's deadline (executor.ClaimDeadline)
    _deadline: float = math.inf  # deadline_at as a time.time() value (set with _claim)
    _runner: Any = None  # the task running its async handler, while it runs
    _expired: bool = False  # its async handler was cancelled at the deadline
    _released: bool = False  # given up at shutdown and released (a process handler's child is then killed)


@dataclass
class JobContext(AttemptState):
    """One attempt of one job, as the handler sees it.

    ``args`` is decoded into the handler's registered type. ``progress`` holds
    what earlier attempts recorded. ``conn`` is the finalization transaction's
    connection for transactional handlers, else ``None``.
    """

    id: int
    kind: str
    queue: str
    args: Any
    raw_args: Any
    attempt: int
    max_attempts: int
    priority: int
    metadata: dict[str, Any]
    tags: list[str]
    run_lease: int
    progress: Any
    deadline_at: datetime | None
    conn: Any = None
    _handle: AttemptHandle | None = field(default=None, repr=False)
    callback_id: str | None = field(default=None, repr=False)

    # -- cancellation ------------------------------------------------------

    @property
    def cancelled(self) -> bool:
        """True once the worker gave up on this attempt (deadline or shutdown).

        Sync handlers that loop should check it; async handlers are also
        cancelled with ``asyncio.CancelledError``.
        """
        return self._cancelled

    @property
    def attached(self) -> bool:
        """True while a running worker holds this attempt; False for a copy in an executor child process."""
        return self._handle is not None

    @property
    def database_url(self) -> str | None:
        """The database of the worker running this attempt (None outside a worker, e.g. in a child process)."""
        return self._handle.database_url if self._handle is not None else None

    # -- progress ------------------------------------------------------------

    def set_progress(self, percent: float, message: str | None = None) -> None:
        """Record progress in memory; it is written at the next flush or at the end of the attempt."""
        if isinstance(percent, bool) or not isinstance(percent, (int, float)) or not 0 <= percent <= 100:
            raise ValidationError("percent", f"must be a number from 0 to 100, got {percent!r}")
        self.progress = {
            "percent": percent,
            "message": message,
            "updated_at": datetime.now(UTC).isoformat(),
        }
        self._progress_dirty = True

    def update_metadata(self, values: dict[str, Any]) -> None:
        """Merge keys into the job's metadata (shallow), persisted like progress."""
        canonical_json(values, "metadata")
        self.metadata.update(values)
        self._metadata_patch = {**(self._metadata_patch or {}), **values}

    def set_result(self, value: Any) -> None:
        """Keep ``value`` as the job's result (``awa.job_results``), written with its completion.

        The value is inserted by the same statement that marks the job
        completed, so it exists exactly when the completion does; an attempt
        that ends any other way (retry, failure, superseded) drops it. ``None``
        stores nothing. Raises ``ValidationError`` for a value JSON cannot carry.
        """
        self._result_json = None if value is None else canonical_json(value, "result")

    def on_complete(self, effect: Any) -> None:
        """Run ``effect(conn)`` in the transaction that marks this job completed, after the handler
        returned (a short transaction on a psycopg connection of the worker's pool): its writes
        commit exactly when the completion does. Not run when the attempt ends any other way.
        Unlike ``transactional=True`` no transaction is open while the handler runs."""
        self._on_complete = (*self._on_complete, effect)

    def pending_progress(self) -> tuple[str | None, str]:
        """(progress JSON or None, metadata patch JSON) to write with the next guarded update."""
        progress = canonical_json(self.progress, "progress") if self._progress_dirty else None
        return progress, canonical_json(self._metadata_patch or {}, "metadata")

    def mark_flushed(self) -> None:
        self._progress_dirty = False
        self._metadata_patch = None

    def flush_progress(self) -> Any:
        """Write progress and metadata now, fenced by run_lease.

        From an async handler: ``await job.flush_progress()``. From a sync
        handler (a worker thread) it runs at once and returns None. Raises
        ``StaleAttempt`` when this attempt was superseded (rescued, cancelled).
        """
        return self._on_worker_loop(lambda handle: handle.flush_progress(self))

    def register_callback(self, timeout: float) -> Any:
        """Create a callback id for this attempt, valid for ``timeout`` seconds; return it.

        The id is written to the job (fenced by run_lease) before it is
        returned, so an answer can never arrive for an id the database does not
        know. Return ``WaitForCallback(id)`` to park the job until
        ``complete_external`` / ``fail_external`` / ``retry_external``. From an
        async handler ``await`` it; from a sync handler it returns the id.
        """
        from ..callbacks import check_timeout

        seconds = check_timeout(timeout)
        return self._on_worker_loop(lambda handle: handle.register_callback(self, seconds))

    def raise_max_attempts(self, at_least: int) -> Any:
        """Give the job at least ``at_least`` attempts in all (fenced by run_lease); return its max_attempts.

        For layers that count retries their own way (Celery's ``max_retries``): a retry the
        layer allows must not be refused for want of an attempt. A superseded attempt changes
        nothing (its max_attempts stays as it was). A number outside 1..1000 raises
        ``ValidationError`` before anything is written. From an async handler ``await`` it;
        from a sync handler it returns the number.
        """
        from ..enqueue import MAX_ATTEMPTS_RANGE
        from ..validation import check_int

        wanted = check_int("max_attempts", at_least, *MAX_ATTEMPTS_RANGE)
        return self._on_worker_loop(lambda handle: handle.raise_max_attempts(self, wanted))

    def cancel(self) -> None:
        """Mark the attempt given up (``job.cancelled`` becomes True); the worker decides its outcome."""
        self._cancelled = True

    def _on_worker_loop(self, make: Callable[[AttemptHandle], Coroutine[Any, Any, Any]]) -> Any:
        """Run a handle coroutine: awaitable on the worker's loop, blocking from a handler thread."""
        if self._handle is None:
            raise RuntimeError("this job is not attached to a running worker")
        coro = make(self._handle)
        loop = self._handle.loop
        if _running_loop() is loop:
            return coro
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def _raise_if_stale(self, updated: bool) -> None:
        if not updated:
            raise StaleAttempt(f"job {self.id} attempt with run_lease {self.run_lease} was superseded")


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
