"""``Task``: a function registered as a job kind, called the way Celery calls tasks.

``@app.task`` / ``@shared_task`` build a ``Task`` subclass per function (as
Celery does), so ``base=`` subclasses with ``on_success`` / ``on_failure`` /
``on_retry`` / ``after_return`` hooks work. The job's kind is the task's
name; its args are ``{"args": [...], "kwargs": {...}}``.

* ``task(*args)`` runs the function inline (``self.request.called_directly``).
* ``delay`` / ``apply_async`` insert a job (see ``transaction`` for where),
  or, with ``task_always_eager``, run it at once through ``apply``, after the
  same checks: a unit test refuses the call production refuses.
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
from .options import check_call_options, check_task_options, check_using, moment, seconds
from .serialization import encode

if TYPE_CHECKING:
    from .app import Awa
    from .result import AsyncResult, EagerResult

#: awa's cap on attempts; Celery's ``max_retries=None`` (retry forever) maps to it.
MAX_ATTEMPTS = 1000


@dataclass
class Context:
    """``self.request``: the current execution of a task.

    ``id`` is the task id: the job id as a string, or the uuid a canvas gave
    it (a uuid in eager mode, None when called directly); ``retries`` counts
    explicit retries and autoretries only (not re-runs after a lost worker);
    ``job`` is the running
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
    group: str | None = None
    group_index: int | None = None
    chord: Any = None
    chain: Any = None
    callbacks: Any = None
    errbacks: Any = None
    parent_id: str | None = None
    root_id: str | None = None
    timelimit: tuple[Any, Any] = (None, None)
    # when the run began (time.monotonic()), for task_success's runtime
    _started: float = 0.0
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
    return max(0, int(countdown))


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
    time_limit: float | None = None
    soft_time_limit: float | None = None
    rate_limit: Any = None
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
        """``run`` with Celery's ``autoretry_for`` behaviour around it (for an ``async def`` task: a
        coroutine doing that, which ``limits.run_coroutine`` runs)."""
        if self.is_async:
            return self._ainvoke(args, kwargs)
        try:
            return self.run(*args, **kwargs)
        except Exception as exc:
            raise self._autoretry(exc)  # noqa: B904 (exc itself, or the retry raised for it)

    async def _ainvoke(self, args: Any, kwargs: Mapping[str, Any]) -> Any:
        try:
            return await self.run(*args, **kwargs)
        except Exception as exc:
            raise self._autoretry(exc)  # noqa: B904 (exc itself, or the retry raised for it)

    def _autoretry(self, exc: Exception) -> BaseException:
        """What to raise for ``exc`` raised by ``run``: itself, or the retry ``autoretry_for`` asks for."""
        if isinstance(exc, (Retry, *self.dont_autoretry_for)) or not isinstance(exc, self.autoretry_for):
            return exc
        retry_kwargs = dict(self.retry_kwargs)
        if self.retry_backoff:
            retry_kwargs["countdown"] = exponential_backoff(
                factor=int(self.retry_backoff),
                retries=self.request.retries,
                maximum=int(self.retry_backoff_max),
                full_jitter=bool(self.retry_jitter),
            )
        try:
            return self.retry(exc=exc, **retry_kwargs)  # raises itself (or exc when exhausted) unless throw=False
        except BaseException as raised:
            return raised

    @property
    def is_async(self) -> bool:
        """An ``async def`` task: it runs on an event loop of its own (see ``limits.run_coroutine``)."""
        return inspect.iscoroutinefunction(self.run)

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

    # -- state, limits ------------------------------------------------------------------

    def update_state(self, task_id: str | None = None, state: str | None = None, meta: Any = None, **kw: Any) -> None:
        """Publish a custom state (``"PROGRESS"``) and ``meta`` while the task runs:
        ``AsyncResult.state`` / ``.info`` show them until the task ends.

        Written at once (fenced by the attempt's run_lease); ``meta`` goes through
        Celery's JSON. Only the running task's own state can be set.
        """
        request = self.request
        if task_id is not None and str(task_id) != str(request.id):
            raise UnsupportedOption("task_id", f"{self.name}: update_state sets the running task's own state only")
        if kw:
            raise UnsupportedOption(next(iter(kw)), "update_state() takes task_id, state and meta")
        job = request.job
        if job is None:
            return  # called directly: there is no stored state to update
        from .serialization import encode

        job.update_metadata({"celery_state": {"state": state or states.PENDING, "meta": encode(meta, "meta")}})
        job.flush_progress()

    def rate_wait(self) -> float:
        """Seconds to wait under ``rate_limit`` (or ``task_default_rate_limit``) in this process; 0: run now."""
        from .limits import parse_rate, rate_wait

        rate = parse_rate(self.rate_limit if self.rate_limit is not None else self.app.conf.task_default_rate_limit)
        return rate_wait(self.name, rate) if rate else 0.0

    def limits(self, meta: Mapping[str, Any]) -> tuple[float | None, float | None]:
        """(soft, hard) time limits of a run: the call's, else the task's, else the app's settings."""
        conf = self.app.conf
        hard = meta.get("time_limit", self.time_limit if self.time_limit is not None else conf.task_time_limit)
        soft = meta.get(
            "soft_time_limit", self.soft_time_limit if self.soft_time_limit is not None else conf.task_soft_time_limit
        )
        return soft, hard

    # -- signatures ------------------------------------------------------------------------

    def signature(self, args: Any = None, kwargs: Any = None, *starargs: Any, **options: Any) -> Any:
        """``task.signature((2,), {"y": 1}, countdown=10)``: a call to make later (see canvas)."""
        from .canvas import Signature

        return Signature(self, args, kwargs, options, app=self._app)

    subtask = signature

    def s(self, *args: Any, **kwargs: Any) -> Any:
        """``task.s(2, y=1)``: a signature whose call receives the previous task's value first."""
        return self.signature(args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Any:
        """``task.si(2)``: an immutable signature (the previous task's value is not passed)."""
        sig = self.signature(args, kwargs)
        sig.set_immutable(True)
        return sig

    def map(self, it: Any) -> Any:
        """``task.map(items)``: one job calling the task on each item (``celery.map``)."""
        from .canvas import xmap

        return xmap(self.s(), it, self._app)

    def starmap(self, it: Any) -> Any:
        """``task.starmap(items)``: one job calling the task with each item's arguments (``celery.starmap``)."""
        from .canvas import xstarmap

        return xstarmap(self.s(), it, self._app)

    def chunks(self, it: Any, n: int) -> Any:
        """``task.chunks(items, n)``: the items in parts of ``n``, each one ``starmap`` job, as a group."""
        from .canvas import chunks

        return chunks(self.s(), it, n, app=self._app)

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

    def delay(self, *args: Any, **kwargs: Any) -> AsyncResult | EagerResult:
        """``apply_async(args, kwargs)``."""
        return self.apply_async(args, kwargs)

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> AsyncResult | EagerResult:
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
        from ..drivers import is_async_connection
        from ..enqueue import insert_job_sync
        from ..errors import UnsupportedConnection
        from .transaction import current_connection

        app = self.app
        # Checked the same way in eager mode, so a unit test refuses what production would.
        prepared = self._check_call(args, kwargs, options)
        check_using(options)  # the name only: resolved below (eager mode resolves nothing)
        conn = options.pop("connection", None)
        using = options.pop("using", None)
        if app.conf.task_always_eager:
            task_id, ignore_result = options.pop("task_id", None), options.pop("ignore_result", None)
            return self.apply(args, kwargs, task_id=task_id, ignore_result=ignore_result, **options)
        if conn is None:
            conn = current_connection(using)
        if conn is None:
            job = app.insert_own(prepared)
        else:
            if is_async_connection(conn):
                raise UnsupportedConnection(
                    f"{self.name}.apply_async: {type(conn).__name__} is an async connection; "
                    "use `await task.aapply_async(..., connection=conn)`"
                )
            job = insert_job_sync(conn, prepared)  # any other object: the core's UnsupportedConnection
        return app.AsyncResult(options.get("task_id") or str(job.id), task_name=self.name)

    async def adelay(self, *args: Any, **kwargs: Any) -> AsyncResult | EagerResult:
        return await self.aapply_async(args, kwargs)

    async def aapply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> AsyncResult | EagerResult:
        """``apply_async`` for async code: ``connection=`` may be asyncpg, psycopg's
        ``AsyncConnection`` or SQLAlchemy's ``AsyncConnection`` / ``AsyncSession``."""
        import asyncio

        from ..drivers import detect_sync, is_async_connection
        from ..enqueue import insert_job
        from ..errors import UnsupportedConnection

        check_call_options(options, f"{self.name}.aapply_async")
        conn = options.pop("connection", None)
        if conn is not None and options.pop("using", None) is not None:
            raise ValidationError("using", "give connection= or using=, not both")
        if conn is None or self.app.conf.task_always_eager:
            return await asyncio.to_thread(self.apply_async, args, kwargs, **options)
        prepared = self.prepare(args, kwargs, **options)
        if not is_async_connection(conn):
            detect_sync(conn)  # an object the bridge does not know: the core's UnsupportedConnection
            raise UnsupportedConnection(
                f"{self.name}.aapply_async: {type(conn).__name__} is a sync connection; "
                "use `task.apply_async(..., connection=conn)`"
            )
        job = await insert_job(conn, prepared)
        return self.app.AsyncResult(options.get("task_id") or str(job.id), task_name=self.name)

    def _check_call(self, args: Any, kwargs: Any, options: Mapping[str, Any], *, routed: bool = True) -> Any:
        """Raise what ``apply_async(args, kwargs, **options)`` refuses, before anything is written or
        run, and return the ``PreparedJob`` it writes: the call's options (unknown and refused names),
        then every value (``prepare``). The one check of a call: ``apply_async``, eager or not, and
        every step a canvas writes or, in eager mode, runs (``Signature._check``) go through it.
        ``connection`` / ``using`` say where the job is written: ``apply_async`` checks them there."""
        check_call_options(options, f"{self.name}.apply_async")
        fields = {k: v for k, v in options.items() if k not in ("connection", "using")}
        return self.prepare(args, kwargs, routed=routed, **fields)

    def prepare(self, args: Any = None, kwargs: Any = None, *, routed: bool = True, **options: Any) -> Any:
        """The validated ``PreparedJob`` of a call (arguments checked here, as JSON).

        ``routed=False`` leaves ``task_routes`` out: a canvas checks a later step before the
        value it will receive exists, and a router function must only see real arguments (the
        routes it returns are checked when the step is written)."""
        from ..enqueue import prepare_job

        app = self.app
        # A chord callback sent to fail with ChordError never runs: its arguments are not checked.
        args, kwargs = self._arguments(args, kwargs, check=not options.get("chord_error"))
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
        celery_meta = call_meta(options, now, self.expires)
        route = app.route(self.name, args, kwargs, options, task=self) if routed else {}
        queue = options.get("queue")  # given, even empty: checked as given, never replaced by a default
        if queue is None:
            queue = route.get("queue") or self.queue or app.conf.task_default_queue
        priority = options.get("priority")
        if priority is None:
            priority = route.get("priority", self.priority)
        if priority is None:
            priority = app.conf.task_default_priority
        try:
            return prepare_job(
                {"args": encode(args, "args"), "kwargs": encode(kwargs, "kwargs")},
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
        """awa's ``max_attempts`` for this task: ``max_retries + 1`` runs, plus ``RESCUE_ATTEMPTS``
        re-runs after lost workers, which Celery does not count as retries (None: awa's cap, 1000)."""
        from .worker import RESCUE_ATTEMPTS

        if self.max_retries is None:
            return MAX_ATTEMPTS
        return min(self.max_retries + 1 + RESCUE_ATTEMPTS, MAX_ATTEMPTS)

    def _arguments(self, args: Any, kwargs: Any, check: bool = True) -> tuple[list[Any], dict[str, Any]]:
        if args is None:
            args = ()
        if isinstance(args, (str, bytes, Mapping)) or not isinstance(args, (list, tuple)):
            raise TypeError(f"{self.name}: args must be a list or tuple, got {type(args).__name__}")
        if kwargs is None:
            kwargs = {}
        if not isinstance(kwargs, Mapping):
            raise TypeError(f"{self.name}: kwargs must be a dict, got {type(kwargs).__name__}")
        if self.typing and check:
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
        **options: Any,
    ) -> EagerResult:
        """Run the task here, now, through the worker's own attempt code (eager mode).

        Arguments go through Celery's JSON as they would through the database,
        so a value it cannot carry fails here too. A retry runs again at once
        (Celery's eager behaviour); ``throw`` (default ``task_eager_propagates``)
        re-raises the task's error instead of returning a FAILURE result.
        Links given in ``options`` are applied as the worker applies them.
        """
        import json

        from .worker import run_eagerly

        if throw is None:
            throw = bool(self.app.conf.task_eager_propagates)
        prepared = self.prepare(args, kwargs)
        meta = call_meta({**options, "ignore_result": ignore_result}, datetime.now(UTC), None)
        meta.pop("id", None)
        result = run_eagerly(self, json.loads(prepared.args_json), task_id or str(uuid.uuid4()), retries, meta)
        if throw and result.state == states.FAILURE:
            raise result.result
        return result

    def AsyncResult(self, task_id: str | int) -> AsyncResult:
        return self.app.AsyncResult(task_id, task_name=self.name)


# -- what a call keeps in the job's metadata ---------------------------------------------


def call_meta(options: Mapping[str, Any], now: datetime, default_expires: Any) -> dict[str, Any]:
    """The ``metadata.celery`` of a call: expiry, its task id and canvas links (see canvas.py)."""
    meta: dict[str, Any] = {}
    expires = options.get("expires", default_expires)
    if expires is not None:
        meta["expires"] = moment(expires, "expires", now).isoformat()
    if options.get("ignore_result"):
        meta["ignore_result"] = True
    task_id = options.get("task_id")
    if task_id is not None:
        if not isinstance(task_id, str) or not 1 <= len(task_id) <= 200 or task_id.isdigit() or "\x00" in task_id:
            raise ValidationError("task_id", f"must be 1 to 200 characters and not all digits, got {task_id!r}")
        meta["id"] = task_id
    for key in ("link", "link_error"):
        value = options.get(key)
        if value is None:
            continue
        from .canvas import maybe_signature

        items = value if isinstance(value, (list, tuple)) else [value]
        try:
            signatures = [maybe_signature(v) for v in items]  # link="" is refused, not taken for "no link"
        except TypeError as exc:
            raise TypeError(f"{key}: {exc}") from None
        for sig in signatures:  # enqueued by the worker later, with one value: refused now if it would be then
            if key == "link" or not _inline_errback(sig):
                sig._check(later=True)
        if signatures:
            meta[key] = [sig.to_dict() for sig in signatures]
    if options.get("chain"):
        meta["chain"] = [v if type(v) is dict else v.to_dict() for v in options["chain"]]
    for key in ("chord", "group_id", "group_index", "parent_id", "root_id", "chord_error", "chord_error_from"):
        if options.get(key) is not None:
            meta[key] = options[key]
    for key in ("time_limit", "soft_time_limit"):
        if options.get(key) is not None:
            meta[key] = seconds(options[key], key)
    return meta


def _inline_errback(sig: Any) -> bool:
    """An errback the worker calls inline with ``(request, exc, traceback)``: never enqueued."""
    from .worker import _takes_request

    return _takes_request(sig.type)


# -- building tasks from functions -------------------------------------------------------

#: Tasks declared with ``@shared_task``: every app knows them.
SHARED_TASKS: dict[str, Task] = {}
#: Every task built in this process, by (its function's module, its name): how a child process finds it.
BUILT_TASKS: dict[tuple[str, str], Task] = {}


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
    task: Task = cls()
    task._app = app
    BUILT_TASKS[(fun.__module__, name)] = task
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
    if key in ("time_limit", "soft_time_limit"):
        return None if value is None else seconds(value, key)
    if key == "rate_limit":
        from .limits import parse_rate

        parse_rate(value)
        return value
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
