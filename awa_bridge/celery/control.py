"""``app.control.inspect()``, answered from the database instead of by broadcasting to workers.

Celery's answers are keyed by worker hostname; awa knows which jobs are held
but not by which process (any worker can finish any job), so every answer has
one key, ``awa@<database>``. ``active`` lists running jobs of the app's tasks,
``scheduled`` the ones waiting for an ``eta`` / ``countdown`` or a retry,
``reserved`` the ones ready to be claimed, ``registered`` the app's task
names. Like Celery, each returns None when there is nothing to report from
(no worker has registered tasks: here, when the app has none).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .serialization import decode

if TYPE_CHECKING:
    from .app import Awa

#: At most this many jobs per answer (the inspect commands are for looking, not for exports).
LIMIT = 1000


class Inspect:
    def __init__(self, app: Awa, destination: Any = None) -> None:
        self.app = app
        self.destination = destination

    @property
    def node(self) -> str:
        parts = urlsplit(self.app.database_url)
        return f"awa@{parts.hostname or 'localhost'}{parts.path or ''}"

    def _answer(self, value: Any) -> dict[str, Any] | None:
        return {self.node: value} if self.app.tasks else None

    def registered(self, *taskinfoitems: Any) -> dict[str, Any] | None:
        return self._answer(sorted(self.app.tasks))

    registered_tasks = registered

    def active(self, safe: Any = None) -> dict[str, Any] | None:
        return self._answer([_describe(row) for row in self._jobs(["running"])])

    def scheduled(self, safe: Any = None) -> dict[str, Any] | None:
        rows = self._jobs(["scheduled", "retryable"])
        return self._answer(
            [{"eta": row["run_at"].isoformat(), "priority": row["priority"], "request": _describe(row)} for row in rows]
        )

    def reserved(self, safe: Any = None) -> dict[str, Any] | None:
        return self._answer([_describe(row) for row in self._jobs(["available"])])

    def ping(self) -> dict[str, Any] | None:
        return self._answer({"ok": "pong"})

    def _jobs(self, job_states: list[str]) -> list[dict[str, Any]]:
        from ..drivers.psycopg import PsycopgSync
        from ..sql import QUERIES

        params = {"kinds": sorted(self.app.tasks), "states": job_states, "limit": LIMIT}
        return PsycopgSync(self.app.connection()).fetch_all(QUERIES["celery_jobs_in_states"], params)


def _describe(row: dict[str, Any]) -> dict[str, Any]:
    """A job as Celery's inspect describes a request."""
    meta = (row["metadata"] or {}).get("celery") or {}
    payload = row["args"] or {}
    started = row["attempted_at"]
    return {
        "id": str(meta.get("id") or row["id"]),
        "name": row["kind"],
        "args": decode(payload.get("args", [])),
        "kwargs": decode(payload.get("kwargs", {})),
        "type": row["kind"],
        "hostname": None,
        "time_start": started.timestamp() if started is not None and row["state"] == "running" else None,
        "acknowledged": row["state"] == "running",
        "delivery_info": {"queue": row["queue"], "priority": row["priority"]},
        "worker_pid": None,
    }
