"""A backend for Django's Tasks framework that stores tasks as awa jobs.

::

    TASKS = {
        "default": {
            "BACKEND": "awa_django.backends.AwaBackend",
            "QUEUES": ["default", "email"],       # [] allows any queue name
            "OPTIONS": {"DATABASE": "default", "MAX_ATTEMPTS": 1},
        }
    }

Django 6 ships the framework as ``django.tasks``; on Django 5.2 install the
``django-tasks`` backport (``django_tasks``, the same API). This module uses
whichever Django has, preferring ``django.tasks``.

* ``task.enqueue(...)`` inserts one job on Django's connection of the awa
  alias, so inside ``transaction.atomic()`` it commits or rolls back with the
  caller's writes. The job's kind is the task's dotted path, its args
  ``{"args": [...], "kwargs": {...}}``, its queue ``queue_name``, its
  ``run_at`` ``run_after``; priority maps onto awa's four levels (Django's
  -100..100, default 0, higher first → awa 1..4, default 2, 1 first): above 0
  → 1, 0 → 2, -1..-50 → 3, below -50 → 4 (the exact value is kept and
  reported back).
* ``manage.py awa_worker`` runs them (in worker threads, with Django's
  connection handling), sending ``task_started`` / ``task_finished``.
* ``get_result(id)`` reads the job: READY (scheduled, available, retryable),
  RUNNING (running, waiting_external), SUCCESSFUL (completed), FAILED (failed,
  cancelled); ``errors`` come from the job's error history.
* Return values are stored like every job result, in ``awa.job_results``
  (``job.set_result``): inserted by the same guarded statement that marks the
  job completed, and deleted with the job row, so ``AWA['RETENTION']
  ['completed']`` (default 24 h) bounds how long ``get_result`` finds them.
  The job's ``metadata`` (key ``django_task``) keeps only what the framework
  needs besides: the backend alias, Django's priority, worker ids and the
  exception class of each failed attempt.
* ``MAX_ATTEMPTS`` (default 1, as Django's own backends never retry): with
  more, a task that raises is retried with awa's backoff and reported READY
  until its last attempt fails.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone
from django.utils.module_loading import import_string

import awa_bridge
from awa_bridge.drivers import detect_sync
from awa_bridge.sql import QUERIES

try:  # Django >= 6.0
    from django.tasks import Task as Task  # re-exported: awa_django.worker recognises its tasks
    from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    FRAMEWORK = "django.tasks"
except ImportError:  # Django 5.2 + the django-tasks backport
    try:
        # The backport has the same API under another name; type-checked against django.tasks.
        from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends  # type: ignore[assignment]
        from django_tasks.backends.base import BaseTaskBackend  # type: ignore[assignment]
        from django_tasks.base import Task as Task  # type: ignore[assignment]
        from django_tasks.base import TaskError  # type: ignore[assignment]
        from django_tasks.exceptions import InvalidTaskError as InvalidTask  # type: ignore[assignment]
        from django_tasks.exceptions import TaskResultDoesNotExist  # type: ignore[assignment]
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "awa_django.backends needs Django's Tasks framework: Django >= 6.0 (django.tasks) "
            "or, on Django 5.2, the backport: pip install django-tasks"
        ) from exc
    FRAMEWORK = "django_tasks"

__all__ = ["FRAMEWORK", "AwaBackend", "awa_priority"]

METADATA_KEY = "django_task"
DEFAULT_MAX_ATTEMPTS = 1

_STATUS = {
    "scheduled": TaskResultStatus.READY,
    "available": TaskResultStatus.READY,
    "retryable": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "waiting_external": TaskResultStatus.RUNNING,
    "completed": TaskResultStatus.SUCCESSFUL,
    "failed": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
}


def awa_priority(priority: int) -> int:
    """Django's priority (-100..100, higher first) → awa's (1..4, 1 first)."""
    if priority > 0:
        return 1
    if priority == 0:
        return 2
    return 3 if priority >= -50 else 4


class AwaBackend(BaseTaskBackend):
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        options = {str(k).upper(): v for k, v in (self.options or {}).items()}
        unknown = sorted(set(options) - {"DATABASE", "MAX_ATTEMPTS"})
        if unknown:
            raise _invalid_backend(
                f"TASKS[{alias!r}]['OPTIONS']: unknown option {unknown[0]!r} (DATABASE, MAX_ATTEMPTS)"
            )
        self.database: str | None = options.get("DATABASE")
        self.max_attempts = options.get("MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS)
        if (
            isinstance(self.max_attempts, bool)
            or not isinstance(self.max_attempts, int)
            or not 1 <= self.max_attempts <= 1000
        ):
            raise _invalid_backend(
                f"TASKS[{alias!r}]['OPTIONS']['MAX_ATTEMPTS']: must be 1..1000, got {self.max_attempts!r}"
            )

    # -- enqueue --------------------------------------------------------------

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        from .enqueue import insert_job

        self.validate_task(task)
        payload = {"args": normalize_json(list(args)), "kwargs": normalize_json(dict(kwargs))}
        try:
            job = insert_job(
                payload,
                using=self.database,
                kind=task.module_path,
                queue=task.queue_name,
                priority=awa_priority(task.priority),
                run_at=task.run_after,
                max_attempts=self.max_attempts,
                metadata={METADATA_KEY: {"backend": self.alias, "priority": task.priority}},
            )
        except awa_bridge.ValidationError as exc:
            raise InvalidTask(str(exc)) from exc
        result = self._result(task, job)
        task_enqueued.send(type(self), task_result=result)
        return result

    # -- results ----------------------------------------------------------------

    def get_result(self, result_id: str) -> Any:
        from django.db import connections

        try:
            job_id = int(result_id)
        except (ValueError, TypeError):
            raise TaskResultDoesNotExist(result_id) from None
        if not -(2**63) <= job_id < 2**63:  # not a bigint: no such job
            raise TaskResultDoesNotExist(result_id)
        rows = detect_sync(connections[self._alias()]).fetch_all(QUERIES["get_job_with_result"], {"id": job_id})
        if not rows:
            raise TaskResultDoesNotExist(result_id)
        job = _JobView.of_row(rows[0])
        info = (job.metadata or {}).get(METADATA_KEY)
        if not isinstance(info, dict) or info.get("backend") != self.alias:
            raise TaskResultDoesNotExist(result_id)
        try:
            task = resolve_task(rows[0]["kind"])
        except ValueError:
            raise TaskResultDoesNotExist(result_id) from None
        task = task.using(priority=info.get("priority", task.priority), queue_name=rows[0]["queue"], backend=self.alias)
        stored = rows[0]["result"]
        return self._result(task, job, None if stored is None else json.loads(stored))

    def _alias(self) -> str:
        from .db import awa_alias

        return self.database or awa_alias()

    def _result(self, task: Any, job: Any, return_value: Any = None) -> Any:
        info = (job.metadata or {}).get(METADATA_KEY) or {}
        status = _STATUS[str(job.state)]
        worker_ids = list(info.get("worker_ids", []))
        worker_ids += ["unknown"] * max(0, job.attempt - len(worker_ids))
        classes = info.get("error_classes", {})
        errors = []
        for error in job.errors or []:
            if isinstance(error, str):
                error = json.loads(error)
            path = classes.get(str(error.get("attempt"))) or f"builtins.{error.get('type', 'Exception')}"
            errors.append(
                TaskError(exception_class_path=path, traceback=error.get("traceback") or error.get("error", ""))
            )
        result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id=str(job.id),
            status=status,
            enqueued_at=job.created_at,
            started_at=job.attempted_at,
            finished_at=job.finalized_at,
            last_attempted_at=job.attempted_at,
            args=(job.args or {}).get("args", []),
            kwargs=(job.args or {}).get("kwargs", {}),
            backend=self.alias,
            errors=errors,
            worker_ids=worker_ids,
        )
        if status == TaskResultStatus.SUCCESSFUL:
            object.__setattr__(result, "_return_value", return_value)
        return result


@dataclass(frozen=True)
class _JobView:
    """The fields of a job ``_result`` reads (an ``awa_bridge.Job`` has them too)."""

    id: int
    state: str
    attempt: int
    args: Any
    metadata: Any
    errors: Any
    created_at: datetime | None
    attempted_at: datetime | None
    finalized_at: datetime | None

    @classmethod
    def of_row(cls, row: dict[str, Any]) -> _JobView:
        """From a ``job_columns`` row, whose json columns are text."""

        def decoded(name: str) -> Any:
            return None if row[name] is None else json.loads(row[name])

        return cls(
            id=row["id"],
            state=row["state"],
            attempt=row["attempt"],
            args=decoded("args"),
            metadata=decoded("metadata"),
            errors=decoded("errors"),
            created_at=row["created_at"],
            attempted_at=row["attempted_at"],
            finalized_at=row["finalized_at"],
        )


def _invalid_backend(message: str) -> Exception:
    try:
        from django.tasks.exceptions import InvalidTaskBackend
    except ImportError:
        from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend  # type: ignore[assignment]
    return InvalidTaskBackend(message)


def resolve_task(path: str) -> Any:
    """The Tasks-framework ``Task`` at a dotted path (``ValueError`` if there is none)."""
    try:
        found = import_string(path)
    except ImportError as exc:
        raise ValueError(f"cannot import task {path!r}: {exc}") from None
    if not isinstance(found, Task):
        raise ValueError(f"{path!r} is not a Django Tasks task")
    return found


# -- running in the worker --------------------------------------------------------------


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_task_job(job: Any) -> None:
    """Run one attempt of a Tasks-framework job: the worker's handler, in a worker thread.

    The return value (JSON-normalized, as Django's own backends do) becomes
    the job's result (``awa.job_results``) and the exception class of a failed
    attempt goes into the job's metadata; the runtime writes both with the
    attempt's guarded outcome.
    """
    task = resolve_task(job.kind)
    info = dict(job.metadata.get(METADATA_KEY) or {})
    alias = info.get("backend", task.backend)
    backend = task_backends[alias]
    task = task.using(priority=info.get("priority", task.priority), queue_name=job.queue, backend=alias)
    worker_ids = list(info.get("worker_ids", []))[: max(job.attempt - 1, 0)]
    worker_ids += ["unknown"] * (job.attempt - 1 - len(worker_ids)) + [worker_id()]
    info["worker_ids"] = worker_ids
    args, kwargs = job.args.get("args", []), job.args.get("kwargs", {})
    now = timezone.now()
    result: TaskResult[Any, Any] = TaskResult(
        task=task,
        id=str(job.id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=None,
        started_at=now,
        finished_at=None,
        last_attempted_at=now,
        args=args,
        kwargs=kwargs,
        backend=alias,
        errors=[],
        worker_ids=worker_ids,
    )
    task_started.send(type(backend), task_result=result)
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
        value = normalize_json(value)
    except Exception as exc:
        classes = dict(info.get("error_classes", {}))
        classes[str(job.attempt)] = f"{type(exc).__module__}.{type(exc).__qualname__}"
        info["error_classes"] = classes
        job.update_metadata({METADATA_KEY: info})
        if job.attempt >= job.max_attempts:
            object.__setattr__(result, "status", TaskResultStatus.FAILED)
            object.__setattr__(result, "finished_at", timezone.now())
            task_finished.send(type(backend), task_result=result)
        raise
    job.set_result(value)
    job.update_metadata({METADATA_KEY: info})
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "_return_value", value)
    task_finished.send(type(backend), task_result=result)
