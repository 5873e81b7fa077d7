"""``AsyncResult``: a task's state and outcome, read from its job (``awa.jobs`` + ``awa.job_results``).

The id is the job id (a string, as Celery's ids are). States follow
``states.from_job``. A failed task's error comes back as an exception of its
original class when that class can be found safely (its module is already
imported, or is the module of a task of the app) and rebuilt from its
arguments; otherwise as ``TaskError`` carrying the class path, the message and
the worker's traceback. Results live exactly as long as their job (the
worker's retention), after which the id reads as PENDING, as an expired
result does in Celery.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..args import canonical_json
from ..errors import InvalidState, JobNotFound, ValidationError
from . import states
from .errors import TaskError, TaskRevokedError, TimeoutError, UnsupportedOption
from .serialization import decode

if TYPE_CHECKING:
    from .app import Awa

#: True while a task runs in this thread: ``get()`` refuses to block there (as Celery does).
in_task: ContextVar[bool] = ContextVar("awa_celery_in_task", default=False)


def exception_info(exc: BaseException) -> dict[str, Any]:
    """What is kept of an exception to rebuild it later: class path, message, JSON-able args."""
    cls = type(exc)
    info: dict[str, Any] = {"type": f"{cls.__module__}.{cls.__qualname__}", "message": str(exc)}
    try:
        canonical_json(list(exc.args), "args")
    except ValidationError:
        pass
    else:
        info["args"] = list(exc.args)
    return info


def rebuild_exception(info: dict[str, Any], allowed_modules: set[str], traceback: str | None = None) -> BaseException:
    """An exception of the original class when it is found safely, else ``TaskError``."""
    type_path = str(info.get("type") or "Exception")
    message = str(info.get("message") or "")
    cls = _find_class(type_path, allowed_modules)
    if cls is not None:
        try:
            args = info.get("args")
            exc = cls(*args) if isinstance(args, list) else cls(message)
        except Exception:
            pass
        else:
            exc.__traceback_text__ = traceback  # type: ignore[attr-defined]
            return exc
    return TaskError(type_path, message, traceback)


def _find_class(type_path: str, allowed_modules: set[str]) -> type[BaseException] | None:
    parts = type_path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        module = sys.modules.get(module_name)
        if module is None and module_name in allowed_modules:
            try:
                module = importlib.import_module(module_name)
            except Exception:
                return None
        if module is None:
            continue
        found: Any = module
        for name in parts[cut:]:
            found = getattr(found, name, None)
        # Only ordinary errors: never SystemExit, KeyboardInterrupt or other BaseException-only classes.
        if isinstance(found, type) and issubclass(found, Exception):
            return found
        return None
    return None


def _custom_state(row: dict[str, Any]) -> dict[str, Any] | None:
    """What ``update_state`` wrote while the job runs (``metadata.celery_state``)."""
    custom = (row["metadata"] or {}).get("celery_state")
    return custom if isinstance(custom, dict) and isinstance(custom.get("state"), str) else None


class AsyncResult:
    """A task call's handle: ``AsyncResult(id)`` or what ``delay()`` returned."""

    def __init__(self, id: str | int, app: Awa | None = None, task_name: str | None = None) -> None:
        self.id = str(id)
        self._app = app
        self.task_name = task_name
        self._row: dict[str, Any] | None = None
        self._final = False
        #: The result of the task before this one in a chain (set by canvas calls), as in Celery.
        self.parent: Any = None

    @property
    def app(self) -> Awa:
        from .app import current_app

        return self._app or current_app()

    @property
    def task_id(self) -> str:
        return self.id

    def __repr__(self) -> str:
        return f"<AsyncResult: {self.id}>"

    def __str__(self) -> str:
        return self.id

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AsyncResult):
            return other.id == self.id
        if isinstance(other, str):
            return other == self.id
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.id)

    # -- reading the job ----------------------------------------------------------------

    @property
    def job_id(self) -> int | None:
        """The job's id: the id itself for ``delay()`` results; for a canvas task id (a uuid
        given before the job existed) the id of its job once it is enqueued, else None."""
        if self.id.isdigit():
            return int(self.id) if 0 < int(self.id) < 2**63 else None
        row = self._fetch()
        return int(row["id"]) if row else None

    def _fetch(self) -> dict[str, Any] | None:
        if self._final:
            return self._row
        from ..drivers.psycopg import PsycopgSync
        from ..sql import QUERIES

        driver = PsycopgSync(self.app.connection())
        if self.id.isdigit():
            job_id = int(self.id)
            rows = driver.fetch_all(QUERIES["get_job_result"], {"id": job_id}) if 0 < job_id < 2**63 else []
        else:
            rows = driver.fetch_all(QUERIES["get_job_result_by_task_id"], {"task_id": self.id})
        row = rows[0] if rows else None
        self._row = row
        self._final = row is not None and states.from_job(row["state"]) in (states.SUCCESS, states.FAILURE)
        return row

    @property
    def state(self) -> str:
        """Celery's state of the job; while it runs, the state its task set with ``update_state``."""
        row = self._fetch()
        if row is None:
            return states.PENDING
        state = states.from_job(row["state"], row["attempt"])
        custom = _custom_state(row)
        return custom["state"] if custom is not None and state == states.STARTED else state

    status = state

    def ready(self) -> bool:
        return self.state in states.READY_STATES

    def successful(self) -> bool:
        return self.state == states.SUCCESS

    def failed(self) -> bool:
        return self.state == states.FAILURE

    @property
    def result(self) -> Any:
        """The return value (SUCCESS), the error (FAILURE, RETRY, REVOKED), else None."""
        return self._outcome(self._fetch())

    info = result

    @property
    def traceback(self) -> str | None:
        row = self._fetch()
        if row is None or states.from_job(row["state"], row["attempt"]) not in states.EXCEPTION_STATES:
            return None
        errors = row["errors"] or []
        return errors[-1].get("traceback") if errors else None

    @property
    def date_done(self) -> datetime | None:
        row = self._fetch()
        return row["finalized_at"] if row else None

    @property
    def name(self) -> str | None:
        row = self._fetch()
        return row["kind"] if row else self.task_name

    @property
    def args(self) -> list[Any] | None:
        row = self._fetch()
        return decode((row["args"] or {}).get("args")) if row else None

    @property
    def kwargs(self) -> dict[str, Any] | None:
        row = self._fetch()
        return decode((row["args"] or {}).get("kwargs")) if row else None

    @property
    def queue(self) -> str | None:
        row = self._fetch()
        return row["queue"] if row else None

    @property
    def retries(self) -> int | None:
        row = self._fetch()
        if row is None:
            return None
        return int(((row["metadata"] or {}).get("celery") or {}).get("retries", 0))

    def _outcome(self, row: dict[str, Any] | None) -> Any:
        if row is None:
            return None
        state = states.from_job(row["state"], row["attempt"])
        if state == states.SUCCESS:
            return decode(row["result"])
        custom = _custom_state(row)
        if state == states.STARTED and custom is not None:
            return decode(custom.get("meta"))
        errors = row["errors"] or []
        last = errors[-1] if errors else {}
        if state == states.REVOKED:
            return TaskRevokedError(last.get("error") or "revoked")
        if state not in (states.FAILURE, states.RETRY):
            return None
        info = ((row["metadata"] or {}).get("celery") or {}).get("exc")
        # The task's own error when it ended the latest attempt; else what awa
        # recorded for it (deadline exceeded, rescued after a crash, unknown kind...).
        if not info or info.get("attempt") != last.get("attempt"):
            if not last:
                return None
            info = {"type": last.get("type") or "Exception", "message": last.get("error") or ""}
        modules = {getattr(t, "__wrapped__", t).__module__ for t in self.app.tasks.values()}
        return rebuild_exception(info, modules, last.get("traceback"))

    # -- waiting ---------------------------------------------------------------------------

    def get(
        self,
        timeout: float | None = None,
        propagate: bool = True,
        interval: float = 0.5,
        disable_sync_subtasks: bool = True,
        **ignored: Any,
    ) -> Any:
        """Wait until the task is ready; return its value, or raise its error (``propagate``).

        Polls the job every ``interval`` seconds; past ``timeout`` raises
        ``TimeoutError``. A REVOKED task raises ``TaskRevokedError``.
        """
        if ignored:
            key = next(iter(ignored))
            raise UnsupportedOption(key, "AsyncResult.get() takes timeout, propagate, interval, disable_sync_subtasks")
        if disable_sync_subtasks and in_task.get():
            raise RuntimeError(
                "Never call result.get() within a task! (it blocks a worker slot waiting for another job)"
            )
        return self._wait(timeout, propagate, interval, parents=propagate)

    wait = get

    def _wait(self, timeout: float | None, propagate: bool, interval: float, parents: bool) -> Any:
        """Poll until ready; with ``parents``, a failed parent's error is raised first (Celery's
        ``get``; its ``GroupResult.get`` waits on each member alone, without its parents)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if parents:
                self._maybe_reraise_parent_error()
            row = self._fetch()
            state = states.from_job(row["state"], row["attempt"]) if row else states.PENDING
            if state in states.READY_STATES:
                break
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise TimeoutError(f"The operation timed out: task {self.id} still {state} after {timeout} s")
            time.sleep(interval if deadline is None else max(min(interval, deadline - now), 0.0))
        value = self._outcome(row)
        if state != states.SUCCESS and propagate:
            if parents:
                # The parent may have failed (and so this one) between the check above and the fetch:
                # its error still comes first, whichever poll saw the failures.
                self._await_chord_cause(row, deadline, interval)
                self._maybe_reraise_parent_error()
            raise value
        return value

    def _await_chord_cause(self, row: dict[str, Any] | None, deadline: float | None, interval: float) -> None:
        """Wait (until ``deadline``) for the header member whose failure failed this chord callback.

        The member fails the chord while its handler runs, and its own failure is
        written once the handler returns: the callback can read FAILURE first. Celery
        stores the member's failure first, so its ``get`` raises the member's error;
        waiting for that member (one of this result's parents) keeps it so.
        """
        cause = (((row or {}).get("metadata") or {}).get("celery") or {}).get("chord_error_from")
        if cause is None:
            return
        member = next((m for m in self._parent_members() if m.id == cause), None)
        while member is not None and member.state not in states.READY_STATES:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return
            time.sleep(interval if deadline is None else max(min(interval, deadline - now), 0.0))

    def _maybe_reraise_parent_error(self) -> None:
        """As Celery's ``get``: the error of a failed earlier chain step, or of a failed member of
        the chord header before this callback, is raised at once (the later steps never run)."""
        for member in self._parent_members(earliest_first=True):
            if member.state in states.PROPAGATE_STATES:
                raise member.result

    def _parent_members(self, earliest_first: bool = False) -> Iterator[AsyncResult]:
        """The results of the earlier chain steps and chord headers: each parent, or its members."""
        nodes = list(self._parents())
        for node in reversed(nodes) if earliest_first else nodes:
            for member in node.results if isinstance(node, GroupResult) else [node]:
                if isinstance(member, AsyncResult):
                    yield member

    def _parents(self) -> Any:
        node = self.parent
        while node is not None:
            yield node
            node = getattr(node, "parent", None)

    def build_graph(self, intermediate: bool = False) -> Any:
        raise UnsupportedOption("build_graph", "awa keeps no result graph; follow .parent")

    @property
    def children(self) -> list[Any]:
        return []

    # -- acting -------------------------------------------------------------------------------

    def revoke(self, connection: Any = None, terminate: bool = False, signal: Any = None, **options: Any) -> None:
        """Cancel the job (``admin.cancel_job``): not started yet, it never runs; running, it is
        told cooperatively (``self.request.job.cancelled``) and its late result is discarded.

        A finished or unknown task is left alone, as in Celery. ``connection``
        (a sync connection or session) runs the cancel inside that transaction.
        """
        from .. import admin

        if signal is not None:
            raise UnsupportedOption(
                "signal", "awa cancels cooperatively (the task sees self.request.job.cancelled); no signal is sent"
            )
        for key in options:
            if key not in ("wait", "timeout", "reply"):
                raise UnsupportedOption(
                    key,
                    "AsyncResult.revoke() takes terminate (and wait/timeout, which have "
                    "nothing to wait for: the cancel is one UPDATE)",
                )
        job_id = self.job_id
        if job_id is None:
            return
        try:
            admin.cancel_job(connection if connection is not None else self.app.connection(), job_id)
        except (JobNotFound, InvalidState):
            return
        self._final = False

    def forget(self) -> None:
        """Delete the stored return value (the job itself stays until its retention)."""
        from ..drivers.psycopg import PsycopgSync
        from ..sql import QUERIES

        if self.job_id is not None:
            PsycopgSync(self.app.connection()).fetch_all(QUERIES["forget_job_result"], {"id": self.job_id})
        self._row, self._final = None, False


class EagerResult:
    """The result of a task run in eager mode (``apply()`` / ``task_always_eager``)."""

    #: None, as on Celery's EagerResult: its task meta holds only the state, result, traceback and name.
    retries = args = kwargs = date_done = children = queue = None

    def __init__(
        self, id: str, ret_value: Any, state: str, traceback: str | None = None, name: str | None = None
    ) -> None:
        self.id = id
        self._result = ret_value
        self._state = state
        self.traceback = traceback
        self.name = self.task_name = name
        self.parent: Any = None

    def __repr__(self) -> str:
        return f"<EagerResult: {self.id}>"

    @property
    def task_id(self) -> str:
        return self.id

    @property
    def state(self) -> str:
        return self._state

    status = state

    @property
    def result(self) -> Any:
        return self._result

    info = result

    def ready(self) -> bool:
        return True

    def successful(self) -> bool:
        return self._state == states.SUCCESS

    def failed(self) -> bool:
        return self._state == states.FAILURE

    def get(self, timeout: float | None = None, propagate: bool = True, **options: Any) -> Any:
        if self._state in states.PROPAGATE_STATES and propagate:
            raise self._result
        return self._result

    wait = get

    def revoke(self, *args: Any, **kwargs: Any) -> None:
        self._state = states.REVOKED
        self._result = TaskRevokedError("revoked")

    def forget(self) -> None:
        pass


class GroupResult:
    """The results of a group's tasks, in the group's order (Celery's ``GroupResult``).

    ``get()`` / ``join()`` wait for each member in order and return their
    values as a list; with ``propagate`` the first failed member (in that
    order) raises its error, as in Celery.
    """

    def __init__(
        self, id: str | None = None, results: list[Any] | None = None, parent: Any = None, app: Awa | None = None
    ) -> None:
        self.id = id
        self.results: list[Any] = list(results or [])
        self.parent = parent
        self._app = app

    def __repr__(self) -> str:
        return f"<GroupResult: {self.id} [{', '.join(r.id for r in self.results)}]>"

    def __iter__(self) -> Any:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def __getitem__(self, index: int) -> Any:
        return self.results[index]

    @property
    def children(self) -> list[Any]:
        return self.results

    def ready(self) -> bool:
        return all(r.ready() for r in self.results)

    def successful(self) -> bool:
        return all(r.successful() for r in self.results)

    def failed(self) -> bool:
        return any(r.failed() for r in self.results)

    def waiting(self) -> bool:
        return not self.ready()

    def completed_count(self) -> int:
        return sum(int(r.successful()) for r in self.results)

    def get(
        self, timeout: float | None = None, propagate: bool = True, interval: float = 0.5, **options: Any
    ) -> list[Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        values = []
        for result in self.results:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            if isinstance(result, AsyncResult):
                values.append(result._wait(left, propagate, interval, parents=False))
            elif isinstance(result, GroupResult):
                values.append(result.get(timeout=left, propagate=propagate, interval=interval, **options))
            else:
                values.append(result.get(timeout=left, propagate=propagate))
        return values

    join = get

    def revoke(self, connection: Any = None, terminate: bool = False, **options: Any) -> None:
        for result in self.results:
            result.revoke(connection=connection, terminate=terminate, **options)

    def forget(self) -> None:
        for result in self.results:
            result.forget()

    def save(self, backend: Any = None) -> GroupResult:
        """Store the group's member ids in PostgreSQL, for ``GroupResult.restore(id)`` (Celery's
        ``save``): one completed row in ``awa.jobs`` (kind ``celery.group``), kept as long as
        every result (the worker's retention); saving again replaces it."""
        if backend is not None:
            raise UnsupportedOption("backend", "group results are stored in PostgreSQL; drop backend=")
        if self.id is None:
            raise ValidationError("id", "a GroupResult needs its id to be saved")
        members = [_member_ids(r) for r in self.results]
        _run(self._owner(), "save_group_result", {"key": _saved_key(self.id), "ids": json.dumps(members)})
        return self

    def delete(self, backend: Any = None) -> None:
        """Remove what ``save()`` stored."""
        if self.id is not None:
            _run(self._owner(), "delete_group_result", {"key": _saved_key(self.id)})

    @classmethod
    def restore(cls, id: str, backend: Any = None, app: Any = None) -> GroupResult | None:
        """The group saved under ``id`` (None when none was, or it expired), as Celery's."""
        from .app import current_app

        if backend is not None:
            raise UnsupportedOption("backend", "group results are stored in PostgreSQL; drop backend=")
        owner = app or cls._default_app or current_app()
        rows = _run(owner, "restore_group_result", {"key": _saved_key(id)})
        if not rows:
            return None
        return cls(id, [_from_member_ids(m, owner) for m in rows[0]["result"]], app=owner)

    def _owner(self) -> Awa:
        from .app import current_app

        return self._app or type(self)._default_app or current_app()

    #: The app of ``app.GroupResult`` (see ``bound_group_result``); None: the current app.
    _default_app: Awa | None = None


def _run(app: Awa, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    from ..drivers.psycopg import PsycopgSync
    from ..sql import QUERIES

    return PsycopgSync(app.connection()).fetch_all(QUERIES[name], params)


def _saved_key(group_id: str) -> str:
    """The id a saved group is found by: Celery's backend key for it (apart from task ids)."""
    return f"celery-taskset-meta-{group_id}"


def _member_ids(result: Any) -> Any:
    """A member as stored: its id, or for a nested group ``{"group": id, "results": [...]}``."""
    if isinstance(result, GroupResult):
        return {"group": result.id, "results": [_member_ids(r) for r in result.results]}
    return str(result.id)


def _from_member_ids(data: Any, app: Any) -> Any:
    if isinstance(data, dict):
        return GroupResult(data.get("group"), [_from_member_ids(d, app) for d in data["results"]], app=app)
    return AsyncResult(data, app=app)


def bound_group_result(app: Awa) -> type[GroupResult]:
    """``app.GroupResult``: ``GroupResult`` on ``app``'s database (``app.GroupResult.restore(id)``)."""
    return type("GroupResult", (GroupResult,), {"_default_app": app, "__module__": __name__})
