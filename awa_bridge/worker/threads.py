"""A small pool of daemon threads for sync handlers.

Daemon threads, unlike ``ThreadPoolExecutor``'s, do not keep a process alive
at exit: after the drain timeout a worker must be able to leave even if a
sync handler never returns (its attempt was released and will run again).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any

from .aio import call_from_thread

_STOP = object()


class DaemonThreadPool:
    """Up to ``size`` threads, started as sync handlers need them (a worker of async handlers starts none)."""

    def __init__(self, size: int, name: str = "awa-sync") -> None:
        self._size = size
        self._name = name
        self._tasks: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._idle = 0  # threads waiting for work that no submitted task has been promised
        self._queued = 0  # tasks submitted while every thread was busy and no more could start

    def submit(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Run ``fn(*args)`` on a pool thread; the result arrives on ``loop``."""
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            if self._idle:
                self._idle -= 1
            elif len(self._threads) < self._size:
                thread = threading.Thread(target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
            else:
                self._queued += 1
        self._tasks.put((loop, future, fn, args))
        return future

    def _work(self) -> None:
        while True:
            item = self._tasks.get()
            if item is _STOP:
                return
            loop, future, fn, args = item
            try:
                result = fn(*args)
            except BaseException as exc:
                call_from_thread(loop, _settle, future, None, exc)
            else:
                call_from_thread(loop, _settle, future, result, None)
            with self._lock:
                if self._queued:
                    self._queued -= 1  # this thread takes a task that waits for one
                else:
                    self._idle += 1

    def shutdown(self) -> None:
        """Ask idle threads to stop; busy ones finish their job or die with the process."""
        with self._lock:
            started = len(self._threads)
        for _ in range(started):
            self._tasks.put(_STOP)


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
