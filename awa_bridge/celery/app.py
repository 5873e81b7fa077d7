"""The app object: ``Awa`` (also exported as ``Celery``), its settings and its tasks.

::

    from awa_bridge.celery import Celery

    app = Celery("proj", database_url="postgresql://app@db/app")
    app.conf.beat_schedule = {"nightly": {"task": "proj.tasks.report", "schedule": crontab(hour=2, minute=0)}}

    @app.task(bind=True, max_retries=3)
    def report(self, day): ...

    client = app.client()      # an awa worker Client running every task of the app
    client.run()               # or: python -m awa_bridge worker proj.worker:client

The app needs a database (``database_url=`` or ``$DATABASE_URL``) for calls
made outside a transaction of the caller's and to read results; its own
connections are autocommit psycopg connections, one per thread that uses
them, closed by ``app.close()``.
"""

from __future__ import annotations

import fnmatch
import functools
import importlib
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, overload

from ..errors import ValidationError
from .errors import ImproperlyConfigured, NotRegistered, UnsupportedOption
from .options import SETTINGS, awa_priority, check_setting
from .task import SHARED_TASKS, Task, build_task

if TYPE_CHECKING:
    from .result import AsyncResult, GroupResult

TaskBase = Task  # inside Awa, ``Task`` is the app.Task property

log = logging.getLogger("awa_bridge.celery")

_current: Awa | None = None
_default: Awa | None = None
_lock = threading.Lock()


def current_app() -> Awa:
    """The app created last (``set_as_current``), else a default app configured from ``$DATABASE_URL``."""
    global _default
    if _current is not None:
        return _current
    with _lock:
        if _default is None:
            _default = Awa("default", set_as_current=False)
            _default.implicit = True
        return _default


class Settings:
    """``app.conf``: attribute and item access, validated on every write (``UnsupportedOption`` names the key)."""

    def __init__(self) -> None:
        object.__setattr__(self, "_values", {key: value for key, value in SETTINGS.items()})

    def __getattr__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise AttributeError(key) from None

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._values[key] = self._checked(key, value, self._values.get("timezone"))

    def _checked(self, key: str, value: Any, timezone: str | None) -> Any:
        value = check_setting(key, value)
        if key == "beat_schedule":
            from .beat import translate

            translate(value, timezone=timezone or "UTC")  # refuse what cron cannot say, now
            value = dict(value)
        if key == "timezone" and value is not None:
            from ..cron import _zone

            _zone(value)
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def get(self, key: str, default: Any = None) -> Any:
        return self._values.get(key, default)

    def update(self, values: Mapping[str, Any] | None = None, **more: Any) -> None:
        """Set several settings at once; every refused one is reported in one error and none is set."""
        items = {**(values or {}), **more}
        timezone = items.get("timezone", self._values.get("timezone"))
        checked: dict[str, Any] = {}
        refused: list[ValidationError] = []
        for key, value in items.items():
            try:
                checked[key] = self._checked(key, value, timezone)
            except ValidationError as exc:
                refused.append(exc)
        if len(refused) == 1:
            raise refused[0]
        if refused:
            raise UnsupportedOption(
                ", ".join(exc.field for exc in refused),
                f"{len(refused)} settings are refused:\n"
                + "\n".join(f"  {exc.field}: {exc.message}" for exc in refused),
            )
        self._values.update(checked)


class Control:
    """``app.control``: ``revoke``, and ``inspect()`` answered from the database."""

    def __init__(self, app: Awa) -> None:
        self.app = app

    def inspect(self, destination: Any = None, timeout: float = 1.0, **options: Any) -> Any:
        from .control import Inspect

        return Inspect(self.app, destination)

    def revoke(self, task_id: str | int | Iterable[str | int], terminate: bool = False, signal: Any = None) -> None:
        ids = [task_id] if isinstance(task_id, (str, int)) else list(task_id)
        for one in ids:
            self.app.AsyncResult(one).revoke(terminate=terminate, signal=signal)


class Awa:
    """A Celery-style app on awa. ``Celery`` is the same class."""

    #: True for the app ``current_app()`` made up because none was created.
    implicit = False
    #: ``"module:function"`` a prefork child calls once before it imports a task (awa_django: ``django.setup``).
    child_setup: str | None = None

    def __init__(
        self,
        main: str | None = None,
        *,
        database_url: str | None = None,
        broker: Any = None,
        backend: Any = None,
        include: Iterable[str] | None = None,
        set_as_current: bool = True,
        task_cls: type[TaskBase] | None = None,
        config_source: Any = None,
        namespace: str | None = None,
        **config: Any,
    ) -> None:
        global _current
        if broker is not None:
            raise UnsupportedOption("broker", "awa's broker is PostgreSQL: pass database_url= (or set DATABASE_URL)")
        if backend is not None:
            raise UnsupportedOption("backend", "results are stored in PostgreSQL next to the job: drop backend=")
        if task_cls is not None and not (isinstance(task_cls, type) and issubclass(task_cls, TaskBase)):
            raise ValidationError("task_cls", "must be a subclass of awa_bridge.celery.Task")
        self.main = main
        self.task_cls: type[TaskBase] = task_cls or TaskBase
        self.conf = Settings()
        self.control = Control(self)
        self._tasks: dict[str, TaskBase] = {}
        self._pending_discovery: list[tuple[Any, str]] = []
        self._imported = False
        self._local = threading.local()
        self._connections: list[Any] = []
        self._connections_lock = threading.Lock()
        if config_source is not None:
            self.config_from_object(config_source, namespace=namespace)
        if database_url is not None:
            config["database_url"] = database_url
        if include is not None:
            config["include"] = include
        self.conf.update(config)
        if set_as_current:
            _current = self

    def __repr__(self) -> str:
        return f"<Awa {self.main or '__main__'}>"

    # -- tasks ----------------------------------------------------------------------

    @overload
    def task(self, fun: Callable[..., Any], /) -> TaskBase: ...

    @overload
    def task(self, **options: Any) -> Callable[[Callable[..., Any]], TaskBase]: ...

    def task(self, *args: Any, **options: Any) -> TaskBase | Callable[[Callable[..., Any]], TaskBase]:
        """``@app.task`` or ``@app.task(**options)``: register a function as a task (see options.py)."""

        def decorate(fun: Callable[..., Any]) -> TaskBase:
            task = build_task(fun, self, options)
            self.register(task)
            return task

        if len(args) == 1 and callable(args[0]) and not isinstance(args[0], TaskBase):
            return decorate(args[0])
        if args:
            raise TypeError("app.task() takes the function, or options as keywords")
        return decorate

    def register(self, task: TaskBase) -> TaskBase:
        """Add ``task`` under its name; another function under the same name is an error."""
        existing = self._tasks.get(task.name) or SHARED_TASKS.get(task.name)
        if existing is not None and not _same_function(existing, task):
            raise ValidationError("name", f"two tasks are named {task.name!r}: {_origin(existing)} and {_origin(task)}")
        self._tasks[task.name] = task
        return task

    @property
    def tasks(self) -> dict[str, TaskBase]:
        """Every task this app knows: its own and the ``@shared_task`` ones (imports pending modules first)."""
        self.import_modules()
        tasks = {**SHARED_TASKS, **self._tasks}
        if self.conf.task_annotations:
            from .options import annotate

            for task in tasks.values():
                annotate(task, self.conf.task_annotations)
        return tasks

    @property
    def Task(self) -> type[TaskBase]:
        """``app.Task``: the base class of this app's tasks (subclass it, pass ``base=``)."""
        return self.task_cls

    def signature(self, *args: Any, **kwargs: Any) -> Any:
        from .canvas import signature

        return signature(*args, app=self, **kwargs)

    def get_task(self, name: str) -> TaskBase:
        try:
            return self.tasks[name]
        except KeyError:
            raise NotRegistered(f"no task named {name!r} is registered with {self!r}") from None

    def autodiscover_tasks(
        self,
        packages: Iterable[str] | Callable[[], Iterable[str]] | None = None,
        related_name: str = "tasks",
        force: bool = False,
    ) -> None:
        """Import ``<package>.<related_name>`` for each package, when the tasks are first needed.

        ``packages`` may be a callable (evaluated then). Without packages the
        app asks ``default_packages()``; ``awa_django.celery``'s app answers
        with ``INSTALLED_APPS``. A package without that module is skipped.
        """
        self._pending_discovery.append((packages, related_name))
        self._imported = False
        if force:
            self.import_modules()

    def default_packages(self) -> list[str]:
        """Packages ``autodiscover_tasks()`` searches when given none (none here; Django's app overrides)."""
        return []

    def import_modules(self) -> None:
        """Import ``imports`` / ``include`` and the autodiscovered task modules (once)."""
        if self._imported:
            return
        self._imported = True
        for module in (*self.conf.imports, *self.conf.include):
            importlib.import_module(module)
        pending, self._pending_discovery = self._pending_discovery, []
        for packages, related_name in pending:
            if packages is None:
                packages = self.default_packages()
            elif callable(packages):
                packages = packages()
            for package in packages:
                _import_related(str(package), related_name)

    def send_task(self, name: str, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        """Enqueue a task by name, known here or not (its job runs wherever the task is registered)."""
        task = self.tasks.get(name)
        if task is None:
            task = _by_name(self, name)
        return task.apply_async(args, kwargs, **options)

    # -- settings --------------------------------------------------------------------

    def config_from_object(self, obj: Any, namespace: str | None = None, silent: bool = False) -> None:
        """Read settings from a module, an object, a dict or a ``"module:attribute"`` path.

        With ``namespace="CELERY"`` only ``CELERY_*`` names are read, with the
        prefix dropped and the rest lower-cased (``CELERY_TASK_ALWAYS_EAGER`` ->
        ``task_always_eager``), as Celery reads Django settings. From a module
        or object without a namespace, names that look like Celery settings
        are read (imports and helpers are not); a dict is read whole. Every
        name read is validated: an unsupported one raises ``UnsupportedOption``.
        """
        if isinstance(obj, str):
            module_name, _, attribute = obj.partition(":")
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                if silent:
                    return
                raise
            obj = getattr(module, attribute) if attribute else module
        items = obj.items() if isinstance(obj, Mapping) else ((k, getattr(obj, k)) for k in dir(obj))
        prefix = f"{namespace}_" if namespace else ""
        found: dict[str, Any] = {}
        for key, value in list(items):
            if not isinstance(key, str) or key.startswith("_"):
                continue
            if prefix:
                if not key.startswith(prefix):
                    continue
                key = key[len(prefix) :].lower()
            elif not isinstance(obj, Mapping) and not _looks_like_setting(key):
                continue  # a module's imports and helpers
            found[key] = value
        self.conf.update(found)

    def route(
        self,
        name: str,
        args: Any = None,
        kwargs: Any = None,
        options: Mapping[str, Any] | None = None,
        task: Any = None,
    ) -> dict[str, Any]:
        """The ``task_routes`` route of a call: the first router that answers (dicts: the exact
        name, then globs and regexes in order; router functions with Celery's arguments)."""
        from .options import check_route

        for router in self.conf.task_routes or ():
            if callable(router):
                found = router(name, args or (), kwargs or {}, dict(options or {}), task=task)
                if found:
                    return check_route(found, f"task_routes: {getattr(router, '__name__', router)!r}({name!r})")
                continue
            if name in router:
                route: dict[str, Any] = router[name]
                return route
            for pattern, route in router.items():
                matches = pattern.match(name) if hasattr(pattern, "match") else fnmatch.fnmatchcase(name, pattern)
                if matches:
                    return route
        return {}

    def awa_priority(self, celery_priority: int | None) -> int:
        """awa's priority for a Celery priority (None: awa's default, 2); see ``options.awa_priority``."""
        if celery_priority is None:
            return 2
        return awa_priority(celery_priority, self.conf.priority_order)

    # -- results -----------------------------------------------------------------------

    def AsyncResult(self, task_id: str | int, task_name: str | None = None) -> AsyncResult:
        from .result import AsyncResult

        return AsyncResult(task_id, app=self, task_name=task_name)

    @functools.cached_property
    def GroupResult(self) -> type[GroupResult]:
        """``app.GroupResult``: group results on this app (``app.GroupResult.restore(id)``)."""
        from .result import bound_group_result

        return bound_group_result(self)

    # -- the worker ----------------------------------------------------------------------

    def install(self, client: Any, wrap: Callable[[Callable[[Any], Any]], Callable[[Any], Any]] | None = None) -> None:
        """Register every task as a handler of ``client`` (an ``awa_bridge.worker.Client``)
        and declare the beat schedule as its periodic jobs.

        ``wrap`` wraps each handler (``awa_django`` passes Django's connection handling).
        """
        from . import child, signals
        from .builtins import builtin_tasks
        from .worker import make_handler, rescued_hook

        # The built-in kinds once per client (a second app installed on it shares them).
        builtins = {k: v for k, v in builtin_tasks(self).items() if k not in client.registry.handlers}
        own = self.tasks
        for task in {**builtins, **own}.values():
            handler = make_handler(task)
            if wrap is not None:
                handler = wrap(handler)
            client.registry.register(task.name, handler, kind=task.name, queue=self.queue_of(task))
        client.hooks.add("ready", lambda worker: self._warn_unregistered(worker, bool(own)))
        client.hooks.add("ready", lambda worker: signals.worker_ready.send(sender=worker))
        client.hooks.add("shutdown", lambda worker: signals.worker_shutdown.send(sender=worker))
        client.hooks.add("shutdown", lambda worker: child.shutdown())
        client.hooks.add("rescued", rescued_hook(self))
        for job in self.periodic_jobs():
            if job.name in client.schedules:
                raise ValidationError("beat_schedule", f"schedule {job.name!r} is already declared on this client")
            client.schedules[job.name] = job

    def _warn_unregistered(self, client: Any, has_tasks: bool) -> None:
        """At worker start: what would fail every call for good as an unknown job kind."""
        if not has_tasks:
            log.warning(
                "no tasks registered on this app (%r): import your tasks module (include=[...] or imports=[...] "
                "on the app, or app.autodiscover_tasks()); a worker runs only the tasks it has imported, and "
                "fails a job of any other kind for good (unknown job kind)",
                self.main,
            )
        for name, entry in (self.conf.beat_schedule or {}).items():
            if entry["task"] not in client.registry.handlers:
                log.warning(
                    "beat_schedule entry %r: task %r is not registered on this worker, so each firing fails for "
                    "good (unknown job kind): import its module (include=[...] on the app)",
                    name,
                    entry["task"],
                )

    @property
    def prefork(self) -> bool:
        """``worker_pool="prefork"``: tasks with a hard time limit run in child processes (see ``child``)."""
        return self.conf.worker_pool in ("prefork", "processes")

    def queue_of(self, task: TaskBase) -> str:
        return str(self.route(task.name).get("queue") or task.queue or self.conf.task_default_queue)

    def client(self, **timings: Any) -> Any:
        """A worker ``Client`` on this app's database running every task (and the beat schedule).

        Started without queues, it runs the tasks' queues with ``worker_concurrency``
        slots each (awa's default when unset) and a deadline of at least the
        longest ``time_limit`` of a task on that queue.
        """
        from ..worker import Client, QueueConfig

        app = self

        class CeleryClient(Client):
            def queue_configs(self, queues: Any) -> list[QueueConfig]:
                return app.queue_configs() if queues is None else super().queue_configs(queues)

        client = CeleryClient(self.database_url, **timings)
        self.install(client)
        return client

    def queue_configs(self) -> list[Any]:
        """The queues of the app's tasks as awa ``QueueConfig`` (``worker_concurrency``, time limits)."""
        from ..worker import QueueConfig

        deadlines: dict[str, float] = {}
        for task in self.tasks.values():
            limit = task.time_limit if task.time_limit is not None else self.conf.task_time_limit
            queue = self.queue_of(task)
            deadlines[queue] = max(deadlines.get(queue, 0.0), float(limit or 0.0))
        options: dict[str, Any] = {}
        if self.conf.worker_concurrency:
            options["max_workers"] = int(self.conf.worker_concurrency)
        configs = []
        for queue in sorted(deadlines) or [self.conf.task_default_queue]:
            extra = dict(options)
            default_deadline = QueueConfig(queue).deadline
            if deadlines.get(queue, 0.0) + 5 > default_deadline:
                extra["deadline"] = deadlines[queue] + 5  # the hard limit fires first; the deadline is the backstop
            configs.append(QueueConfig(queue, **extra))
        return configs

    def periodic_jobs(self) -> list[Any]:
        """The beat schedule as awa ``PeriodicJob`` values."""
        from .beat import translate

        return translate(self.conf.beat_schedule, timezone=self.conf.timezone or "UTC", app=self)

    # -- connections ------------------------------------------------------------------------

    @property
    def database_url(self) -> str:
        url = self.conf.database_url or os.environ.get("DATABASE_URL")
        if not url:
            raise ImproperlyConfigured(
                f"{self!r} has no database: pass database_url= to the app, set app.conf.database_url, or set "
                "DATABASE_URL (with Django, awa_django.celery configures it)"
            )
        return url

    def connection(self) -> Any:
        """This thread's autocommit psycopg connection to the app's database (opened on first use)."""
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            from ..drivers.connect import connect_sync

            conn = connect_sync(self.database_url, application_name="awa-celery").conn
            self._local.conn = conn
            with self._connections_lock:
                self._connections = [c for c in self._connections if not c.closed]
                self._connections.append(conn)
        return conn

    def insert_own(self, prepared: Any) -> Any:
        """Insert a prepared job in its own short transaction (autocommit)."""
        from ..enqueue import insert_job_sync

        return insert_job_sync(self.connection(), prepared)

    def close(self) -> None:
        """Close every connection the app opened (in any thread)."""
        with self._connections_lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()


Celery = Awa


def _same_function(a: Task, b: Task) -> bool:
    fa, fb = getattr(a, "__wrapped__", None), getattr(b, "__wrapped__", None)
    return fa is fb or (fa is not None and fb is not None and _origin(a) == _origin(b))


def _origin(task: Task) -> str:
    fun = getattr(task, "__wrapped__", None)
    return f"{fun.__module__}.{fun.__qualname__}" if fun is not None else type(task).__qualname__


def _looks_like_setting(key: str) -> bool:
    from .options import IGNORED_SETTINGS, REFUSED_SETTINGS

    return key in SETTINGS or key in REFUSED_SETTINGS or key in IGNORED_SETTINGS or key.startswith(_SETTING_PREFIXES)


_SETTING_PREFIXES = ("task_", "result_", "broker_", "worker_", "beat_", "celery_", "redis_")


def _import_related(package: str, related_name: str) -> None:
    name = f"{package}.{related_name}"
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name not in (name, package):
            raise  # the module exists but imports something missing: that is a real error


def _by_name(app: Awa, name: str) -> Task:
    """A stand-in task for ``send_task`` of a name this process does not define."""

    def unknown(*args: Any, **kwargs: Any) -> Any:
        raise NotRegistered(f"task {name!r} is not defined in this process")

    task = build_task(unknown, app, {"name": name, "typing": False})
    return task
