"""The exceptions of the Celery-compatible API, named as in ``celery.exceptions``.

Code that catches ``celery.exceptions.Retry`` or ``TimeoutError`` keeps working
after ``from awa_bridge.celery.errors import Retry, TimeoutError``. Every class
is an ``AwaError`` too.
"""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import Any

from ..errors import AwaError, ValidationError


class CeleryError(AwaError):
    """Base class of the Celery-compatible layer's errors."""


class UnsupportedOption(ValidationError):
    """A Celery option or setting without a faithful meaning here; ``field`` names it.

    Raised where the option is given (at decoration time for task options, at
    call time for ``apply_async`` options, at configuration time for settings),
    never ignored.
    """


class ImproperlyConfigured(CeleryError):
    """The app is missing something it needs (a database URL, a task it was asked to run)."""


class NotRegistered(CeleryError, KeyError):
    """No task of that name is registered with the app."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "task not registered"


class Retry(CeleryError):
    """Raised by ``self.retry()``: the task is retried after ``when`` (seconds or a datetime).

    As in Celery, ``raise self.retry(...)`` and a plain ``self.retry(...)`` both
    raise it; ``exc`` is the exception that caused the retry.
    """

    def __init__(
        self,
        message: str | None = None,
        exc: BaseException | None = None,
        when: float | datetime | None = None,
        is_eager: bool = False,
        sig: Any = None,
    ) -> None:
        self.message = message
        self.exc = exc
        self.when = when
        self.is_eager = is_eager
        self.sig = sig
        super().__init__(message, exc, when)

    def humanize(self) -> str:
        if isinstance(self.when, (int, float)):
            return f"in {self.when}s"
        return f"at {self.when}"

    def __str__(self) -> str:
        if self.message:
            return self.message
        if self.exc is not None:
            return f"Retry {self.humanize()}: {self.exc!r}"
        return f"Retry {self.humanize()}"


class MaxRetriesExceededError(CeleryError):
    """``self.retry()`` without ``exc`` once ``max_retries`` is used up."""

    def __init__(self, *args: Any, task_args: Any = None, task_kwargs: Any = None) -> None:
        self.task_args = task_args
        self.task_kwargs = task_kwargs
        super().__init__(*args)


class TimeoutError(CeleryError, builtins.TimeoutError):
    """``AsyncResult.get(timeout=...)`` ran out of time (also a builtin ``TimeoutError``)."""


class TaskRevokedError(CeleryError):
    """The task was revoked (its job cancelled, or it expired before it ran)."""


class TaskError(CeleryError):
    """A failed task's error whose class could not be rebuilt here.

    ``exc_type`` is the original class's dotted path (``"Error"`` for awa's own
    verdict, not an exception: an unknown job kind...), ``exc_message`` its
    message; ``traceback`` is the worker's traceback text.
    """

    def __init__(self, exc_type: str, exc_message: str, traceback: str | None = None) -> None:
        self.exc_type = exc_type
        self.exc_message = exc_message
        self.traceback = traceback
        if exc_type == "Error" and exc_message:
            super().__init__(exc_message)
        else:
            super().__init__(f"{exc_type}: {exc_message}" if exc_message else exc_type)


class SoftTimeLimitExceeded(CeleryError):
    """Raised inside a task when its ``soft_time_limit`` passes; the task may catch it and clean up."""


class TimeLimitExceeded(CeleryError):
    """The task ran past its hard ``time_limit``: the attempt is stopped and the task fails."""


class WorkerLostError(CeleryError):
    """The task's last attempt ended with its worker: it died, or the attempt ran past its deadline."""


class ChordError(CeleryError):
    """A chord's callback did not run because a member of its header failed."""


class ExceptionInfo:
    """What Celery's hooks and signals get as ``einfo``: the exception, its type and traceback."""

    def __init__(self, exc: BaseException) -> None:
        import traceback as tb

        self.exception = exc
        self.type = type(exc)
        self.tb = exc.__traceback__
        self.traceback = "".join(tb.format_exception(type(exc), exc, exc.__traceback__))

    def __str__(self) -> str:
        return self.traceback
