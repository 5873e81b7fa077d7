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
    def __init__(self, size: int, name: str = "awa-sync") -> None:
        self._tasks: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(size)]
        for thread in self._threads:
            thread.start()

    def submit(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Run ``fn(*args)`` on a pool thread; the result arrives on ``loop``."""
        future: asyncio.Future[Any] = loop.create_future()
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

    def shutdown(self) -> None:
        """Ask idle threads to stop; busy ones finish their job or die with the process."""
        for _ in self._threads:
            self._tasks.put(_STOP)


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
