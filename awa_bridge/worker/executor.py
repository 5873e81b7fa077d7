"""Run one attempt and map what happened to an ``Outcome``.

Async handlers run on the event loop, sync handlers on the daemon thread
pool. A handler past its deadline is cancelled (async) or told so through
``job.cancelled`` (sync), and the attempt ends as a deadline error.
Transactional handlers run inside the transaction that also finalizes the
job, so their writes commit exactly when the job's outcome does.

The executor knows only its explicit collaborators (``Executor``): the
worker's loop and handler threads, the handler pools, the hooks, and the
completer, which takes every outcome and every report of one. It holds no
reference to the runtime.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..drivers.errors import first_line, is_connection_failure
from ..errors import StaleAttempt
from .aio import call_from_thread
from .completer import Completer, finalize_one, is_transient
from .config import QueueConfig
from .context import JobContext
from .hooks import Hooks
from .outcomes import COMPLETED, Outcome, error_record, outcome_of_exception, outcome_of_result
from .pools import HandlerPools
from .registry import ArgsDecodeError, Handler
from .threads import DaemonThreadPool

log = logging.getLogger("awa_bridge.worker")


@dataclass(frozen=True)
class Executor:
    """What running an attempt needs: where handlers run, and where their outcomes go."""

    loop: asyncio.AbstractEventLoop
    threads: DaemonThreadPool  # sync handlers
    pools: HandlerPools  # transactional handlers' connections, process executors
    completer: Completer  # takes outcomes (``submit``/``resolve``) and reports self-written ones (``report``)
    hooks: Hooks
    queues: Mapping[str, QueueConfig]

    def executor_of(self, handler: Handler, queue: str) -> str:
        """Where a sync handler runs: its registration's executor, else its queue's."""
        if handler.executor is not None:
            return str(handler.executor)
        config = self.queues.get(queue)
        return config.executor if config is not None else "thread"


class DeadlineExceeded(Exception):
    """The attempt ran past its queue's deadline."""


class NotStarted(Exception):
    """The attempt ended (superseded, past its deadline, released) before its handler began: it never runs."""


class NoConnection(NotStarted):
    """The server refused (or dropped) the connection a transactional handler was to run on, before
    the handler began: the attempt is handed back unspent, to run again after ``NO_CONNECTION_DELAY``."""


#: Seconds before an attempt that found no connection for its transactional handler runs again. Its
#: attempt is given back, so a server that refuses connections for a while (max_connections reached)
#: costs such jobs time, never attempts: a short pause, not the backoff of a handler error.
NO_CONNECTION_DELAY = 2.0


# Orders "the handler starts" (on a handler thread) against "the worker gives the attempt up" (on the loop).
_start_lock = threading.Lock()


def check_start(ctx: JobContext, announce: Executor | None = None) -> None:
    """From a handler thread: ``check_start_on_loop`` under the lock ``give_up`` takes on the loop,
    so that an attempt the worker gave up never starts, and one that started is known to have.

    With ``announce``, the attempt's ``started`` hook is queued on the loop under the same lock: a
    ``give_up`` that finds the attempt started (and the outcome it leads to) then comes after it.
    """
    with _start_lock:
        check_start_on_loop(ctx)
        if announce is not None:
            announce_start(announce, ctx, from_thread=True)


def check_start_on_loop(ctx: JobContext) -> None:
    """In memory, no round trip: raise NotStarted unless the attempt is still this worker's to run.

    The heartbeat thread marks attempts it finds superseded (rescued, cancelled
    elsewhere); the deadline and shutdown set ``job.cancelled``. Called as is
    for async handlers, on the loop, where ``give_up`` also runs: no lock.
    """
    if ctx._lost:
        raise NotStarted("superseded")
    if ctx._cancelled or ctx._deadline <= time.time():
        raise NotStarted("deadline")
    ctx._started = True


def _guarded(ex: Executor, fn: Any, ctx: JobContext) -> Any:
    """A sync handler, on its thread: it runs only if the attempt is still live when a thread is free."""
    check_start(ctx, announce=ex)
    return fn(ctx)


def announce_start(ex: Executor, ctx: JobContext, *, from_thread: bool = False) -> None:
    """The ``started`` hook, as the handler is about to run, not when the attempt was claimed: one
    handed back for want of a thread, a connection or time never started. It runs on the loop; from
    a handler thread (through ``check_start``) it is queued there ahead of any outcome."""
    if ex.hooks.listeners["started"]:
        if from_thread:
            call_from_thread(ex.loop, ex.hooks.fire, "started", ctx)
        else:
            ex.hooks.fire("started", ctx)


def give_up(ctx: JobContext) -> bool:
    """Mark the attempt given up; True if its handler had already started."""
    with _start_lock:
        ctx._cancelled = True
        return ctx._started


def not_started(ex: Executor, ctx: JobContext, exc: NotStarted) -> Outcome | None:
    """An attempt that never ran: let a superseded one go; hand the others back unspent."""
    reason = str(exc)
    if isinstance(exc, NoConnection):
        log.warning(
            "job %s: attempt %s got no database connection for its transactional handler (%s); released"
            " unspent, it runs again in %.0f s",
            ctx.id,
            ctx.attempt,
            reason,
            NO_CONNECTION_DELAY,
        )
        return Outcome("scheduled", delay=NO_CONNECTION_DELAY, refund=True, label="released")
    if reason == "superseded":
        log.info("job %s: attempt %s was superseded before its handler started; not running it", ctx.id, ctx.attempt)
        ex.completer.abandon(ctx)
        return None
    log.warning(
        "job %s: attempt %s reached its deadline before its handler could start (no slot or no connection"
        " was free in time); released",
        ctx.id,
        ctx.attempt,
    )
    return Outcome("available", refund=True, label="released")


def failed_at_once(ctx: JobContext, message: str, exc: BaseException | None = None) -> Outcome:
    return Outcome("failed", error=error_record(exc, ctx.attempt, message), label="exhausted")


def seconds_left(ctx: JobContext) -> float | None:
    if ctx.deadline_at is None:
        return None
    return max(ctx.deadline_at.timestamp() - time.time(), 0.0)


async def run_attempt(ex: Executor, handler: Handler | None, ctx: JobContext) -> Outcome | None:
    """Run the attempt; return its outcome, or None when it finalized itself (transactional)."""
    if handler is None:
        return failed_at_once(
            ctx,
            f"unknown job kind {ctx.kind!r}: no handler is registered for it on the worker that claimed it"
            " (a worker runs only the handlers its code registered: with Celery, the tasks its app imported,"
            " include=[...])",
        )
    try:
        ctx.args = handler.decode(ctx.raw_args)
    except ArgsDecodeError as exc:
        return failed_at_once(ctx, str(exc), exc)
    try:
        if handler.is_async:
            check_start_on_loop(ctx)  # the loop may have been blocked since the claim
        if handler.transactional:
            await run_transactional(ex, handler, ctx)
            return None
        if not handler.is_async and ex.executor_of(handler, ctx.queue) == "process":
            return await run_in_process(ex, handler, ctx)
        if handler.is_async:
            announce_start(ex, ctx)
        try:
            result = await (_invoke_async(handler, ctx) if handler.is_async else _invoke_sync(ex, handler, ctx))
        except (asyncio.CancelledError, NotStarted):
            raise
        except Exception as exc:  # DeadlineExceeded included
            return outcome_of_exception(exc, ctx.attempt, ctx.max_attempts)
    except NotStarted as exc:
        return not_started(ex, ctx, exc)
    outcome = COMPLETED if result is None else outcome_for(ctx, result)
    if ctx._on_complete and outcome.state == "completed":
        await ex.threads.submit(ex.loop, complete_with_effects, ex, ctx, outcome)
        return None
    return outcome


def outcome_for(ctx: JobContext, result: Any) -> Outcome:
    """Map a handler's return value; a wait must name a callback this attempt registered."""
    outcome = outcome_of_result(result, ctx.attempt, ctx.max_attempts)
    if outcome.state == "waiting_external" and (ctx.callback_id is None or outcome.callback_id != ctx.callback_id):
        return failed_at_once(
            ctx,
            f"the handler returned WaitForCallback({outcome.callback_id!r}) but this attempt registered "
            f"{'no callback' if ctx.callback_id is None else 'callback ' + ctx.callback_id}: "
            "call job.register_callback(timeout) first and return its id",
        )
    return outcome


DEADLINE_MESSAGE = "deadline exceeded: the attempt ran longer than its queue's deadline"


async def _invoke(ex: Executor, handler: Handler, ctx: JobContext) -> Any:
    """Run the handler, async or sync (in a thread), with its deadline."""
    if handler.is_async:
        return await _invoke_async(handler, ctx)
    return await _invoke_sync(ex, handler, ctx)


async def _invoke_sync(ex: Executor, handler: Handler, ctx: JobContext) -> Any:
    timeout = seconds_left(ctx)
    work = ex.threads.submit(ex.loop, _guarded, ex, handler.fn, ctx)
    try:
        return await asyncio.wait_for(asyncio.shield(work), timeout) if timeout is not None else await work
    except TimeoutError:
        if not give_up(ctx):  # still waiting for a thread: it will never start
            raise NotStarted("deadline") from None
        # A sync handler only sees job.cancelled. Until its thread returns it
        # keeps its slot, so the worker never claims more than it can run.
        ctx._lingering = work
        work.add_done_callback(_consume)
        raise DeadlineExceeded(DEADLINE_MESSAGE) from None
    except asyncio.CancelledError:  # released at shutdown: the handler sees job.cancelled
        ctx._cancelled = True
        ctx._lingering = work  # its thread may run on: the release gives it a grace to return
        work.add_done_callback(_consume)
        raise


def _consume(future: asyncio.Future[Any]) -> None:
    """Retrieve the late result of an abandoned sync handler (nobody awaits it any more)."""
    if not future.cancelled():
        future.exception()


async def run_in_process(ex: Executor, handler: Handler, ctx: JobContext) -> Outcome:
    """A sync handler in a child process, killed at the hard deadline (``executor="process"``)."""
    from .processes import ChildKilled, apply_carried

    pool = ex.pools.process_pool(ctx.queue)

    def attempt() -> Any:
        check_start(ctx, announce=ex)
        return pool.run(handler.fn, ctx, seconds_left(ctx))

    try:
        carried = await ex.threads.submit(ex.loop, attempt)
    except ChildKilled as exc:
        ctx._cancelled = True
        error: Exception = DeadlineExceeded(f"{DEADLINE_MESSAGE} ({exc})") if exc.overran else exc
        return outcome_of_exception(error, ctx.attempt, ctx.max_attempts)
    return apply_carried(ctx, carried)


class ClaimDeadline:
    """The deadline of the attempts of one claim: one timer for all of them, not one per job.

    Every row of a claim statement gets the same ``deadline_at`` (the claim's
    ``now()`` plus the queue's deadline). At that instant the timer sets
    ``job.cancelled`` on each attempt of the claim still unfinished and
    cancels the task of each whose async handler is running (``_invoke_async``
    maps that to DeadlineExceeded); an attempt that has not started yet then
    never starts (``check_start``). Sync handlers also wait for their thread
    with a timeout of their own (``_invoke``). When the claim's last attempt
    ends, the timer is cancelled and the attempts are let go.
    """

    __slots__ = ("contexts", "left", "timer")

    def __init__(self, loop: asyncio.AbstractEventLoop, contexts: list[JobContext], deadline: float) -> None:
        """``deadline``: the claim's ``deadline_at`` as a ``time.time()`` value."""
        self.contexts = contexts
        self.left = len(contexts)
        self.timer = loop.call_later(max(deadline - time.time(), 0.0), self.expire)
        for ctx in contexts:
            ctx._claim, ctx._deadline = self, deadline

    def ended(self) -> None:
        """One attempt of the claim ended (its handler returned, or it never started)."""
        self.left -= 1
        if self.left == 0:
            self.timer.cancel()
            self.contexts = []

    def expire(self) -> None:
        for ctx in self.contexts:
            ctx._cancelled = True
            runner = ctx._runner
            if runner is not None:
                ctx._expired = True
                runner.cancel()
        self.contexts = []


async def _invoke_async(handler: Handler, ctx: JobContext) -> Any:
    """Run an async handler in the attempt's own task (no task, shield, wait_for or timer per job).

    At the claim's deadline (``ClaimDeadline``) ``job.cancelled`` is set first,
    then the task is cancelled: the handler sees CancelledError and the
    attempt ends as DeadlineExceeded, also when the handler swallows the
    cancellation. A cancellation from elsewhere (shutdown release) propagates
    as before.
    """
    # The attempt's own task: set by _dispatch before the task's first step, except when the task
    # started eagerly (3.12+), where current_task() is C-fast (pure Python on 3.11: its lookup
    # was 2% of a drain there).
    task = ctx._runner = ctx._task or asyncio.current_task()
    assert task is not None
    try:
        result = await handler.fn(ctx)
    except asyncio.CancelledError:
        if ctx._expired and task.uncancel() == 0:
            raise DeadlineExceeded(DEADLINE_MESSAGE) from None
        ctx._cancelled = True
        raise
    except Exception:
        if ctx._expired:
            task.uncancel()
            raise DeadlineExceeded(DEADLINE_MESSAGE) from None
        raise
    finally:
        ctx._runner = None
    if ctx._expired:  # the handler swallowed the cancellation and returned anyway
        task.uncancel()
        raise DeadlineExceeded(DEADLINE_MESSAGE)
    return result


async def run_transactional(ex: Executor, handler: Handler, ctx: JobContext) -> None:
    """Handler writes and the job's finalization in ONE transaction, fenced by run_lease."""
    if not handler.is_async:
        await ex.threads.submit(ex.loop, run_transactional_sync, ex, handler, ctx)
        return
    connected = ran = False
    committed: Outcome | None = None
    unstarted: NotStarted | None = None
    try:
        tx_pool = await ex.pools.transaction_pool()
        async with tx_pool.acquire() as db:
            connected = True
            try:
                committed = await _run_on(ex, handler, ctx, db)
            except NotStarted as exc:
                unstarted = exc
                raise
            ran = True
    except Exception as exc:
        if not is_connection_failure(exc) or (connected and not ran and unstarted is None):
            raise
        if not connected:
            raise NoConnection(first_line(exc)) from exc
        # The attempt is settled (committed, handed to the completer, or found not to start); only
        # handing the connection back failed, its reset finding it gone. The pool drops it.
        log.info("job %s: its handler's connection was lost as it was released (%s)", ctx.id, first_line(exc))
        if unstarted is not None:
            raise unstarted from None
    if committed is not None:
        ex.completer.report(ctx, committed, True)


async def _run_on(ex: Executor, handler: Handler, ctx: JobContext, db: Any) -> Outcome | None:
    """The async transactional attempt on its connection ``db``, handler and finalization in one
    transaction; the outcome it committed, or None when it was handed to the completer instead."""
    # The wait for a connection (more slots than the pool has) may have outlasted the deadline,
    # whose timer had no handler to cancel then: such an attempt does not start.
    check_start_on_loop(ctx)
    outcome: Outcome | None = None
    invoked = False
    try:
        async with db.transaction():
            ctx.conn = db.conn
            invoked = True
            announce_start(ex, ctx)  # after BEGIN: a connection BEGIN finds gone releases the attempt
            try:
                result = await _invoke(ex, handler, ctx)
            finally:
                ctx.conn = None
            outcome = outcome_for(ctx, result)
            if not await finalize_one(db, ctx, outcome):
                raise StaleAttempt(f"job {ctx.id} run_lease {ctx.run_lease} was superseded")
    except StaleAttempt:
        log.warning("job %s: attempt %s was superseded; its writes were rolled back", ctx.id, ctx.attempt)
        ex.completer.report(ctx, outcome or Outcome("completed"), False)
        return None
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        if not invoked and is_connection_failure(exc):  # BEGIN found the connection gone
            raise NoConnection(first_line(exc)) from exc
        failure = outcome_of_exception(exc, ctx.attempt, ctx.max_attempts)
        if outcome is not None and is_transient(exc):  # lost at or after the commit: read it back
            ex.completer.resolve(ctx, outcome, failure)
        else:
            ex.completer.submit(ctx, failure)
        return None
    ctx.mark_flushed()  # committed
    return outcome


def complete_with_effects(ex: Executor, ctx: JobContext, outcome: Outcome) -> None:
    """After the handler returned: its completion effects (``job.on_complete``) and the job's
    completion in ONE short transaction, fenced by run_lease (in a worker thread). Both commit or
    neither does: a superseded attempt rolls the effects back, a failing effect retries the job."""
    from ..drivers import detect_sync
    from .completer import completion

    try:
        with ex.pools.sync_transaction() as conn:
            for effect in ctx._on_complete:
                effect(conn)
            query, params = completion(ctx)
            if not detect_sync(conn).fetch_all(query, params):
                raise StaleAttempt(f"job {ctx.id} run_lease {ctx.run_lease} was superseded")
        ctx.mark_flushed()  # committed (not before: a commit lost unwritten retries with the patch)
    except StaleAttempt:
        log.warning("job %s: attempt %s was superseded; its completion effects were rolled back", ctx.id, ctx.attempt)
        call_from_thread(ex.loop, ex.completer.report, ctx, outcome, False)
        return
    except Exception as exc:  # an effect failed, or the connection did: the job is retried
        failure = outcome_of_exception(exc, ctx.attempt, ctx.max_attempts)
        if is_connection_failure(exc):  # perhaps at the commit, which may have happened: read it back
            call_from_thread(ex.loop, ex.completer.resolve, ctx, outcome, failure)
        else:
            call_from_thread(ex.loop, ex.completer.submit, ctx, failure)
        return
    call_from_thread(ex.loop, ex.completer.report, ctx, outcome, True)


def run_transactional_sync(ex: Executor, handler: Handler, ctx: JobContext) -> None:
    """The sync form, in a worker thread: on a psycopg connection from the worker's pool,
    or in the handler's own transaction (``Handler.transaction``, e.g. Django's ``atomic()``)."""
    from ..drivers import detect_sync
    from ..sql import QUERIES
    from .completer import completion, finish_params

    check_start(ctx)
    begin = handler.transaction or ex.pools.sync_transaction
    outcome: Outcome | None = None
    invoked = False
    try:
        with begin() as conn:
            check_start(ctx, announce=ex)  # again: the wait for a connection may have outlasted the deadline
            ctx.conn = conn
            invoked = True
            try:
                result = handler.fn(ctx)
            finally:
                ctx.conn = None
            outcome = outcome_for(ctx, result)
            if outcome.state == "completed":
                query, params = completion(ctx)
            else:
                query, params = QUERIES["finish_attempt"], finish_params(ctx, outcome)
            if not detect_sync(conn).fetch_all(query, params):
                raise StaleAttempt(f"job {ctx.id} run_lease {ctx.run_lease} was superseded")
        ctx.mark_flushed()  # committed
    except StaleAttempt:
        log.warning("job %s: attempt %s was superseded; its writes were rolled back", ctx.id, ctx.attempt)
        call_from_thread(ex.loop, ex.completer.report, ctx, outcome or Outcome("completed"), False)
        return
    except NotStarted:
        raise
    except Exception as exc:
        lost = is_connection_failure(exc)
        if lost and not invoked:  # no connection, or BEGIN found it gone: the handler never started
            raise NoConnection(first_line(exc)) from exc
        failure = outcome_of_exception(exc, ctx.attempt, ctx.max_attempts)
        if lost and outcome is not None:  # lost at or after the commit: read it back
            call_from_thread(ex.loop, ex.completer.resolve, ctx, outcome, failure)
        else:  # also lost before the outcome was written: nothing can have committed
            call_from_thread(ex.loop, ex.completer.submit, ctx, failure)
        return
    call_from_thread(ex.loop, ex.completer.report, ctx, outcome, True)
