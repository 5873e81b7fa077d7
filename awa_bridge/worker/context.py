"""The job object a handler receives."""

from __future__ import annotations

import asyncio
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


class CancelFlag:
    """Set once, read from any thread (a plain bool under the GIL).

    Cheaper than a ``threading.Event`` per job; nothing ever waits on it.
    """

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


@dataclass
class JobContext:
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
    _cancelled: CancelFlag = field(default_factory=CancelFlag, repr=False)
    _progress_dirty: bool = field(default=False, repr=False)
    _metadata_patch: dict[str, Any] = field(default_factory=dict, repr=False)
    _task: Any = field(default=None, repr=False)
    callback_id: str | None = field(default=None, repr=False)
    _result_json: str | None = field(default=None, repr=False)
    _on_complete: list[Any] = field(default_factory=list, repr=False)
    # The worker's own bookkeeping of the attempt (see executor.check_start):
    _lost: bool = field(default=False, repr=False)  # superseded in the database (heartbeat found it)
    _started: bool = field(default=False, repr=False)  # its handler began
    _lingering: Any = field(default=None, repr=False)  # a sync handler's thread, still running past the deadline
    _write_uncertain: bool = field(default=False, repr=False)  # a write of its outcome was cut off
    _claim: Any = field(default=None, repr=False)  # the claim's deadline (executor.ClaimDeadline)
    _runner: Any = field(default=None, repr=False)  # the task running its async handler, while it runs
    _expired: bool = field(default=False, repr=False)  # its async handler was cancelled at the deadline

    # -- cancellation ------------------------------------------------------

    @property
    def cancelled(self) -> bool:
        """True once the worker gave up on this attempt (deadline or shutdown).

        Sync handlers that loop should check it; async handlers are also
        cancelled with ``asyncio.CancelledError``.
        """
        return self._cancelled.is_set()

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
        self._metadata_patch.update(values)

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
        self._on_complete.append(effect)

    def pending_progress(self) -> tuple[str | None, str]:
        """(progress JSON or None, metadata patch JSON) to write with the next guarded update."""
        progress = canonical_json(self.progress, "progress") if self._progress_dirty else None
        return progress, canonical_json(self._metadata_patch, "metadata")

    def mark_flushed(self) -> None:
        self._progress_dirty = False
        self._metadata_patch = {}

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
        self._cancelled.set()

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
