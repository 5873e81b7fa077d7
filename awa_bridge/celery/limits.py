"""Per-task time limits and rate limits, enforced in the worker process.

Time limits. A task runs in one of the worker's threads; one watchdog thread
serves every running task's limits. At ``soft_time_limit``
``SoftTimeLimitExceeded`` is raised inside it (the task may catch it and clean
up, as in Celery); at ``time_limit`` ``TimeLimitExceeded`` is raised there and
``job.cancelled`` is set, and the task fails with it, as Celery's hard limit
fails it. Both are delivered with ``PyThreadState_SetAsyncExc``: at the next
Python bytecode of that thread, so code blocked inside C (a socket read with no
timeout, a long C extension call) sees it only when that call returns. The
queue's deadline stays the backstop for such code (the leader rescues the
attempt), and a process executor able to kill the attempt is where a hard
limit belongs once the worker has one (see docs/howto/celery.md).

Rate limits. ``rate_limit="10/m"`` is Celery's per-worker-instance limit: a
token bucket per task in this process. A task over its rate is snoozed (run
again later without spending an attempt) instead of run.
"""

from __future__ import annotations

import ctypes
import threading
import time
from types import TracebackType
from typing import Any

from ..errors import ValidationError
from .errors import SoftTimeLimitExceeded, TimeLimitExceeded


def _raise_in(thread_id: int, exc_type: type[BaseException]) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc_type))


class TimeLimits:
    """``with TimeLimits(soft, hard, job):`` around one run of a task in the current thread.

    An exception is only ever injected while the block runs: the watchdog checks
    ``armed`` under a lock that ``__exit__`` takes before disarming, so one
    injected just as the task returned surfaces inside ``__exit__`` (the limit
    did pass) and never later in the worker's own code.
    """

    def __init__(self, soft: float | None, hard: float | None, job: Any = None) -> None:
        self.soft, self.hard, self.job = soft, hard, job
        self.lock = threading.Lock()
        self.armed = False
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
