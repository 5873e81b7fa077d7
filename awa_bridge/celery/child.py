"""``worker_pool="prefork"``: a task with a hard ``time_limit`` runs in a child process, killed at it.

Only the task's function runs in the child (``ProcessPool.run(..., raw=True)``
from ``awa_bridge.worker.processes``, one pool per queue, children replaced
after ``worker_max_tasks_per_child`` tasks). Everything around it stays in
the worker: the request, signals, hooks, retry counting, results and canvas
continuations, so they behave exactly as for a task run in a thread. In the
child the task's ``self.request`` is the same; ``update_state`` writes at
once on the child's own connection (fenced by the attempt's run_lease);
``job.set_progress`` and ``update_metadata`` are carried back when it ends.

At the hard limit the child is SIGKILLed: the task fails with
``TimeLimitExceeded`` (``on_failure``, ``task_failure`` in the worker, as
Celery's ``on_timeout``) and is not retried. The soft limit is a SIGALRM in
the child, so it interrupts ``time.sleep`` and blocking reads. A child that
dies otherwise (a crash, ``os._exit``) is a lost worker to Celery with
``acks_late``: the task runs again without spending a retry, as long as the
job has attempts left.

Children are started with ``spawn`` and import the task's module by name, so
the task's function must be defined at module level; a task that is not (a
function defined inside another) runs in a thread with the thread limits.
The app's ``child_setup`` runs first in each child (``awa_django``'s app sets
Django up there, as Celery's Django fixup does in its pool's children).
"""

from __future__ import annotations

import logging
import pickle
import sys
import threading
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..worker.outcomes import RetryAfter
from .errors import TimeLimitExceeded

if TYPE_CHECKING:
    from ..worker.context import JobContext
    from .task import Task

log = logging.getLogger("awa_bridge.celery")

_pools: dict[str, Any] = {}
_pools_lock = threading.Lock()


def module_of(task: Task) -> str | None:
    """The module a child imports to find ``task``; None when its function is not at module level."""
    fun = getattr(task, "__wrapped__", None)
    module = sys.modules.get(getattr(fun, "__module__", "") or "")
    if fun is None or module is None:
        return None
    found = getattr(module, fun.__qualname__, None)
    return str(fun.__module__) if found is fun or found is task else None


def _pool(task: Task, queue: str) -> Any:
    from ..worker.processes import ProcessPool

    with _pools_lock:
        pool = _pools.get(queue)
        if pool is None:
            app = task.app
            modules = sorted({m for t in [task, *app.tasks.values()] if (m := module_of(t)) is not None})
            init = ChildInit(app.child_setup, tuple(modules))
            pool = _pools[queue] = ProcessPool(f"celery-{queue}", app.conf.worker_max_tasks_per_child, init)
    return pool


@dataclass(frozen=True)
class ChildInit:
    """A child's start, before its clock runs (as Celery's pool initializer): the app's ``child_setup``,
    then the tasks' modules, so no attempt's time limit pays for them."""

    setup: str | None
    modules: tuple[str, ...]

    def __call__(self) -> None:
        import importlib

        _set_up(self.setup)
        for module in self.modules:
            importlib.import_module(module)


def shutdown() -> None:
    """Stop the idle children (the worker's ``shutdown`` hook); busy ones end with the worker."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.shutdown()


def run_in_child(task: Task, job: JobContext, module: str, soft: float | None, hard: float) -> Any:
    """The task's function in a child of the queue's pool: its value, or what it raised."""
    from ..worker.processes import ChildKilled, apply_recorded

    # update_state in the child writes to the worker's database (None outside a worker: the app's).
    database_url = job.database_url or task.app.conf.database_url
    call = ChildCall(module, task.name, soft, database_url, task.app.child_setup)
    try:
        carried = _pool(task, job.queue).run(call, job, hard, raw=True)
    except ChildKilled as exc:
        if exc.overran:
            log.error("Hard time limit (%ss) exceeded for %s[%s]: its process was killed", hard, task.name, job.id)
            raise TimeLimitExceeded(hard) from None
        raise RetryAfter(1.0, f"the task's process was lost ({exc}); run again, not counted as a retry") from None
    apply_recorded(job, carried)
    raised, value, retry_state = carried[0]
    request = task.request
    request._retry, request._retry_args, request._max_retries = retry_state
    if raised:
        raise value
    return value


@dataclass(frozen=True)
class ChildCall:
    """What a child runs for one attempt (pickled by reference: the task is found by module and name)."""

    module: str
    name: str
    soft: float | None
    database_url: str | None
    setup: str | None = None

    def __call__(self, job: JobContext) -> tuple[bool, Any, Any]:
        import importlib

        from .task import BUILT_TASKS

        try:
            _set_up(self.setup)
            importlib.import_module(self.module)
            task = BUILT_TASKS[(self.module, self.name)]
        except Exception as exc:
            error = RuntimeError(f"task {self.name}: its child process could not import {self.module}: {exc!r}")
            return True, error, (None, None, None)
        job.flush_progress = lambda: _flush(self.database_url, job)  # type: ignore[method-assign]
        return _run_here(task, job, self.soft)


_done_setup: set[str] = set()


def _set_up(setup: str | None) -> None:
    """The app's ``child_setup``, once in this child, before any task module is imported."""
    if setup is None or setup in _done_setup:
        return
    import importlib

    module, _, function = setup.partition(":")
    getattr(importlib.import_module(module), function)()
    _done_setup.add(setup)


def _run_here(task: Task, job: JobContext, soft: float | None) -> tuple[bool, Any, Any]:
    """In the child: (raised?, the value or the exception, the retry the task asked for)."""
    from .limits import AlarmLimit, run_coroutine
    from .result import in_task
    from .worker import _arguments, _expiry, _request, _running

    meta = dict(job.metadata.get("celery") or {})
    args, kwargs = _arguments(task, job.raw_args, meta)
    request = _request(task, job, meta, args, kwargs, _expiry(meta, job.metadata), False)
    token, guard = task.push_request(request), in_task.set(True)
    running = _running.set((task.name, str(request.id)))
    answer: tuple[bool, Any]
    try:
        if task.is_async:
            answer = (False, run_coroutine(task.invoke(args, kwargs), soft))
        else:
            with AlarmLimit(soft):
                answer = (False, task.invoke(args, kwargs))
    except BaseException as exc:
        exc.add_note(f"In the task's child process:\n{''.join(traceback.format_tb(exc.__traceback__))}")
        answer = (True, exc)
    finally:
        _running.reset(running)
        in_task.reset(guard)
        task.pop_request(token)
    return _portable(task, answer, (request._retry, request._retry_args, request._max_retries))


def _portable(task: Task, answer: tuple[bool, Any], retry_state: Any) -> tuple[bool, Any, Any]:
    """The answer, or an error saying it cannot cross back to the worker (pickle)."""
    carried = (*answer, retry_state)
    try:
        pickle.loads(pickle.dumps(carried))
    except Exception as exc:
        what = "exception" if answer[0] else "return value"
        error = TypeError(f"the {what} of {task.name} cannot be sent back from its child process: {exc}")
        return True, error, (None, None, None)
    return carried


def _flush(database_url: str | None, job: JobContext) -> None:
    """``job.flush_progress`` in a child (``update_state``): see ``processes.flush_in_child``."""
    from ..worker.processes import flush_in_child

    if database_url is None:
        raise RuntimeError("update_state in a child process: the worker gave it no database URL")
    flush_in_child(database_url, job)
