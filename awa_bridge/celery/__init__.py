"""A Celery-compatible task API on awa: a Celery project moves by changing imports.

::

    from awa_bridge.celery import Celery, shared_task      # was: from celery import Celery, shared_task
    from awa_bridge.celery.schedules import crontab        # was: from celery.schedules import crontab

Tasks are awa jobs (kind = the task's name, args = ``{"args": [...],
"kwargs": {...}}``), enqueued inside the caller's transaction when there is
one, run by the awa worker (``app.client()``, or ``manage.py awa_worker``
with Django), with Celery's retry semantics and results in PostgreSQL. What
Celery does that awa cannot do faithfully is refused loudly where it is
written. Canvas (``chain``, ``group``, ``chord``, signatures) runs on awa
jobs with results in PostgreSQL; ``signals`` and ``utils.log.get_task_logger``
are Celery's. Guide and option tables: docs/howto/celery.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, overload

from . import signals, states
from .app import Awa, Celery, current_app
from .beat import crontab, schedule
from .canvas import Signature, chain, chord, chunks, group, maybe_signature, signature, subtask, xmap, xstarmap
from .errors import (
    CeleryError,
    ChordError,
    ImproperlyConfigured,
    MaxRetriesExceededError,
    NotRegistered,
    Retry,
    SoftTimeLimitExceeded,
    TaskError,
    TaskRevokedError,
    TimeLimitExceeded,
    TimeoutError,
    UnsupportedOption,
)
from .result import AsyncResult, EagerResult, GroupResult
from .task import SHARED_TASKS, Context, Task, build_task
from .transaction import register_transaction_provider, unregister_transaction_provider


@overload
def shared_task(fun: Callable[..., Any], /) -> Task: ...


@overload
def shared_task(**options: Any) -> Callable[[Callable[..., Any]], Task]: ...


def shared_task(*args: Any, **options: Any) -> Task | Callable[[Callable[..., Any]], Task]:
    """``@shared_task`` / ``@shared_task(**options)``: a task every app knows (it runs with the current app)."""

    def decorate(fun: Callable[..., Any]) -> Task:
        task = build_task(fun, None, options)
        existing = SHARED_TASKS.get(task.name)
        if existing is not None and getattr(existing, "__wrapped__", None) is not fun:
            origin = f"{fun.__module__}.{fun.__qualname__}"
            old = getattr(existing, "__wrapped__", None)
            if old is None or f"{old.__module__}.{old.__qualname__}" != origin:
                from ..errors import ValidationError

                raise ValidationError("name", f"two shared tasks are named {task.name!r}")
        SHARED_TASKS[task.name] = task
        return task

    if len(args) == 1 and callable(args[0]) and not options:
        return decorate(args[0])
    if args:
        raise TypeError("shared_task() takes the function, or options as keywords")
    return decorate


__all__ = [
    "AsyncResult",
    "Awa",
    "Celery",
    "CeleryError",
    "ChordError",
    "Context",
    "EagerResult",
    "GroupResult",
    "ImproperlyConfigured",
    "MaxRetriesExceededError",
    "NotRegistered",
    "Retry",
    "Signature",
    "SoftTimeLimitExceeded",
    "Task",
    "TaskError",
    "TaskRevokedError",
    "TimeLimitExceeded",
    "TimeoutError",
    "UnsupportedOption",
    "chain",
    "chord",
    "chunks",
    "crontab",
    "current_app",
    "group",
    "maybe_signature",
    "register_transaction_provider",
    "schedule",
    "shared_task",
    "signals",
    "signature",
    "states",
    "subtask",
    "unregister_transaction_provider",
    "xmap",
    "xstarmap",
]
