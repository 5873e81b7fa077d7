"""Celery's task and worker signals (``celery.signals``), sent with Celery's arguments.

::

    from awa_bridge.celery.signals import task_failure     # was: from celery.signals import task_failure

    @task_failure.connect
    def report(sender=None, task_id=None, exception=None, **kwargs): ...

A receiver that raises is logged and ignored (as Celery's ``send`` does), so a
monitoring hook never changes a task's outcome. Receivers are kept by strong
reference; ``connect(sender=task)`` limits one to a task (or a task name).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("awa_bridge.celery")

Receiver = Callable[..., Any]


class Signal:
    """One signal: ``connect`` receivers (optionally for one sender), ``send`` to them all."""

    def __init__(self, name: str, providing_args: tuple[str, ...] = ()) -> None:
        self.name = name
        self.providing_args = providing_args
        self.receivers: list[tuple[Receiver, Any]] = []

    def __repr__(self) -> str:
        return f"<Signal: {self.name}>"

    def connect(self, receiver: Receiver | None = None, *, sender: Any = None, **options: Any) -> Any:
        """``@sig.connect``, ``@sig.connect(sender=...)`` or ``sig.connect(fn)``; returns the receiver."""

        def add(fn: Receiver) -> Receiver:
            if not any(r is fn and s is sender for r, s in self.receivers):
                self.receivers.append((fn, sender))
            return fn

        return add(receiver) if receiver is not None else add

    def disconnect(self, receiver: Receiver, sender: Any = None) -> None:
        self.receivers = [(r, s) for r, s in self.receivers if not (r is receiver and s is sender)]

    def send(self, sender: Any, **named: Any) -> list[tuple[Receiver, Any]]:
        """Call every receiver for ``sender``; return ``[(receiver, response or exception)]``."""
        responses: list[tuple[Receiver, Any]] = []
        for receiver, wanted in list(self.receivers):
            if wanted is not None and not _matches(wanted, sender):
                continue
            try:
                responses.append((receiver, receiver(signal=self, sender=sender, **named)))
            except Exception as exc:
                log.exception("signal %s receiver %r raised; ignored", self.name, receiver)
                responses.append((receiver, exc))
        return responses


def _matches(wanted: Any, sender: Any) -> bool:
    if wanted is sender:
        return True
    name = getattr(sender, "name", sender)
    return isinstance(wanted, str) and wanted == name


task_prerun = Signal("task_prerun", ("task_id", "task", "args", "kwargs"))
task_postrun = Signal("task_postrun", ("task_id", "task", "args", "kwargs", "retval", "state"))
task_success = Signal("task_success", ("result",))
task_failure = Signal("task_failure", ("task_id", "exception", "args", "kwargs", "traceback", "einfo"))
task_retry = Signal("task_retry", ("request", "reason", "einfo"))
worker_ready = Signal("worker_ready")
worker_shutdown = Signal("worker_shutdown")

__all__ = [
    "Signal",
    "task_failure",
    "task_postrun",
    "task_prerun",
    "task_retry",
    "task_success",
    "worker_ready",
    "worker_shutdown",
]
