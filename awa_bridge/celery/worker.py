"""One attempt of a Celery-style task, mapped onto awa's outcomes; the worker and eager mode both run it.

=================================  ==============================================
the task                            the job
=================================  ==============================================
returns ``value``                   completed; ``value`` (Celery's JSON) stored in
                                    awa.job_results by the completing statement
                                    (unless ``ignore_result`` or ``None``); links,
                                    the next chain step and the chord counter are
                                    written in the same transaction
raises ``Retry`` (``self.retry``,   ``RetryAfter(countdown)``: retryable; the
``autoretry_for``)                  retry count (``request.retries``) is kept in
                                    metadata ``celery.retries``
raises anything else                failed at once (Celery does not retry plain
                                    errors); its class and message are kept in
                                    metadata ``celery.exc`` for ``AsyncResult``
                                    and in the job's error record (``TaskFailed``);
                                    errbacks and the chord are told
runs past its hard ``time_limit``   failed with ``TimeLimitExceeded``, never retried
                                    (the attempt ends then, stuck or not: see
                                    ``limits`` and ``child``)
over its ``rate_limit``             ``Snooze``: run later, no attempt spent
claimed after ``expires``           cancelled, not run (REVOKED)
raises awa's ``RetryAfter`` /       passed through unchanged
``Snooze`` / ``Cancel`` /
``TerminalError``
=================================  ==============================================

A rescue after a lost worker re-runs the job with the same ``request.retries``
(Celery's redelivery is not a retry): the job's ``max_attempts`` is
``max_retries + 1`` plus ``RESCUE_ATTEMPTS``.

Eager mode (``apply()``, ``task_always_eager``) runs ``run_job`` on an
``EagerJob`` and turns the awa outcome into an ``EagerResult``: the same
attempt code, so the same outcome for every awa outcome (a ``Snooze`` runs
again at once without counting a retry, ``RetryAfter`` runs again spending an
attempt, ``Cancel`` is REVOKED, a failure is FAILURE).
"""

from __future__ import annotations

import logging
import socket
import time
import traceback as tb
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ..args import canonical_json
from ..errors import ValidationError
from ..worker.outcomes import Cancel, RetryAfter, Snooze, TerminalError
from . import signals, states
from .errors import (
    ChordError,
    ExceptionInfo,
    Retry,
    SoftTimeLimitExceeded,
    TaskRevokedError,
    TimeLimitExceeded,
    WorkerLostError,
)
from .result import EagerResult, exception_info, in_task
from .serialization import decode, encode
from .task import MAX_ATTEMPTS, Context, Task

log = logging.getLogger("awa_bridge.celery")

HOSTNAME = f"awa@{socket.gethostname()}"

#: (task name, task id) of the task running in this thread, for ``get_task_logger`` records.
_running: ContextVar[tuple[str, str]] = ContextVar("awa_celery_running", default=("???", "???"))


def current_task_ids() -> tuple[str, str]:
    return _running.get()


@dataclass(frozen=True)
class Succeeded:
    """``run_job``'s answer when the task returned: the worker completes the job; eager mode keeps ``value``."""

    value: Any


def make_handler(task: Task) -> Callable[[Any], Any]:
    """The awa handler (sync, run in a worker thread) of one task."""

    def handler(job: Any) -> Any:
        return run_job(task, job)

    handler.__name__ = handler.__qualname__ = task.name
    return handler


def run_job(task: Task, job: Any) -> Any:
    """One attempt; returns ``Succeeded`` / ``RetryAfter`` / ``Snooze`` / ``Cancel``, or raises ``TerminalError``."""
    meta: dict[str, Any] = dict(job.metadata.get("celery") or {})
    eager = isinstance(job, EagerJob)
    expires = _expiry(meta, job.metadata)
    if expires is not None and datetime.now(UTC) >= expires:
        return Cancel(f"expired at {expires.isoformat()} (its expires option) before it ran; not run")
    args, kwargs = _arguments(task, job.raw_args, meta)
    request = _request(task, job, meta, args, kwargs, expires, eager)
    if not eager:
        wait = task.rate_wait()
        if wait > 0:
            return Snooze(wait)
    token = task.push_request(request)
    guard = in_task.set(True)
    running = _running.set((task.name, str(request.id)))
    try:
        signals.task_prerun.send(sender=task, task_id=request.id, task=task, args=args, kwargs=kwargs)
        if meta.get("chord_error"):
            _fail(task, job, request, meta, ChordError(meta["chord_error"]))
        _hook(task.before_start, request.id, args, kwargs)
        request._started = time.monotonic()
        try:
            value = _call(task, job, args, kwargs, (None, None) if eager else task.limits(meta))
        except Retry as retry:
            return _retry(task, job, request, meta, retry)
        except (RetryAfter, Snooze, Cancel, TerminalError):
            raise
        except Exception as exc:
            _fail(task, job, request, meta, exc)
        if request._retry is not None:  # retry(throw=False), then the task returned
            return _retry(task, job, request, meta, request._retry)
        _succeed(task, job, request, meta, value)
        return Succeeded(value)
    finally:
        _running.reset(running)
        in_task.reset(guard)
        task.pop_request(token)


def _call(task: Task, job: Any, args: Any, kwargs: Any, limits: tuple[float | None, float | None]) -> Any:
    """The task's function under its time limits (none in eager mode, as in Celery; see ``limits``)."""
    from .limits import limited_call, run_bounded, run_coroutine

    soft, hard = limits

    def attempt() -> Any:
        if task.is_async:
            return run_coroutine(task.invoke(args, kwargs), soft, hard)
        if soft is None and hard is None:
            return task.invoke(args, kwargs)
        return limited_call(lambda: task.invoke(args, kwargs), soft, hard, job)

    try:
        if hard is not None and task.app.prefork:
            from .child import module_of, run_in_child

            module = module_of(task)
            if module is not None:
                return run_in_child(task, job, module, soft, hard)
        return attempt() if hard is None else run_bounded(attempt, hard, f"{task.name}[{job.id}]")
    except SoftTimeLimitExceeded as exc:
        if not exc.args and soft is not None:  # raised by the limit, which can only raise the bare class
            exc.args = (f"soft time limit of {soft:g} s exceeded",)
        raise


def _arguments(task: Task, payload: Any, meta: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    if not (
        isinstance(payload, dict)
        and isinstance(payload.get("args", []), list)
        and isinstance(payload.get("kwargs", {}), dict)
    ):
        raise TerminalError(
            f"job args of task {task.name} must be {{'args': [...], 'kwargs': {{...}}}}, got {payload!r}"
        )
    if "retry_args" in meta:
        return decode(meta["retry_args"]), decode(meta.get("retry_kwargs", {}))
    return decode(payload.get("args", [])), decode(payload.get("kwargs", {}))


def _request(
    task: Task, job: Any, meta: dict[str, Any], args: Any, kwargs: Any, expires: datetime | None, eager: bool
) -> Context:
    return Context(
        id=str(meta.get("id") or job.id),
        retries=int(meta.get("retries", 0)),
        args=args,
        kwargs=kwargs,
        is_eager=eager,
        called_directly=False,
        expires=expires,
        hostname=None if eager else HOSTNAME,
        delivery_info={"queue": job.queue, "priority": job.priority, "is_eager": eager},
        ignore_result=bool(meta.get("ignore_result")),
        task=task.name,
        job=job,
        group=meta.get("group_id"),
        group_index=meta.get("group_index"),
        chord=meta.get("chord"),
        chain=meta.get("chain"),
        callbacks=meta.get("link"),
        errbacks=meta.get("link_error"),
        parent_id=meta.get("parent_id"),
        root_id=meta.get("root_id"),
        timelimit=(meta.get("time_limit", task.time_limit), meta.get("soft_time_limit", task.soft_time_limit)),
    )


def _succeed(task: Task, job: Any, request: Context, meta: dict[str, Any], value: Any) -> None:
    try:
        encoded = encode(value, "result")
        canonical_json(encoded, "result")
    except ValidationError as exc:
        error = TypeError(f"the return value of {task.name} is not JSON-serializable: {exc.message}")
        _fail(task, job, request, meta, error)
    if not (task.ignore_result or request.ignore_result or task.app.conf.task_ignore_result):
        job.set_result(encoded)
    if any(meta.get(key) for key in ("chain", "chord", "link")):
        if isinstance(job, EagerJob):
            _continue(task, None, request, meta, value, encoded)
        else:  # written by the transaction that completes this job
            job.on_complete(lambda conn: _continue(task, conn, request, meta, value, encoded))
    _hook(task.on_success, value, request.id, request.args, request.kwargs)
    signals.task_success.send(sender=task, result=value, runtime=time.monotonic() - request._started)
    _hook(task.after_return, states.SUCCESS, value, request.id, request.args, request.kwargs, None)
    _postrun(task, request, value, states.SUCCESS)


def _continue(task: Task, conn: Any, request: Context, meta: dict[str, Any], value: Any, encoded: Any) -> None:
    """Links, the next chain step and the chord counter, on ``conn``: the transaction completing
    the job (None in eager mode: each call then writes, or runs, on its own)."""
    from .canvas import from_dict

    app = task.app
    extra = {"connection": conn} if conn is not None else {}
    parent = {"parent_id": request.id, "root_id": meta.get("root_id") or request.id}
    try:
        for link in meta.get("link") or ():
            from_dict(link, app).apply_async((value,), **extra, **parent)
        chain = meta.get("chain") or ()
        if chain:
            rest = {"chain": list(chain[1:])} if len(chain) > 1 else {}
            from_dict(chain[0], app).apply_async((value,), **extra, **parent, **rest)
        if meta.get("chord"):
            _chord_member_done(app, conn, meta["chord"], encoded)
    except (ValidationError, TypeError) as exc:
        # Refused (the call started the canvas checked it, but this process may route or
        # define the task differently): every retry would run the task again to be refused
        # again, so this step fails once, saying why, and the canvas is told as for a failure.
        refused = _failure_class(type(exc))(
            f"{task.name}[{request.id}] returned, but what follows it could not be enqueued: {exc}"
        )
        _guarded(_tell_canvas, task, request, meta, refused, ExceptionInfo(refused))
        raise refused from exc


def _chord_member_done(app: Any, conn: Any, slot: dict[str, Any], encoded: Any) -> None:
    import json

    from ..drivers import detect_sync
    from ..sql import QUERIES
    from .canvas import from_dict

    driver = detect_sync(conn if conn is not None else app.connection())
    params = {"chord_id": slot["id"], "index": int(slot["index"]), "result": json.dumps(encoded)}
    rows = driver.fetch_all(QUERIES["chord_member_done"], params)
    if rows and rows[0]["remaining"] == 0:
        callback = from_dict(rows[0]["callback"], app)
        callback.apply_async((decode(rows[0]["results"]),), **({"connection": conn} if conn is not None else {}))
        driver.fetch_all(QUERIES["delete_chord"], {"chord_id": slot["id"]})


def _retry(task: Task, job: Any, request: Context, meta: dict[str, Any], retry: Retry) -> RetryAfter:
    delay = _delay(retry.when)
    patch = {k: v for k, v in meta.items() if k != "exc"}
    patch["retries"] = request.retries + 1
    if retry.exc is not None:
        patch["exc"] = {**exception_info(retry.exc), "attempt": job.attempt}
    if request._retry_args is not None:
        new_args, new_kwargs = request._retry_args
        patch["retry_args"], patch["retry_kwargs"] = encode(new_args, "retry.args"), encode(new_kwargs, "retry.kwargs")
        canonical_json(patch["retry_args"], "retry.args")
        canonical_json(patch["retry_kwargs"], "retry.kwargs")
    job.update_metadata({"celery": patch})
    _ensure_attempts(job, request._max_retries)
    einfo = ExceptionInfo(retry.exc) if retry.exc is not None else None
    _hook(task.on_retry, retry.exc, request.id, request.args, request.kwargs, einfo)
    signals.task_retry.send(sender=task, request=request, reason=retry.exc or retry, einfo=einfo)
    _hook(task.after_return, states.RETRY, retry, request.id, request.args, request.kwargs, einfo)
    _postrun(task, request, retry, states.RETRY)
    return RetryAfter(delay, reason=str(retry))


def _fail(task: Task, job: Any, request: Context, meta: dict[str, Any], exc: BaseException) -> None:
    info = {**exception_info(exc), "attempt": job.attempt}
    job.update_metadata({"celery": {**{k: v for k, v in meta.items() if k != "exc"}, "exc": info}})
    if not isinstance(exc, task.throws):
        # The worker logs the job's failure itself (its outcome line); eager mode has only this one.
        level = logging.WARNING if isinstance(job, EagerJob) else logging.DEBUG
        log.log(level, "task %s[%s] failed: %s: %s", task.name, request.id, type(exc).__name__, exc)
    einfo = ExceptionInfo(exc)
    _guarded(_tell_canvas, task, request, meta, exc, einfo)
    _hook(task.on_failure, exc, request.id, request.args, request.kwargs, einfo)
    signals.task_failure.send(
        sender=task,
        task_id=request.id,
        exception=exc,
        args=request.args,
        kwargs=request.kwargs,
        traceback=exc.__traceback__,
        einfo=einfo,
    )
    _hook(task.after_return, states.FAILURE, exc, request.id, request.args, request.kwargs, einfo)
    if not isinstance(exc, TimeLimitExceeded):  # Celery's on_timeout sends no task_postrun: the run never returned
        _postrun(task, request, exc, states.FAILURE)
    failure = _failure_class(type(exc))(str(exc))
    failure.task_exc = exc
    if getattr(exc, "__notes__", None):  # a prefork child's traceback, for one
        failure.__notes__ = list(exc.__notes__)
    raise failure.with_traceback(exc.__traceback__) from exc.__cause__


class TaskFailed(TerminalError):
    """A task's own exception, failing its job at once (Celery does not retry plain errors).

    The worker records a ``TerminalError`` by its class name, message and traceback. A
    subclass per exception class (``_failure_class``), named like it, makes the job's
    error record read as the task's exception (``ValueError``, its message, where it was
    raised), as a plain handler's failure does: that is what the admin, the CLI and SQL
    show. ``task_exc`` is the exception itself (eager mode's result).
    """

    task_exc: BaseException


#: exception class -> its TaskFailed subclass: one per class a task raised, made once.
_FAILURE_CLASSES: dict[type[BaseException], type[TaskFailed]] = {}


def _failure_class(cls: type[BaseException]) -> type[TaskFailed]:
    failure = _FAILURE_CLASSES.get(cls)
    if failure is None:
        attrs = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
        failure = _FAILURE_CLASSES[cls] = type(cls.__name__, (TaskFailed,), attrs)
    return failure


def _tell_canvas(task: Task, request: Context, meta: dict[str, Any], exc: BaseException, einfo: ExceptionInfo) -> None:
    """Errbacks, and the chord this task (or the last step of its chain) belongs to, as Celery's
    ``mark_as_failure``: a chord fails once, with ChordError, its callback never running."""
    from .canvas import from_dict

    app = task.app
    for data in meta.get("link_error") or ():
        errback = from_dict(data, app)
        if _takes_request(errback.type):
            errback(request, exc, exc.__traceback__)
        else:
            errback.apply_async((request.id,), parent_id=request.id)
    slots = [meta["chord"]] if meta.get("chord") else []
    slots += [step["options"]["chord"] for step in meta.get("chain") or () if (step.get("options") or {}).get("chord")]
    for slot in slots:
        _chord_member_failed(app, slot, request.id, f"Dependency {request.id} raised {exc!r}")
    if meta.get("chain"):
        _fail_chain_steps(app, request, meta, exc, einfo)


def _fail_chain_steps(
    app: Any, request: Context, meta: dict[str, Any], exc: BaseException, einfo: ExceptionInfo
) -> None:
    """Record the chain's later task steps failed with this error, as Celery's backend does: their
    results read FAILURE (of a later chord, its callback; a group and a chord's header stay PENDING)."""
    import json

    from ..drivers.psycopg import PsycopgSync
    from ..sql import QUERIES

    info = {**exception_info(exc), "attempt": 0}
    error = {"error": f"{type(exc).__name__}: {exc}", "type": "ChainStepFailed", "attempt": 0}
    error["traceback"] = einfo.traceback
    steps = []
    for step in meta["chain"]:
        if step.get("subtask_type") == "chord":
            step = step["kwargs"]["body"]
        options = step.get("options") or {}
        if step.get("subtask_type") in ("chain", "group", "chord") or not options.get("task_id"):
            continue
        task = app.tasks.get(step["task"])
        celery = {"id": options["task_id"], "exc": info, "parent_id": request.id}
        steps.append(
            {
                "kind": step["task"],
                "queue": options.get("queue") or (app.queue_of(task) if task else app.conf.task_default_queue),
                "args": {"args": step.get("args") or [], "kwargs": step.get("kwargs") or {}},
                "error": error,
                "metadata": {"celery": celery},
            }
        )
    if steps:
        PsycopgSync(app.connection()).fetch_all(QUERIES["fail_chain_steps"], {"steps": json.dumps(steps)})


def rescued_hook(app: Any) -> Callable[[dict[str, Any]], None]:
    """The worker's ``rescued`` hook: a task whose last attempt the leader ended (its worker died,
    or it ran past its deadline) failed without running its failure code; tell its errbacks and
    its chord here (in a thread: the hook runs on the worker's event loop)."""
    import threading

    def on_rescued(row: dict[str, Any]) -> None:
        if row.get("state") == "failed" and row.get("kind") in app.tasks:
            thread = threading.Thread(target=_guarded, args=(_lost, app, int(row["id"])), daemon=True)
            thread.start()

    return on_rescued


def _lost(app: Any, job_id: int) -> None:
    from ..drivers.psycopg import PsycopgSync
    from ..sql import QUERIES

    rows = PsycopgSync(app.connection()).fetch_all(QUERIES["get_job_result"], {"id": job_id})
    if not rows:
        return
    row = rows[0]
    meta = (row["metadata"] or {}).get("celery") or {}
    if not any(meta.get(key) for key in ("chord", "chain", "link_error")):
        return
    errors = row["errors"] or []
    exc = WorkerLostError((errors[-1].get("error") if errors else None) or "worker lost")
    task = app.tasks[row["kind"]]
    payload = row["args"] or {}
    request = Context(
        id=str(meta.get("id") or job_id),
        retries=int(meta.get("retries", 0)),
        args=decode(payload.get("args", [])),
        kwargs=decode(payload.get("kwargs", {})),
        called_directly=False,
        task=task.name,
    )
    _tell_canvas(task, request, meta, exc, ExceptionInfo(exc))


def _chord_member_failed(app: Any, slot: dict[str, Any], member_id: str | None, message: str) -> None:
    """Fail the chord once: its callback is enqueued to fail with ChordError, naming the member.

    This runs inside the member's handler, so the callback can fail before the member's
    own failure is written (the worker writes it once the handler returns); the member is
    recorded with the callback (``chord_error_from``) for ``get()`` to wait for it.
    """
    from ..drivers.psycopg import PsycopgSync
    from ..sql import QUERIES
    from .canvas import from_dict

    conn = app.connection()
    with conn.transaction():
        rows = PsycopgSync(conn).fetch_all(QUERIES["chord_member_failed"], {"chord_id": slot["id"]})
        if rows:
            callback = from_dict(rows[0]["callback"], app)
            callback.apply_async(connection=conn, chord_error=message, chord_error_from=member_id)


def _takes_request(task: Task) -> bool:
    """Celery calls an errback inline with (request, exc, traceback) when its function takes more than one argument."""
    import inspect

    fun = getattr(task, "__wrapped__", None)
    if fun is None:
        return False
    params = [
        p for p in inspect.signature(fun).parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if task._bound:
        params = params[1:]
    return len(params) > 1 or any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(fun).parameters.values())


def _postrun(task: Task, request: Context, retval: Any, state: str) -> None:
    signals.task_postrun.send(
        sender=task, task_id=request.id, task=task, args=request.args, kwargs=request.kwargs, retval=retval, state=state
    )


def _ensure_attempts(job: Any, max_retries: int | None) -> None:
    """Raise the job's max_attempts when this retry is allowed but the job has no attempt left."""
    if job.attempt < job.max_attempts:
        return
    wanted = MAX_ATTEMPTS if max_retries is None else min(max_retries + 1 + RESCUE_ATTEMPTS, MAX_ATTEMPTS)
    if isinstance(job, EagerJob):
        job.max_attempts = max(job.max_attempts, wanted)
        return
    if wanted > job.max_attempts and job.attached:
        job.raise_max_attempts(wanted)  # fenced by run_lease; a superseded attempt changes nothing


#: Attempts a job has beyond ``max_retries + 1``: re-runs after a lost worker, which Celery does not count.
RESCUE_ATTEMPTS = 3


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


def _guarded(fn: Callable[..., Any], *args: Any) -> None:
    try:
        fn(*args)
    except Exception:
        log.exception("telling the canvas of a failure raised (%s); ignored", getattr(fn, "__qualname__", fn))


# -- eager mode: the same attempt, on a job held in memory ------------------------------------------


class EagerJob:
    """What ``run_job`` needs of a job, for eager mode: no database, metadata kept in memory."""

    def __init__(self, task: Task, task_id: str, payload: dict[str, Any], retries: int, meta: dict[str, Any]) -> None:
        self.id = task_id
        self.kind = task.name
        self.queue = None
        self.priority = None
        self.attempt = 1
        self.max_attempts = task.max_attempts
        self.raw_args = payload
        self.metadata: dict[str, Any] = {"celery": {**meta, "id": task_id, "retries": retries}}
        self.conn = None
        self.result_json: str | None = None
        self.cancelled = False

    def update_metadata(self, values: dict[str, Any]) -> None:
        canonical_json(values, "metadata")
        self.metadata.update(values)

    def set_result(self, value: Any) -> None:
        self.result_json = None if value is None else canonical_json(value, "result")

    def flush_progress(self) -> None:
        """Nothing to write: eager state lives in memory."""


def run_eagerly(task: Task, payload: dict[str, Any], task_id: str, retries: int, meta: dict[str, Any]) -> EagerResult:
    """Run attempts of ``task`` here until an outcome is final; return it as an ``EagerResult``.

    A failure's ``EagerResult`` holds the task's own exception (``task_exc``
    of the ``TaskFailed``), as Celery's does.
    """
    job = EagerJob(task, task_id, payload, retries, meta)
    for _ in range(2 * MAX_ATTEMPTS):
        try:
            outcome = run_job(task, job)
        except TerminalError as exc:
            cause = exc.task_exc if isinstance(exc, TaskFailed) else exc
            text = "".join(tb.format_exception(type(cause), cause, cause.__traceback__))
            return EagerResult(task_id, cause, states.FAILURE, traceback=text, name=task.name)
        except (RetryAfter, Snooze, Cancel) as raised:
            outcome = raised
        except Exception as exc:  # awa retries a plain error with backoff while attempts remain
            outcome = exc
        if isinstance(outcome, Succeeded):
            return EagerResult(task_id, outcome.value, states.SUCCESS, name=task.name)
        if isinstance(outcome, Cancel):
            return EagerResult(task_id, TaskRevokedError(outcome.reason), states.REVOKED, name=task.name)
        if isinstance(outcome, Snooze):
            continue  # no attempt spent
        if job.attempt >= job.max_attempts:
            error = outcome if isinstance(outcome, Exception) else RuntimeError(str(outcome))
            return EagerResult(task_id, error, states.FAILURE, name=task.name)
        job.attempt += 1
    error = RuntimeError(f"{task.name} was still snoozing after {2 * MAX_ATTEMPTS} runs")
    return EagerResult(task_id, error, states.FAILURE, name=task.name)
