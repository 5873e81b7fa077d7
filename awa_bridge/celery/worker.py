"""One attempt of a Celery-style task inside the awa worker, mapped onto awa's outcomes.

=================================  ==============================================
the task                            the job
=================================  ==============================================
returns ``value``                   completed; ``value`` stored in awa.job_results
                                    by the completing statement (unless
                                    ``ignore_result`` or ``None``)
raises ``Retry`` (``self.retry``,   ``RetryAfter(countdown)``: retryable, spends
``autoretry_for``)                  an attempt (``request.retries`` = attempt - 1)
raises anything else                failed at once (Celery does not retry plain
                                    errors); its class and message are kept in
                                    metadata ``celery.exc`` for ``AsyncResult``
claimed after ``expires``           cancelled, not run (REVOKED)
raises awa's ``RetryAfter`` /       passed through unchanged
``Snooze`` / ``Cancel`` /
``TerminalError``
=================================  ==============================================

The job's ``max_attempts`` is ``max_retries + 1``. When ``self.retry(max_retries=N)``
allows more retries than the job was enqueued with, ``max_attempts`` is raised
first (fenced by the attempt's run_lease).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from ..errors import ValidationError
from ..worker.outcomes import Cancel, RetryAfter, Snooze, TerminalError
from . import states
from .errors import Retry
from .result import exception_info, in_task
from .task import MAX_ATTEMPTS, Context, Task

log = logging.getLogger("awa_bridge.celery")

HOSTNAME = f"awa@{socket.gethostname()}"


def make_handler(task: Task) -> Callable[[Any], Any]:
    """The awa handler (sync, run in a worker thread) of one task."""

    def handler(job: Any) -> Any:
        return run_job(task, job)

    handler.__name__ = handler.__qualname__ = task.name
    return handler


def run_job(task: Task, job: Any) -> Any:
    meta: dict[str, Any] = dict(job.metadata.get("celery") or {})
    expires = _expiry(meta, job.metadata)
    if expires is not None and datetime.now(UTC) >= expires:
        return Cancel(f"expired at {expires.isoformat()} before it ran (expires=); not run")
    payload = job.raw_args
    if not (
        isinstance(payload, dict)
        and isinstance(payload.get("args", []), list)
        and isinstance(payload.get("kwargs", {}), dict)
    ):
        raise TerminalError(
            f"job args of task {task.name} must be {{'args': [...], 'kwargs': {{...}}}}, got {payload!r}"
        )
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    if "retry_args" in meta:
        args, kwargs = meta["retry_args"], meta.get("retry_kwargs", {})
    request = Context(
        id=str(job.id),
        retries=job.attempt - 1,
        args=args,
        kwargs=kwargs,
        is_eager=False,
        called_directly=False,
        expires=expires,
        hostname=HOSTNAME,
        delivery_info={"queue": job.queue, "priority": job.priority},
        ignore_result=bool(meta.get("ignore_result")),
        task=task.name,
        job=job,
    )
    token = task.push_request(request)
    guard = in_task.set(True)
    try:
        _hook(task.before_start, request.id, args, kwargs)
        try:
            value = task.invoke(args, kwargs)
        except Retry as retry:
            return _retry(task, job, request, meta, retry)
        except (RetryAfter, Snooze, Cancel, TerminalError):
            raise
        except Exception as exc:
            _fail(task, job, request, meta, exc)
        if request._retry is not None:  # retry(throw=False), then the task returned
            return _retry(task, job, request, meta, request._retry)
        if not (task.ignore_result or request.ignore_result or task.app.conf.task_ignore_result):
            try:
                job.set_result(value)
            except ValidationError as exc:
                error = TypeError(f"the return value of {task.name} is not JSON-serializable: {exc.message}")
                _fail(task, job, request, meta, error)
        _hook(task.on_success, value, request.id, args, kwargs)
        _hook(task.after_return, states.SUCCESS, value, request.id, args, kwargs, None)
        return None
    finally:
        in_task.reset(guard)
        task.pop_request(token)


def _retry(task: Task, job: Any, request: Context, meta: dict[str, Any], retry: Retry) -> RetryAfter:
    delay = _delay(retry.when)
    patch = {k: v for k, v in meta.items() if k != "exc"}
    if retry.exc is not None:
        patch["exc"] = {**exception_info(retry.exc), "attempt": job.attempt}
    if request._retry_args is not None:
        from ..args import canonical_json

        new_args, new_kwargs = request._retry_args
        canonical_json(new_args, "retry.args")
        canonical_json(new_kwargs, "retry.kwargs")
        patch["retry_args"], patch["retry_kwargs"] = new_args, new_kwargs
    if patch != meta:
        job.update_metadata({"celery": patch})
    _ensure_attempts(job, request._max_retries)
    _hook(task.on_retry, retry.exc, request.id, request.args, request.kwargs, None)
    _hook(task.after_return, states.RETRY, retry, request.id, request.args, request.kwargs, None)
    return RetryAfter(delay, reason=str(retry))


def _fail(task: Task, job: Any, request: Context, meta: dict[str, Any], exc: BaseException) -> None:
    info = {**exception_info(exc), "attempt": job.attempt}
    job.update_metadata({"celery": {**{k: v for k, v in meta.items() if k != "exc"}, "exc": info}})
    if not isinstance(exc, task.throws):
        log.warning("task %s[%s] failed: %s: %s", task.name, request.id, type(exc).__name__, exc)
    _hook(task.on_failure, exc, request.id, request.args, request.kwargs, None)
    _hook(task.after_return, states.FAILURE, exc, request.id, request.args, request.kwargs, None)
    raise TerminalError(f"{type(exc).__name__}: {exc}") from exc


def _ensure_attempts(job: Any, max_retries: int | None) -> None:
    """Raise the job's max_attempts when this retry is allowed but the job has no attempt left."""
    if job.attempt < job.max_attempts:
        return
    wanted = MAX_ATTEMPTS if max_retries is None else min(max_retries + 1, MAX_ATTEMPTS)
    runtime = job._runtime
    if wanted <= job.max_attempts or runtime is None:
        return
    from ..drivers.psycopg import PsycopgSync
    from ..sql import QUERIES

    with runtime.sync_connection() as conn:
        rows = PsycopgSync(conn).fetch_all(
            QUERIES["raise_max_attempts"], {"id": job.id, "lease": job.run_lease, "max_attempts": wanted}
        )
    if rows:
        job.max_attempts = int(rows[0]["max_attempts"])


def _delay(when: Any) -> float:
    if when is None:
        return 0.0
    if isinstance(when, datetime):
        aware = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
        return max((aware - datetime.now(UTC)).total_seconds(), 0.0)
    if isinstance(when, timedelta):
        return max(when.total_seconds(), 0.0)
    return max(float(when), 0.0)


def _expiry(meta: dict[str, Any], metadata: dict[str, Any]) -> datetime | None:
    """When the job stops being worth running: ``expires`` given at the call, or
    ``expires_in`` seconds after its cron fire time (beat entries)."""
    if meta.get("expires"):
        return datetime.fromisoformat(meta["expires"])
    fire_time = metadata.get("cron_fire_time")
    if meta.get("expires_in") is not None and fire_time:
        return datetime.fromisoformat(fire_time) + timedelta(seconds=float(meta["expires_in"]))
    return None


def _hook(fn: Callable[..., Any], *args: Any) -> None:
    try:
        fn(*args)
    except Exception:
        log.exception("task hook %s raised; ignored", getattr(fn, "__qualname__", fn))
