"""Lifecycle hooks: best effort, in process, never allowed to break a worker."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("awa_bridge.worker")

# "ready" and "shutdown" are about the worker itself (their subject is the Client): after it has
# started claiming, and when it begins to shut down.
EVENTS = ("started", "completed", "retried", "exhausted", "cancelled", "rescued", "snoozed", "ready", "shutdown")


class Hooks:
    def __init__(self) -> None:
        self.listeners: dict[str, list[Callable[[Any], Any]]] = {event: [] for event in EVENTS}

    def add(self, event: str, fn: Callable[[Any], Any]) -> None:
        if event not in self.listeners:
            raise ValueError(f"unknown hook event {event!r}; events are {', '.join(EVENTS)}")
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
            raise TypeError(
                f"{event} hook {getattr(fn, '__qualname__', fn)!r} is an async def: hooks are plain functions"
                " called on the worker's event loop (a coroutine would never be awaited); to do async work,"
                " start it from a plain function with asyncio.get_running_loop().create_task(...)"
            )
        self.listeners[event].append(fn)

    def fire(self, event: str, subject: Any) -> None:
        for fn in self.listeners.get(event, ()):
            try:
                fn(subject)
            except Exception:
                log.exception("%s hook %r raised; ignored", event, fn)
