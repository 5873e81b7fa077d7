"""The process executor: sync handlers in child processes that can be killed.

A thread cannot be stopped; a child process can. With ``executor="process"``
(on a queue, or on one task registration) each attempt of a sync handler is
sent to an idle child of the queue's pool; at the hard deadline the worker
SIGKILLs the child, the attempt ends as ``DeadlineExceeded`` (retried or
failed as its attempts say), and a fresh child takes the dead one's place;
an attempt found superseded meanwhile (rescued, cancelled by an operator) has
its child killed too. A
child is also replaced after ``max_tasks_per_child`` attempts, like Celery's
prefork pool, so a handler that leaks memory cannot grow without bound.

The entry point is small on purpose (``ProcessPool.run``: a function, the
job, the seconds it may take), so that Celery's hard ``time_limit`` maps
onto it: ``raw=True`` carries the function's own return value back instead
of an outcome (``awa_bridge.celery.child`` runs only the task's function in
the child; everything around it stays in the worker). Children are started with ``spawn`` (safe beside the worker's
threads) and import the handler's module; the handler must be a module-level
function. In a child, ``job.set_progress``, ``update_metadata`` and
``set_result`` are carried back with the outcome; ``flush_progress`` and
``register_callback`` need the worker's loop and are not available there.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import queue
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from .context import JobContext
from .outcomes import Outcome, outcome_of_exception

log = logging.getLogger("awa_bridge.worker")

POLL_SLICE = 0.1  # how often a waiting handler thread looks at the attempt's state
READY = "ready"  # a new child's first message: its interpreter is up, so the attempt's clock starts
# What a child reports: the outcome (with raw=True: what the function returned), and what the
# handler recorded on its job.
Carried = tuple[Any, Any, bool, dict[str, Any] | None, str | None]
JOB_FIELDS = (
    "id",
    "kind",
    "queue",
    "args",
    "raw_args",
    "attempt",
    "max_attempts",
    "priority",
    "metadata",
    "tags",
    "run_lease",
    "progress",
    "deadline_at",
)


class ChildKilled(Exception):
    """The handler's child process was killed at the hard deadline (``overran``) or died."""

    def __init__(self, message: str, overran: bool) -> None:
        super().__init__(message)
        self.overran = overran


def _child_main(conn: Any, initializer: Callable[[], Any] | None = None) -> None:
    """A child's loop: run the pool's initializer, say it is ready, then run one attempt per message
    until the pipe closes or says stop. An initializer that fails is logged; the attempts then say why.

    The child ignores SIGINT and SIGTERM: a terminal's Ctrl-C and a service manager's SIGTERM reach
    the whole process group, and the worker, which drains, decides when its children end (it
    retires idle ones and kills busy ones once their attempts are released)."""
    from .executor import outcome_for

    for sig in _STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    if initializer is not None:
        try:
            initializer()
        except Exception:
            log.exception("the process pool's initializer failed in %s", multiprocessing.current_process().name)
    conn.send(READY)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        fn, fields, raw = message
        job = JobContext(**fields)
        answer: Any
        try:
            answer = fn(job) if raw else outcome_for(job, fn(job))
        except BaseException as exc:
            answer = outcome_of_exception(exc, job.attempt, job.max_attempts)
        conn.send((answer, job.progress, job._progress_dirty, job._metadata_patch, job._result_json))


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _start(process: Any) -> None:
    """Start a child that ignores SIGINT and SIGTERM from its first instruction: an ignored signal
    stays ignored across exec, so from the main thread (the worker's start warms its children
    there) the child is spawned with them ignored for that moment. Elsewhere (a replacement, from a
    handler thread, where no signal can be changed) it ignores them once ``_child_main`` runs, after
    its interpreter's start-up."""
    if threading.current_thread() is not threading.main_thread():
        process.start()
        return
    saved = [signal.signal(sig, signal.SIG_IGN) for sig in _STOP_SIGNALS]
    try:
        process.start()
    finally:
        for sig, handler in zip(_STOP_SIGNALS, saved, strict=True):
            signal.signal(sig, handler)


class _Child:
    def __init__(self, context: Any, name: str, initializer: Callable[[], Any] | None) -> None:
        self.conn, child_conn = context.Pipe()
        self.process = context.Process(target=_child_main, args=(child_conn, initializer), name=name, daemon=True)
        _start(self.process)
        child_conn.close()
        self.tasks = 0
        self.ready = False

    def kill(self) -> None:
        self.process.kill()
        self.process.join(5)
        self.conn.close()

    def retire(self) -> None:
        """Ask the child to exit; not waited for (the next start reaps it)."""
        with contextlib.suppress(OSError):
            self.conn.send(None)
        self.conn.close()


class ProcessPool:
    """Children for one queue's sync handlers; ``run`` is called from the worker's handler threads."""

    def __init__(
        self, name: str, max_tasks_per_child: int | None = None, initializer: Callable[[], Any] | None = None
    ) -> None:
        self.name = name
        self.max_tasks_per_child = max_tasks_per_child
        self.initializer = initializer  # run first in each child (picklable), before it is ready
        self._context = multiprocessing.get_context("spawn")
        self._idle: queue.SimpleQueue[_Child] = queue.SimpleQueue()
        self._busy: set[_Child] = set()  # running an attempt: killed at shutdown (they ignore SIGTERM)
        self._lock = threading.Lock()
        self._spawned = 0
        self.closed = False

    def warm(self, count: int) -> None:
        """Start ``count`` children now, so the first attempts do not wait for an interpreter."""
        for _ in range(count):
            self._idle.put(self._spawn())

    def _spawn(self) -> _Child:
        with self._lock:
            self._spawned += 1
            number = self._spawned
        return _Child(self._context, f"awa-{self.name}-{number}", self.initializer)

    def _take(self) -> _Child:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            return self._spawn()

    def run(self, fn: Callable[[Any], Any], job: JobContext, timeout: float | None, raw: bool = False) -> Carried:
        """Run ``fn(job)`` in a child; kill the child after ``timeout`` seconds (``ChildKilled``),
        counted from when the child is ready (a fresh one first starts its interpreter and runs
        the pool's initializer).

        ``raw``: carry back what ``fn`` returned (it must not raise), not its outcome."""
        message = (fn, {name: getattr(job, name) for name in JOB_FIELDS}, raw)
        child = self._take()
        try:
            child.conn.send(message)
        except (OSError, ValueError):  # the child died while idle: use a fresh one
            child.kill()
            child = self._spawn()
            child.conn.send(message)
        with self._lock:
            self._busy.add(child)
        try:
            return self._answer(child, job, timeout)
        finally:
            with self._lock:
                self._busy.discard(child)

    def _answer(self, child: _Child, job: JobContext, timeout: float | None) -> Carried:
        """What the child running ``job`` sends back; then the child is idle again (or retired)."""
        try:
            if not child.ready:  # a fresh child: its start-up does not count against the timeout
                self._wait(child, job, None)
                child.ready = child.conn.recv() == READY
            self._wait(child, job, timeout)
            carried: Carried = child.conn.recv()
        except (EOFError, OSError):
            code = child.process.exitcode
            child.kill()
            self._replace()
            raise ChildKilled(f"the handler's process died (exit code {code})", False) from None
        child.tasks += 1
        if self.max_tasks_per_child is not None and child.tasks >= self.max_tasks_per_child:
            child.retire()
            self._replace()
        else:
            self._idle.put(child)
        return carried

    def _wait(self, child: _Child, job: JobContext, timeout: float | None) -> None:
        """Until the child answers; kill it at the deadline, or once the attempt is superseded."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if child.conn.poll(POLL_SLICE if left is None else max(0.0, min(left, POLL_SLICE))):
                return
            if deadline is not None and time.monotonic() >= deadline:
                child.kill()
                self._replace()
                raise ChildKilled(f"the handler ran past its deadline ({timeout:.1f} s); its process was killed", True)
            if job._lost or job._released:  # superseded elsewhere, or released at shutdown
                child.kill()
                self._replace()
                raise ChildKilled("the attempt was superseded or released; its process was killed", False)

    def _replace(self) -> None:
        if not self.closed:
            self._idle.put(self._spawn())

    def shutdown(self) -> None:
        """Stop the idle children and kill the busy ones: called once the drain is over, when every
        attempt still running in a child has been released (a child ignores SIGTERM, so it would
        otherwise outlive the worker, or hold up its exit)."""
        self.closed = True
        while True:
            try:
                self._idle.get_nowait().retire()
            except queue.Empty:
                break
        with self._lock:
            busy = list(self._busy)
        for child in busy:
            child.kill()


def apply_carried(job: JobContext, carried: Carried) -> Outcome:
    """Copy what the handler recorded in its child onto the worker's job; its outcome."""
    apply_recorded(job, carried)
    outcome: Outcome = carried[0]
    return outcome


def apply_recorded(job: JobContext, carried: Carried) -> None:
    """Copy what the handler recorded on its job in the child onto the worker's job."""
    _, progress, dirty, metadata_patch, result_json = carried
    if dirty:
        job.progress = progress
        job._progress_dirty = True
    if metadata_patch:
        job.metadata.update(metadata_patch)
        job._metadata_patch = {**(job._metadata_patch or {}), **metadata_patch}
    job._result_json = result_json


_child_db: Any = None  # a child's own connection for flush_in_child, opened on first use


def flush_in_child(database_url: str, job: JobContext) -> None:
    """``job.flush_progress`` inside a child process, which has no worker loop or pool.

    The child writes on a connection of its own (kept for its later attempts),
    fenced by run_lease like the worker's flush: a superseded attempt raises
    ``StaleAttempt`` there.
    """
    global _child_db
    from ..drivers.connect import connect_sync
    from ..sql import QUERIES
    from .completer import complete_params

    if _child_db is None or _child_db.closed:
        _child_db = connect_sync(database_url, application_name="awa-child")
    rows = _child_db.fetch_all(QUERIES["flush_progress"], complete_params(job))
    job._raise_if_stale(bool(rows))
    job.mark_flushed()
