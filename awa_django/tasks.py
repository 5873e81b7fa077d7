"""``@awa_django.task``: a function becomes a job kind, enqueued on Django's connection.

::

    @awa_django.task(queue="email", max_attempts=5)
    def send_confirmation_email(order_id: int, to: str) -> None:
        ...

    with transaction.atomic():
        order = Order.objects.create(...)
        send_confirmation_email.enqueue(order.id, to=order.email)      # commits with the order
        send_confirmation_email.using(priority=1, run_at=later).enqueue(order.id, to=order.email)

The job's args are the function's arguments by name (``{"order_id": 1, "to":
"a@b.com"}``), so they must be JSON values; its kind is the function's dotted
path unless ``kind=`` says otherwise. ``manage.py awa_worker`` runs the
function in a worker thread with Django's connection handling around it (old
connections closed before and after, as for a request). With
``transactional=True`` it runs inside ``transaction.atomic()`` on the awa
database alias, and the job is marked completed in that same transaction,
fenced by its run_lease: the function's ORM writes commit exactly when the job
does. Raising ``RetryAfter``, ``Snooze``, ``Cancel`` or ``TerminalError``
(from ``awa_bridge.worker``) works as for any awa handler; any other exception
is retried with backoff until ``max_attempts``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, overload

from awa_bridge import Job, ValidationError
from awa_bridge.enqueue import DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY, DEFAULT_QUEUE, prepare_job

from .errors import InvalidTaskPath

#: Every ``@awa_django.task`` defined so far, by kind.
TASKS: dict[str, AwaTask] = {}

_OPTIONS = ("queue", "priority", "max_attempts", "run_at", "tags", "metadata", "unique", "database")


@dataclasses.dataclass(frozen=True)
class AwaTask:
    """A function registered as a job kind. Call it to run it inline; ``.enqueue()`` to queue it."""

    fn: Callable[..., Any]
    kind: str
    queue: str = DEFAULT_QUEUE
    priority: int = DEFAULT_PRIORITY
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    transactional: bool = False
    takes_job: bool = False
    tags: tuple[str, ...] = ()
    unique: Any = None
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    @property
    def name(self) -> str:
        return self.fn.__name__

    def using(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        run_at: datetime | str | None = None,
        tags: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        unique: Any = None,
        database: str | None = None,
    ) -> AwaTask:
        """A copy with other enqueue options (``database`` is the alias to enqueue on)."""
        given = {
            "queue": queue,
            "priority": priority,
            "max_attempts": max_attempts,
            "run_at": run_at,
            "tags": tags,
            "metadata": metadata,
            "unique": unique,
            "database": database,
        }
        options = {**self.options, **{k: v for k, v in given.items() if v is not None}}
        # Validate now, not at enqueue time in the middle of a request.
        self._prepare({}, options)
        return dataclasses.replace(self, options=options)

    def bind(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The job args for a call: every argument by its parameter name."""
        signature = inspect.signature(self.fn)
        if self.takes_job:
            args = (None, *args)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.kind}: {exc}") from None
        bound.apply_defaults()
        data = dict(bound.arguments)
        if self.takes_job:
            data.pop(next(iter(signature.parameters)))
        return data

    def _prepare(self, data: dict[str, Any], options: Mapping[str, Any]) -> Any:
        return prepare_job(
            data,
            kind=self.kind,
            queue=options.get("queue", self.queue),
            priority=options.get("priority", self.priority),
            max_attempts=options.get("max_attempts", self.max_attempts),
            run_at=options.get("run_at"),
            tags=options.get("tags", self.tags),
            metadata=options.get("metadata"),
            unique=options.get("unique", self.unique),
        )

    def prepare(self, *args: Any, **kwargs: Any) -> Any:
        """The validated ``PreparedJob`` for a call (for ``awa_django.insert_many``)."""
        return self._prepare(self.bind(*args, **kwargs), self.options)

    def enqueue(self, *args: Any, **kwargs: Any) -> Job:
        """Insert a job for this call on Django's connection, in the current transaction; returns it."""
        from .enqueue import insert_job

        return insert_job(self.prepare(*args, **kwargs), using=self.options.get("database"))

    def run(self, job: Any) -> Any:
        """Run one attempt of a job of this kind (the worker's entry point for plain functions)."""
        kwargs = job.args if isinstance(job.args, dict) else {}
        if self.takes_job:
            return self.fn(job, **kwargs)
        return self.fn(**kwargs)

    async def arun(self, job: Any) -> Any:
        """Run one attempt of an ``async def`` task on the worker's event loop."""
        kwargs = job.args if isinstance(job.args, dict) else {}
        if self.takes_job:
            return await self.fn(job, **kwargs)
        return await self.fn(**kwargs)


@overload
def task(fn: Callable[..., Any], /) -> AwaTask: ...
@overload
def task(
    fn: None = None,
    /,
    *,
    kind: str | None = None,
    queue: str = DEFAULT_QUEUE,
    priority: int = DEFAULT_PRIORITY,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    transactional: bool = False,
    takes_job: bool = False,
    tags: Sequence[str] = (),
    unique: Any = None,
) -> Callable[[Callable[..., Any]], AwaTask]: ...
def task(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    kind: str | None = None,
    queue: str = DEFAULT_QUEUE,
    priority: int = DEFAULT_PRIORITY,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    transactional: bool = False,
    takes_job: bool = False,
    tags: Sequence[str] = (),
    unique: Any = None,
) -> AwaTask | Callable[[Callable[..., Any]], AwaTask]:
    """Register a function as a job kind (``@task`` or ``@task(queue=..., ...)``).

    ``takes_job=True`` passes the running job (``awa_bridge.worker.JobContext``:
    ``job.id``, ``job.attempt``, ``job.set_progress(...)``) as the first
    argument. ``unique`` is as for ``insert_job``. Options are validated here,
    at import time.
    """

    def decorate(func: Callable[..., Any]) -> AwaTask:
        resolved = kind or f"{func.__module__}.{func.__qualname__}"
        if "<locals>" in resolved:
            raise ValidationError("task", f"{func.__qualname__} must be defined at module level (give kind= too)")
        for param in inspect.signature(func).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ValidationError(
                    "task", f"{resolved}: *args/**kwargs are not supported; job args are the named parameters"
                )
        if inspect.iscoroutinefunction(func) and transactional:
            raise ValidationError("transactional", f"{resolved}: transactional tasks must be plain (sync) functions")
        if takes_job and not inspect.signature(func).parameters:
            raise ValidationError("takes_job", f"{resolved}: takes_job=True needs a first parameter for the job")
        result = AwaTask(
            fn=func,
            kind=resolved,
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            transactional=transactional,
            takes_job=takes_job,
            tags=tuple(tags),
            unique=unique,
        )
        result._prepare({}, {})  # validate kind, queue, priority, max_attempts, tags, unique
        existing = TASKS.get(resolved)
        if existing is not None and existing.fn is not func and _origin(existing.fn) != _origin(func):
            raise ValidationError(
                "kind", f"two tasks claim kind {resolved!r}: {_origin(existing.fn)} and {_origin(func)}"
            )
        TASKS[resolved] = result
        return result

    return decorate(fn) if fn is not None else decorate


def _origin(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def resolve_task(path: str, *, key: str = "task") -> AwaTask:
    """The ``AwaTask`` at a dotted path (or registered under that kind)."""
    from django.utils.module_loading import import_string

    if path in TASKS:
        return TASKS[path]
    try:
        found = import_string(path)
    except ImportError as exc:
        raise InvalidTaskPath(f"{key}: cannot import {path!r}: {exc}") from None
    if not isinstance(found, AwaTask):
        raise InvalidTaskPath(f"{key}: {path!r} is a {type(found).__name__}, not an @awa_django.task")
    return found


# -- running in the worker ------------------------------------------------------------


def with_django_connections(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Wrap a sync handler in Django's per-request connection handling.

    Before and after each attempt: ``close_old_connections()`` (connections
    past ``CONN_MAX_AGE`` or broken are closed; with the default
    ``CONN_MAX_AGE = 0`` every attempt gets a fresh one and leaves none open)
    and the query log is reset, as Django does around a request.
    """
    from django.db import close_old_connections, reset_queries

    def handler(job: Any) -> Any:
        reset_queries()
        close_old_connections()
        try:
            return fn(job)
        finally:
            close_old_connections()

    handler.__name__ = getattr(fn, "__name__", "handler")
    handler.__qualname__ = getattr(fn, "__qualname__", "handler")
    return handler


def with_django_connections_async(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The async twin: Django's connection handling around an ``async def`` task.

    Its ORM calls go through ``sync_to_async`` (thread-sensitive: one shared
    thread), so old connections are closed in that thread, before and after,
    as Django's ASGI handler does around a request.
    """
    from asgiref.sync import sync_to_async
    from django.db import close_old_connections

    async def handler(job: Any) -> Any:
        await sync_to_async(close_old_connections)()
        try:
            return await fn(job)
        finally:
            await sync_to_async(close_old_connections)()

    handler.__name__ = getattr(fn, "__name__", "handler")
    handler.__qualname__ = getattr(fn, "__qualname__", "handler")
    return handler


def atomic_transaction(alias: str) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """A transaction provider for the runtime: ``atomic()`` on ``alias``, yielding Django's connection.

    The runtime runs the handler and then the job's guarded completion inside
    it, so both commit (or roll back) together.
    """

    @contextlib.contextmanager
    def begin() -> Iterator[Any]:
        from django.db import close_old_connections, connections, reset_queries, transaction

        reset_queries()
        close_old_connections()
        try:
            with transaction.atomic(using=alias):
                yield connections[alias]
        finally:
            close_old_connections()

    return begin
