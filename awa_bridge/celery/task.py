"""``Task``: a function registered as a job kind, called the way Celery calls tasks.

``@app.task`` / ``@shared_task`` build a ``Task`` subclass per function (as
Celery does), so ``base=`` subclasses with ``on_success`` / ``on_failure`` /
``on_retry`` / ``after_return`` hooks work. The job's kind is the task's
name; its args are ``{"args": [...], "kwargs": {...}}``.

* ``task(*args)`` runs the function inline (``self.request.called_directly``).
* ``delay`` / ``apply_async`` insert a job (see ``transaction`` for where),
  or, with ``task_always_eager``, run it at once through ``apply``.
* ``self.retry(...)`` raises ``Retry`` with Celery's counting: with
  ``max_retries=3`` a task runs at most 4 times; past that the ``exc`` given
  is raised (or ``MaxRetriesExceededError``). ``autoretry_for`` wraps the run
  the way Celery's does, with its exponential backoff and full jitter.
"""

from __future__ import annotations

import inspect
import random
import uuid
from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..errors import ValidationError
from . import states
from .errors import MaxRetriesExceededError, Retry, UnsupportedOption
from .options import check_call_options, check_task_options, moment, seconds

if TYPE_CHECKING:
    from .app import Awa
    from .result import AsyncResult, EagerResult

#: awa's cap on attempts; Celery's ``max_retries=None`` (retry forever) maps to it.
MAX_ATTEMPTS = 1000


@dataclass
class Context:
    """``self.request``: the current execution of a task.

    ``id`` is the job id as a string (a uuid in eager mode, None when called
    directly); ``retries`` is ``attempt - 1``; ``job`` is the running
    ``awa_bridge.worker.JobContext`` (None outside the worker) for awa's own
    features (``job.set_progress``, ``job.cancelled``...).
    """

    id: str | None = None
    retries: int = 0
    args: Any = None
    kwargs: Any = None
    is_eager: bool = False
    called_directly: bool = True
    eta: datetime | None = None
    expires: datetime | None = None
    hostname: str | None = None
    delivery_info: dict[str, Any] = field(default_factory=dict)
    ignore_result: bool = False
    task: str | None = None
    job: Any = None
    # set by retry(throw=False): the retry to schedule when the task returns
    _retry: Retry | None = None
    _retry_args: tuple[Any, Any] | None = None
    _max_retries: int | None = None

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)


def exponential_backoff(factor: int, retries: int, maximum: int, full_jitter: bool = False) -> int:
    """Celery's ``get_exponential_backoff_interval``: ``min(maximum, factor * 2**retries)``,
    then with full jitter a uniform pick in ``[0, countdown]`` (``random.randrange(countdown + 1)``)."""
    countdown = min(maximum, factor * (2**retries))
    if full_jitter:
        countdown = random.randrange(countdown + 1)
    return max(0, countdown)


class Task:
    """A Celery-style task; see the module doc. Subclass it and pass ``base=`` for hooks."""

    name: str = ""
    typing: bool = True
    max_retries: int | None = 3
    default_retry_delay: float = 180
    ignore_result: bool = False
    queue: str | None = None
    priority: int | None = None
    expires: Any = None
    autoretry_for: tuple[type[BaseException], ...] = ()
    dont_autoretry_for: tuple[type[BaseException], ...] = ()
    retry_kwargs: Mapping[str, Any] = {}
    retry_backoff: bool | int = False
    retry_backoff_max: int = 600
    retry_jitter: bool = True
    throws: tuple[type[BaseException], ...] = ()
    acks_late: bool = True
    serializer: str = "json"
    _bound: bool = False
    _app: Awa | None = None

    def __init__(self) -> None:
        self._request_var: ContextVar[Context | None] = ContextVar(f"celery_request_{self.name}", default=None)

    def __repr__(self) -> str:
        return f"<@task: {self.name}>"

    # -- the function -------------------------------------------------------------

    def run(self, *args: Any, **kwargs: Any) -> Any:  # replaced per task
        raise NotImplementedError("Tasks must define the run method.")

    @property
    def app(self) -> Awa:
        from .app import current_app

        return self._app or current_app()

    @property
    def request(self) -> Context:
        return self._request_var.get() or Context()

    def push_request(self, request: Context) -> Token[Context | None]:
        return self._request_var.set(request)

    def pop_request(self, token: Token[Context | None]) -> None:
        self._request_var.reset(token)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function here and now, like calling the plain function (Celery's ``__call__``)."""
        token = self.push_request(Context(args=args, kwargs=kwargs, called_directly=True, task=self.name))
        try:
            return self.invoke(args, kwargs)
        finally:
            self.pop_request(token)

    def invoke(self, args: Any, kwargs: Mapping[str, Any]) -> Any:
        """``run`` with Celery's ``autoretry_for`` behaviour around it."""
        try:
            return self.run(*args, **kwargs)
        except Retry:
            raise
        except self.dont_autoretry_for:
            raise
        except self.autoretry_for as exc:
            retry_kwargs = dict(self.retry_kwargs)
            if self.retry_backoff:
                retry_kwargs["countdown"] = exponential_backoff(
                    factor=int(self.retry_backoff),
                    retries=self.request.retries,
                    maximum=int(self.retry_backoff_max),
                    full_jitter=bool(self.retry_jitter),
                )
            raise self.retry(exc=exc, **retry_kwargs) from exc  # raises itself (or exc when exhausted)

    # -- retrying -----------------------------------------------------------------

    def retry(
        self,
        args: Any = None,
        kwargs: Any = None,
        exc: BaseException | None = None,
        throw: bool = True,
        eta: datetime | None = None,
        countdown: float | None = None,
        max_retries: int | None = None,
        **options: Any,
    ) -> Retry:
        """Retry this execution later, with Celery's semantics.

        ``countdown`` (default ``default_retry_delay``) or ``eta`` sets when.
        With ``max_retries`` (default the task's) used up, raises ``exc`` if
        given, else ``MaxRetriesExceededError``. ``args`` / ``kwargs`` replace
        the arguments of the next attempts. ``throw=False`` returns the
        ``Retry`` instead of raising it; the retry happens when the task
        returns (its return value is then dropped).
        """
        if options:
            key = next(iter(options))
            raise UnsupportedOption(
                key, f"{self.name}: retry() takes no {key!r} option on awa (the job keeps its queue)"
            )
        request = self.request
        retries = request.retries + 1
        max_retries = self.max_retries if max_retries is None else max_retries
        if request.called_directly:
            # Not running as a job: like Celery, raise the original error (or Retry).
            if exc is not None:
                raise exc
            raise Retry("Task can be retried", None)
        if not eta and countdown is None:
            countdown = self.default_retry_delay
        if max_retries is not None and retries > max_retries:
            if exc is not None:
                raise exc
            raise MaxRetriesExceededError(
                f"Can't retry {self.name}[{request.id}] args:{request.args} kwargs:{request.kwargs}",
                task_args=request.args,
                task_kwargs=request.kwargs,
            )
        when: Any = eta if eta else countdown
        ret = Retry(exc=exc, when=when, is_eager=request.is_eager)
        request._retry = ret
        request._max_retries = max_retries
        if args is not None or kwargs is not None:
            request._retry_args = (
                list(args) if args is not None else list(request.args or ()),
                dict(kwargs) if kwargs is not None else dict(request.kwargs or {}),
            )
        if throw:
            raise ret
        return ret

    # -- hooks (no-ops, as in Celery) ---------------------------------------------------

    def before_start(self, task_id: str, args: Any, kwargs: Any) -> None:
        """Called before the task runs (in the worker and in eager mode)."""

    def on_success(self, retval: Any, task_id: str, args: Any, kwargs: Any) -> None:
        """Called when the task returned."""

    def on_retry(self, exc: BaseException | None, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        """Called when the task asked to be retried."""

    def on_failure(self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        """Called when the task failed for good."""

    def after_return(self, status: str, retval: Any, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        """Called after the task ended, whatever the outcome."""

    # -- calling --------------------------------------------------------------------------

    def delay(self, *args: Any, **kwargs: Any) -> AsyncResult:
        """``apply_async(args, kwargs)``."""
        return self.apply_async(args, kwargs)

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> AsyncResult:
        """Enqueue a job for this call and return its ``AsyncResult``.

        Options: ``countdown`` / ``eta`` (when to run), ``expires`` (seconds or
        a datetime: not run after that), ``queue``, ``priority`` (Celery's 0-9,
        mapped onto awa's 1-4), ``ignore_result``; awa's own ``connection=``
        (a sync connection or session to write on, in its transaction),
        ``using=`` (a Django alias), ``unique=`` and ``tags=``. Without
        ``connection``/``using`` the job joins the current Django
        ``atomic()`` block if there is one, else it is committed at once.
        Async connections go through ``await aapply_async(...)``.
        """
        from ..drivers import detect_sync
        from ..enqueue import insert_job_sync
        from ..errors import UnsupportedConnection
        from .transaction import current_connection

        app = self.app
        check_call_options(options, f"{self.name}.apply_async")
        if app.conf.task_always_eager:
            return self.apply(args, kwargs, ignore_result=options.get("ignore_result"))
        conn = options.pop("connection", None)
        using = options.pop("using", None)
        prepared = self.prepare(args, kwargs, **options)
        if conn is None:
            conn = current_connection(using)
        if conn is None:
            job = app.insert_own(prepared)
        else:
            try:
                detect_sync(conn)
            except UnsupportedConnection:
                raise TypeError(
                    f"{self.name}.apply_async: {type(conn).__name__} is an async connection; "
                    "use `await task.aapply_async(..., connection=conn)`"
                ) from None
            job = insert_job_sync(conn, prepared)
        return app.AsyncResult(str(job.id), task_name=self.name)

    async def adelay(self, *args: Any, **kwargs: Any) -> AsyncResult:
        return await self.aapply_async(args, kwargs)

    async def aapply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> AsyncResult:
        """``apply_async`` for async code: ``connection=`` may be asyncpg, psycopg's
        ``AsyncConnection`` or SQLAlchemy's ``AsyncConnection`` / ``AsyncSession``."""
        import asyncio

        from ..enqueue import insert_job

        check_call_options(options, f"{self.name}.aapply_async")
        conn = options.pop("connection", None)
        if conn is None or self.app.conf.task_always_eager:
            return await asyncio.to_thread(self.apply_async, args, kwargs, **options)
        if options.pop("using", None) is not None:
            raise ValidationError("using", "give connection= or using=, not both")
        prepared = self.prepare(args, kwargs, **options)
        job = await insert_job(conn, prepared)
        return self.app.AsyncResult(str(job.id), task_name=self.name)

    def prepare(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        """The validated ``PreparedJob`` of a call (arguments checked here, as JSON)."""
        from ..enqueue import prepare_job

        app = self.app
        args, kwargs = self._arguments(args, kwargs)
        now = datetime.now(UTC)
        countdown, eta = options.get("countdown"), options.get("eta")
        if countdown is not None and eta is not None:
            raise ValidationError("countdown", "give countdown or eta, not both")
        run_at = None
        if countdown is not None:
            delay = seconds(countdown, "countdown")
            run_at = moment(delay, "countdown", now) if delay > 0 else None
        elif eta is not None:
            run_at = moment(eta, "eta", now)
        celery_meta: dict[str, Any] = {}
        expires = options.get("expires", self.expires)
        if expires is not None:
            celery_meta["expires"] = moment(expires, "expires", now).isoformat()
        if options.get("ignore_result"):
            celery_meta["ignore_result"] = True
        route = app.route(self.name)
        queue = options.get("queue") or route.get("queue") or self.queue or app.conf.task_default_queue
        priority = options.get("priority")
        if priority is None:
            priority = route.get("priority", self.priority)
        if priority is None:
            priority = app.conf.task_default_priority
        try:
            return prepare_job(
                {"args": args, "kwargs": kwargs},
                kind=self.name,
                queue=queue,
                priority=app.awa_priority(priority),
                max_attempts=self.max_attempts,
                run_at=run_at,
                metadata={"celery": celery_meta} if celery_meta else None,
                tags=options.get("tags"),
                unique=options.get("unique"),
            )
        except ValidationError as exc:
            field_name = exc.field
            if field_name.startswith("args.args") or field_name.startswith("args.kwargs"):
                field_name = field_name[len("args.") :]
            raise ValidationError(field_name, f"{exc.message} (task {self.name})") from None

    @property
    def max_attempts(self) -> int:
        """awa's ``max_attempts`` for this task: ``max_retries + 1`` (None: awa's cap, 1000)."""
        if self.max_retries is None:
            return MAX_ATTEMPTS
        return min(self.max_retries + 1, MAX_ATTEMPTS)

    def _arguments(self, args: Any, kwargs: Any) -> tuple[list[Any], dict[str, Any]]:
        if args is None:
            args = ()
        if isinstance(args, (str, bytes, Mapping)) or not isinstance(args, (list, tuple)):
            raise TypeError(f"{self.name}: args must be a list or tuple, got {type(args).__name__}")
        if kwargs is None:
            kwargs = {}
        if not isinstance(kwargs, Mapping):
            raise TypeError(f"{self.name}: kwargs must be a dict, got {type(kwargs).__name__}")
        if self.typing:
            try:
                inspect.signature(self.run).bind(*args, **kwargs)
            except TypeError as exc:
                raise TypeError(f"{self.name}() {exc}") from None
        return list(args), dict(kwargs)

    def apply(
        self,
        args: Any = None,
        kwargs: Any = None,
        *,
        task_id: str | None = None,
        retries: int = 0,
        throw: bool | None = None,
        ignore_result: bool | None = None,
    ) -> EagerResult:
        """Run the task here, now, as the worker would (eager mode); return an ``EagerResult``.

        Arguments go through JSON as they would through the database, so a
        value JSON cannot carry fails here too. A retry runs again at once
        (Celery's eager behaviour); ``throw`` (default ``task_eager_propagates``)
        re-raises the task's error instead of returning a FAILURE result.
        """
        import json
        import traceback as tb

        from .result import EagerResult

        if throw is None:
            throw = bool(self.app.conf.task_eager_propagates)
        prepared = self.prepare(args, kwargs)
        payload = json.loads(prepared.args_json)
        args, kwargs = payload["args"], payload["kwargs"]
        task_id = task_id or str(uuid.uuid4())
        while True:
            request = Context(
                id=task_id,
                retries=retries,
                args=args,
                kwargs=kwargs,
                is_eager=True,
                called_directly=False,
                task=self.name,
                ignore_result=bool(ignore_result),
            )
            token = self.push_request(request)
            try:
                self.before_start(task_id, args, kwargs)
                value = self.invoke(args, kwargs)
            except Retry as retry:
                self.on_retry(retry.exc, task_id, args, kwargs, None)
                if request._retry_args is not None:
                    args, kwargs = request._retry_args
                retries += 1
                if retries >= MAX_ATTEMPTS:  # max_retries=None retrying for ever: stop where awa would
                    raise retry.exc or MaxRetriesExceededError(f"{self.name} retried {retries} times") from None
                continue
            except Exception as exc:
                self.on_failure(exc, task_id, args, kwargs, None)
                self.after_return(states.FAILURE, exc, task_id, args, kwargs, None)
                if throw:
                    raise
                return EagerResult(task_id, exc, states.FAILURE, traceback=tb.format_exc(), name=self.name)
            finally:
                self.pop_request(token)
            if request._retry is not None:  # retry(throw=False) and then returned
                retries += 1
                if request._retry_args is not None:
                    args, kwargs = request._retry_args
                continue
            self.on_success(value, task_id, args, kwargs)
            self.after_return(states.SUCCESS, value, task_id, args, kwargs, None)
            return EagerResult(task_id, value, states.SUCCESS, name=self.name)

    def AsyncResult(self, task_id: str | int) -> AsyncResult:
        return self.app.AsyncResult(task_id, task_name=self.name)


# -- building tasks from functions -------------------------------------------------------

#: Tasks declared with ``@shared_task``: every app knows them.
SHARED_TASKS: dict[str, Task] = {}


def default_name(fun: Callable[..., Any], app: Awa | None) -> str:
    """Celery's default task name: the function's module and name (``app.main`` for ``__main__``)."""
    module = fun.__module__
    if module == "__main__" and app is not None and app.main:
        module = app.main
    return f"{module}.{fun.__name__}"


def _exception_types(value: Any, field_name: str) -> tuple[type[BaseException], ...]:
    items = (value,) if isinstance(value, type) else tuple(value or ())
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise ValidationError(field_name, f"must be exception classes, got {item!r}")
    return items


def build_task(fun: Callable[..., Any], app: Awa | None, options: dict[str, Any]) -> Task:
    """Validate ``options`` (Celery's task options) and build the task for ``fun``."""
    where = f"@task {fun.__module__}.{getattr(fun, '__qualname__', fun)}"
    check_task_options(options, where)
    if inspect.iscoroutinefunction(fun):
        raise UnsupportedOption(
            "async", f"{where}: Celery tasks are plain functions; register async handlers with Client.task"
        )
    options = dict(options)
    base = options.pop("base", None) or (app.task_cls if app is not None else Task)
    if not (isinstance(base, type) and issubclass(base, Task)):
        raise ValidationError("base", f"{where}: must be a subclass of awa_bridge.celery.Task, got {base!r}")
    bind = bool(options.pop("bind", False))
    name = options.pop("name", None) or default_name(fun, app)
    if not isinstance(name, str) or not 1 <= len(name) <= 200:
        raise ValidationError("name", f"{where}: must be a task name of 1 to 200 characters, got {name!r}")
    attrs: dict[str, Any] = {
        "name": name,
        "run": fun if bind else staticmethod(fun),
        "__doc__": fun.__doc__,
        "__module__": fun.__module__,
        "__wrapped__": fun,
        "_bound": bind,
    }
    for key, value in options.items():
        attrs[key] = _task_option(key, value, f"{where}: {key}")
    cls = type(fun.__name__, (base,), attrs)
    task = cls()
    task._app = app
    # The enqueue-time checks (queue name, priority range) run now, not at the first delay().
    if task.queue is not None:
        from .options import _check_queue

        _check_queue(task.queue, "queue")
    if task.priority is not None:
        from .options import check_celery_priority

        check_celery_priority(task.priority)
    return task


def _task_option(key: str, value: Any, where: str) -> Any:
    if key in ("autoretry_for", "dont_autoretry_for", "throws"):
        return _exception_types(value, key)
    if key == "max_retries":
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValidationError(key, f"{where}: must be an integer >= 0 or None, got {value!r}")
        return value
    if key in ("default_retry_delay", "retry_backoff_max"):
        return seconds(value, key)
    if key == "retry_backoff":
        if isinstance(value, bool):
            return value
        if not isinstance(value, (int, float)) or value < 0:
            raise ValidationError(key, f"{where}: must be True/False or a factor in seconds, got {value!r}")
        return value
    if key == "retry_kwargs":
        if not isinstance(value, Mapping):
            raise ValidationError(key, f"{where}: must be a dict, got {value!r}")
        unknown = set(value) - {"countdown", "eta", "max_retries", "exc", "throw"}
        if unknown:
            raise UnsupportedOption(f"retry_kwargs.{sorted(unknown)[0]}", f"{where}: not a retry() option awa takes")
        return dict(value)
    if key in ("ignore_result", "retry_jitter", "typing", "acks_late", "reject_on_worker_lost", "track_started"):
        return bool(value)
    return value
