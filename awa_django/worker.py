"""The worker of ``manage.py awa_worker``: an ``awa_bridge`` Client built from settings.

* Queues come from ``AWA['QUEUES']`` (or ``--queue`` overrides), timings and
  retention from ``AWA['WORKER']`` / ``AWA['RETENTION']``, periodic schedules
  from ``AWA['PERIODIC']`` (upserted into ``awa.cron_jobs`` at start).
* Handlers: every ``@awa_django.task`` (each installed app's ``tasks``
  module and ``AWA['TASK_MODULES']`` are imported first) and every task of
  Django's Tasks framework whose backend is ``AwaBackend``; a job whose kind
  is the dotted path of such a task is resolved on first sight, so tasks
  outside ``tasks`` modules run too.
* Sync handlers run in worker threads wrapped in Django's connection handling;
  transactional ones inside ``atomic()`` on the awa alias (the runtime's
  ``transaction`` hook), with the job's completion in the same transaction.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Iterable
from typing import Any

from awa_bridge.worker import Client, QueueConfig
from awa_bridge.worker.registry import Handler, Registry

from .conf import AwaSettings, build_schedule, get_settings
from .db import database_url
from .tasks import TASKS, AwaTask, atomic_transaction, with_django_connections, with_django_connections_async

log = logging.getLogger("awa_django.worker")


class DjangoRegistry(Registry):
    """A Registry that also resolves kinds naming a task by its dotted path."""

    def __init__(self, alias: str) -> None:
        super().__init__()
        self.alias = alias
        self.unresolvable: set[str] = set()

    def add_task(self, task: AwaTask) -> Handler:
        if inspect.iscoroutinefunction(task.fn):
            return self.register(task.kind, with_django_connections_async(task.arun), kind=task.kind, queue=task.queue)
        if task.transactional:
            return self.register(
                task.kind,
                task.run,
                kind=task.kind,
                queue=task.queue,
                transactional=True,
                transaction=atomic_transaction(self.alias),
            )
        return self.register(task.kind, with_django_connections(task.run), kind=task.kind, queue=task.queue)

    def get(self, kind: str) -> Handler | None:
        handler = self.handlers.get(kind)
        if handler is not None or kind in self.unresolvable or "." not in kind:
            return handler
        return self._resolve(kind)

    def _resolve(self, kind: str) -> Handler | None:
        from django.utils.module_loading import import_string

        try:
            found = import_string(kind)
        except Exception:
            found = None
        if isinstance(found, AwaTask) and found.kind == kind:
            return self.add_task(found)
        if found is not None and _is_awa_tasks_task(found):
            from .backends import run_task_job

            return self.register(kind, with_django_connections(run_task_job), kind=kind)
        self.unresolvable.add(kind)
        return None


def _is_awa_tasks_task(obj: Any) -> bool:
    """A task of Django's Tasks framework whose backend is an ``AwaBackend``."""
    try:
        from .backends import AwaBackend, Task
    except ImportError:
        return False
    return isinstance(obj, Task) and isinstance(obj.get_backend(), AwaBackend)


def import_task_modules(settings: AwaSettings | None = None) -> None:
    """Import each installed app's ``tasks`` module and ``AWA['TASK_MODULES']``."""
    from django.utils.module_loading import autodiscover_modules

    autodiscover_modules("tasks")
    for module in (settings or get_settings()).task_modules:
        importlib.import_module(module)


def build_client(settings: AwaSettings | None = None) -> Client:
    """A Client with the settings' timings, every known task and the periodic schedules."""
    settings = settings or get_settings()
    import_task_modules(settings)
    client = Client(database_url(), config=settings.worker)
    registry = DjangoRegistry(settings.database)
    client.registry = registry
    for task in TASKS.values():
        registry.add_task(task)
    for name, options in settings.periodic.items():
        client.schedules[name] = build_schedule(name, options)
    client.prune_when_empty = True  # AWA["PERIODIC"] is the truth: an emptied one deletes what it declared
    from .celery import install_celery_tasks

    install_celery_tasks(client)  # Celery-style tasks (awa_bridge.celery) and CELERY_BEAT_SCHEDULE
    return client


def check_worker(client: Client, queues: Iterable[QueueConfig]) -> None:
    """Refuse, before ``awa_worker`` prints or starts anything, what the runtime would refuse at start.

    The runtime's own check of a process queue blames "not a module-level function"; here
    the real reason is that every handler of this worker is wrapped in Django's connection
    handling to run in a worker thread, so none can be imported by name in a child process.
    The rest (``global_max_workers`` against the queues' ``min_workers``) is ``Client.check``'s.
    """
    from awa_bridge import ValidationError

    queues = list(queues)
    process = {q.name for q in queues if q.executor == "process"}
    for handler in client.registry.handlers.values():
        # Async and transactional handlers never go to a child process (as in the runtime's check).
        if handler.queue in process and not (handler.is_async or handler.transactional):
            raise ValidationError(
                f"queues[{handler.queue}].executor",
                f"'process' cannot run {handler.kind!r}: awa_worker runs its tasks in worker threads with "
                "Django's connection handling, not in child processes (executor='process' is for "
                "module-level handlers of an awa_bridge Client)",
            )
    client.check(queues)


def parse_queue_overrides(specs: Iterable[str], settings: AwaSettings | None = None) -> tuple[QueueConfig, ...]:
    """``--queue NAME[:N][:key=value,...]`` values: the settings' options for NAME, overridden by those given."""
    import dataclasses

    from awa_bridge.worker.config import split_queue_spec

    settings = settings or get_settings()
    result: list[QueueConfig] = []
    for spec in specs:
        parsed = QueueConfig.parse(spec)  # validates the whole spec
        configured = settings.queue(parsed.name)
        if configured is None:
            result.append(parsed)
            continue
        _, given = split_queue_spec(spec)
        result.append(dataclasses.replace(configured, **given))
    names = [q.name for q in result]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        from awa_bridge import ValidationError

        raise ValidationError("queue", f"{duplicates[0]!r} is given twice")
    return tuple(result)
