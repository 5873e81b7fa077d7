"""Per-task time limits and rate limits, enforced in the worker process.

Time limits, in the worker's threads (the default). A task runs in one of the
worker's threads; one watchdog thread serves every running task's limits. At
``soft_time_limit`` ``SoftTimeLimitExceeded`` is raised inside it (the task may
catch it and clean up, as in Celery); at ``time_limit`` ``TimeLimitExceeded``
is raised there and ``job.cancelled`` is set. Both are delivered with
``PyThreadState_SetAsyncExc``: at the next Python bytecode of that thread, so
code blocked inside C (``time.sleep``, a socket read with no timeout, a long C
call) sees them only when that call returns. So a task with a hard limit runs
in a thread of its own (``run_bounded``) and the worker's thread waits for it
at most ``time_limit + HARD_GRACE`` seconds: past that the attempt ends
without it, as FAILURE with ``TimeLimitExceeded``, and the worker's slot is
free again; a thread cannot be killed, so the task's thread is left behind
(logged) and whatever it does later is dropped. Whatever the task does after
its hard limit fired (catch it, return), the run fails with
``TimeLimitExceeded``, as Celery's killed process does, and is not retried.

``async def`` tasks run on an event loop of their own (``run_coroutine``): at
the soft limit ``SoftTimeLimitExceeded`` is thrown into the coroutine at its
current ``await`` (instead of the cancellation that carried it there); at the
hard limit the coroutine is cancelled and the run fails with
``TimeLimitExceeded``.

With ``worker_pool="prefork"`` a task with a hard limit runs in a child
process that is killed at the limit instead (``awa_bridge.celery.child``).

Rate limits. ``rate_limit="10/m"`` is Celery's per-worker-instance limit: a
token bucket per task in this process. A task over its rate is snoozed (run
again later without spending an attempt) instead of run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import ctypes
import logging
import signal
import threading
import time
from collections.abc import Callable, Coroutine, Generator
from types import TracebackType
from typing import Any

from ..errors import ValidationError
from .errors import SoftTimeLimitExceeded, TimeLimitExceeded

log = logging.getLogger("awa_bridge.celery")

#: Seconds a thread-run task has, after TimeLimitExceeded was raised in it, before its attempt ends without it.
HARD_GRACE = 1.0


def _raise_in(thread_id: int, exc_type: type[BaseException]) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc_type))


class TimeLimits:
    """``with TimeLimits(soft, hard, job):`` around one run of a task in the current thread.

    An exception is only ever injected while the block runs: the watchdog checks
    ``armed`` under a lock that ``__exit__`` takes before disarming, so one
    injected just as the task returned surfaces inside ``__exit__`` (the limit
    did pass) and never later in the worker's own code. ``hard_fired`` says the
    hard limit was reached.
    """

    def __init__(self, soft: float | None, hard: float | None, job: Any = None) -> None:
        self.soft, self.hard, self.job = soft, hard, job
        self.lock = threading.Lock()
        self.armed = False
        self.hard_fired = False
        self.thread_id = 0
        self.pending: list[tuple[float, type[BaseException]]] = []

    def __enter__(self) -> TimeLimits:
        self.thread_id = threading.get_ident()
        now = time.monotonic()
        self.pending = sorted(
            (
                (now + seconds, exc_type)
                for seconds, exc_type in ((self.soft, SoftTimeLimitExceeded), (self.hard, TimeLimitExceeded))
                if seconds is not None
            ),
            key=lambda limit: limit[0],  # stable: the soft limit first when both are due together
        )
        self.armed = True
        if self.pending:
            WATCHDOG.watch(self)
        return self

    def due(self, now: float) -> float | None:
        """Fire what is due; return when the next limit is due (None: nothing left)."""
        while self.pending and self.pending[0][0] <= now:
            _, exc_type = self.pending.pop(0)
            self._fire(exc_type)
        return self.pending[0][0] if self.pending and self.armed else None

    def _fire(self, exc_type: type[BaseException]) -> None:
        with self.lock:
            if not self.armed:
                return
            if exc_type is TimeLimitExceeded:
                self.armed = False  # nothing after the hard limit
                self.hard_fired = True
                cancel = getattr(self.job, "cancel", None)  # a worker's JobContext (eager jobs have none)
                if cancel is not None:
                    cancel()
            _raise_in(self.thread_id, exc_type)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # A limit injected while this thread waited for the lock arrives in here: keep it, disarm
        # anyway (so nothing is ever injected into the worker's own code later), then raise it.
        late: BaseException | None = None
        for _ in range(3):
            try:
                with self.lock:
                    self.armed = False
                break
            except (SoftTimeLimitExceeded, TimeLimitExceeded) as arrived:
                late = arrived
        WATCHDOG.forget(self)
        if late is not None:
            raise late


def limited_call(call: Callable[[], Any], soft: float | None, hard: float | None, job: Any) -> Any:
    """``call()`` in this thread under the limits; past the hard limit it fails with TimeLimitExceeded."""
    limits = TimeLimits(soft, hard, job)
    try:
        with limits:
            value = call()
    except BaseException as exc:
        if limits.hard_fired:
            raise TimeLimitExceeded(hard) from exc
        raise
    if limits.hard_fired:  # the task caught TimeLimitExceeded: the run still failed
        raise TimeLimitExceeded(hard)
    return value


def run_bounded(call: Callable[[], Any], hard: float, name: str) -> Any:
    """``call()`` (which applies the hard limit itself) in a thread of its own; this thread waits at most
    ``hard + HARD_GRACE`` seconds, then raises TimeLimitExceeded and leaves that thread behind."""
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    context = contextvars.copy_context()

    def target() -> None:
        try:
            future.set_result(context.run(call))
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=target, name=f"awa-celery-{name}", daemon=True).start()
    try:
        return future.result(hard + HARD_GRACE)
    except concurrent.futures.TimeoutError:
        log.error(
            "Hard time limit (%ss) exceeded for %s and the task did not stop: its attempt ended without it; "
            "its thread is left running (use worker_pool='prefork' to kill such tasks)",
            hard,
            name,
        )
        raise TimeLimitExceeded(hard) from None


class AlarmLimit:
    """``with AlarmLimit(soft):`` in a child process's main thread: ``SoftTimeLimitExceeded`` by SIGALRM,
    which interrupts a blocking call (``time.sleep``, a socket read), as Celery's soft limit does."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.armed = False
        self.previous: Any = None

    def _fire(self, signum: int, frame: Any) -> None:
        if self.armed:
            self.armed = False
            raise SoftTimeLimitExceeded()

    def __enter__(self) -> AlarmLimit:
        if self.seconds is not None:
            self.armed = True
            self.previous = signal.signal(signal.SIGALRM, self._fire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self.seconds is not None:
            self.armed = False  # a signal handled from here on raises nothing
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)


# -- async def tasks --------------------------------------------------------------------------------


class _SoftLimit:
    """Set by the soft limit's timer just before it cancels the task: the cancellation is a soft limit."""

    def __init__(self) -> None:
        self.due = False
        self.hard_fired = False


class _Throwing:
    """Awaits ``coro``, throwing SoftTimeLimitExceeded into it in place of the soft limit's cancellation."""

    def __init__(self, coro: Coroutine[Any, Any, Any], task: asyncio.Task[Any], state: _SoftLimit) -> None:
        self.coro, self.task, self.state = coro, task, state

    def __await__(self) -> Generator[Any, Any, Any]:
        to_send: Any = None
        to_throw: BaseException | None = None
        while True:
            try:
                if to_throw is not None:
                    step, to_throw = self.coro.throw(to_throw), None
                else:
                    step = self.coro.send(to_send)
            except StopIteration as stop:
                return stop.value
            try:
                to_send = yield step
            except asyncio.CancelledError as cancelled:
                to_send, to_throw = None, cancelled
                if self.state.due:
                    self.state.due = False
                    self.task.uncancel()
                    to_throw = SoftTimeLimitExceeded()
            except GeneratorExit:
                self.coro.close()
                raise
            except BaseException as exc:
                to_send, to_throw = None, exc


async def _limited(coro: Coroutine[Any, Any, Any], soft: float | None, hard: float | None) -> Any:
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    state = _SoftLimit()

    def soft_due() -> None:
        state.due = True
        task.cancel()

    def hard_due() -> None:
        state.due = False
        state.hard_fired = True
        task.cancel()

    timers = [loop.call_later(s, fire) for s, fire in ((soft, soft_due), (hard, hard_due)) if s is not None]
    try:
        value = await _Throwing(coro, task, state)
    except asyncio.CancelledError:
        if not state.hard_fired:
            raise
        task.uncancel()
        raise TimeLimitExceeded(hard) from None
    finally:
        for timer in timers:
            timer.cancel()
    if state.hard_fired:  # the coroutine swallowed the cancellation: the run still failed
        task.uncancel()
        raise TimeLimitExceeded(hard)
    return value


def run_coroutine(coro: Coroutine[Any, Any, Any], soft: float | None = None, hard: float | None = None) -> Any:
    """Run an ``async def`` task's coroutine to its end on an event loop of its own, under its limits.

    From a thread already running a loop (eager ``apply()`` in async code) it
    runs in another thread, the caller waiting, as ``asyncio.run`` cannot nest.
    """
    main = _limited(coro, soft, hard) if (soft is not None or hard is not None) else coro
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(contextvars.copy_context().run, asyncio.run, main).result()


class Watchdog:
    """One daemon thread for every running task's time limits (not a timer thread per task).

    Running tasks are few (at most the worker's slots), so each wake-up looks
    at all of them; a task starting only wakes the thread when its limit is
    due before the thread's next wake-up (with one limit for every task, never).
    """

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.watched: set[TimeLimits] = set()
        self.wake_at = float("inf")
        self.thread: threading.Thread | None = None

    def watch(self, limits: TimeLimits) -> None:
        with self.cond:
            self.watched.add(limits)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="awa-celery-time-limits", daemon=True)
                self.thread.start()
            if limits.pending[0][0] < self.wake_at:
                self.cond.notify()

    def forget(self, limits: TimeLimits) -> None:
        with self.cond:
            self.watched.discard(limits)

    def _run(self) -> None:
        while True:
            with self.cond:
                now = time.monotonic()
                upcoming = []
                for limits in list(self.watched):
                    next_due = limits.due(now)
                    if next_due is None:
                        self.watched.discard(limits)
                    else:
                        upcoming.append(next_due)
                self.wake_at = min(upcoming, default=float("inf"))
                self.cond.wait(None if not upcoming else max(self.wake_at - now, 0.0))


WATCHDOG = Watchdog()


def parse_rate(value: Any, field: str = "rate_limit") -> float | None:
    """Celery's rate: ``"10/s"``, ``"100/m"``, ``"1000/h"`` or a number (per second); None or 0: no limit."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValidationError(field, f"must be a rate such as '10/m' or a number per second, got {value!r}")
    if isinstance(value, (int, float)):
        rate = float(value)
    elif isinstance(value, str):
        number, _, unit = value.strip().partition("/")
        per = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}.get(unit.strip())
        try:
            amount = float(number)
        except ValueError:
            amount = -1.0
        if per is None or amount < 0:
            raise ValidationError(field, f"must be a rate such as '10/s', '100/m' or '1000/h', got {value!r}")
        rate = amount / per
    else:
        raise ValidationError(field, f"must be a rate such as '10/m' or a number per second, got {value!r}")
    if rate < 0:
        raise ValidationError(field, f"must not be negative, got {value!r}")
    return rate or None


class TokenBucket:
    """``rate`` tokens a second, holding at most one second's worth (at least one token)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.capacity = max(rate, 1.0)
        self.tokens = self.capacity
        self.stamp = time.monotonic()
        self.lock = threading.Lock()

    def take(self) -> float:
        """Take a token; return 0.0, or the seconds until one is available (nothing taken)."""
        with self.lock:
            now = time.monotonic()
            self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
            if self.tokens >= 1.0:
                self.tokens -= 1.0
                return 0.0
            return (1.0 - self.tokens) / self.rate


_buckets: dict[tuple[str, float], TokenBucket] = {}
_buckets_lock = threading.Lock()


def rate_wait(task_name: str, rate: float) -> float:
    """Seconds the task must wait under its rate in this process (0.0: run now)."""
    key = (task_name, rate)
    bucket = _buckets.get(key)
    if bucket is None:
        with _buckets_lock:
            bucket = _buckets.setdefault(key, TokenBucket(rate))
    return bucket.take()
