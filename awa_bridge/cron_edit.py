"""Database-only cron schedules: created, edited and deleted by an operator.

Schedules declared in settings (``AWA["PERIODIC"]``) or code
(``client.periodic``) belong to their declaration: a worker rewrites them at
start and deletes the ones no longer declared, so editing them anywhere else
would be undone. The schedules created here are marked ``database`` in
``awa.cron_job_sources``; no worker touches them, and they are edited and
deleted here only. Editing or deleting a declared schedule raises
``DeclaredSchedule`` (change its declaration instead). On a database
migrated by the real Awa (awa-pg: no ``awa.cron_job_sources``) a created
schedule's source is not recorded and any schedule can be edited or deleted,
as awa-pg's own ``delete_cron_job`` does (one that awa-pg's workers declare is
written back by their next start). Everything is
validated like a declaration (``PeriodicJob``: croniter for the expression,
``zoneinfo`` for the timezone, the job options as at insert) before
anything is written.
"""

from __future__ import annotations

from typing import Any

from .cron import PeriodicJob, ScheduleNotFound, _run, sourced_query
from .errors import AwaError, ValidationError
from .sql import QUERIES

__all__ = ["DeclaredSchedule", "create_schedule", "delete_schedule", "update_schedule"]


class DeclaredSchedule(AwaError):
    """The schedule is declared in settings or code: it is changed there, not in the database."""

    def __init__(self, name: str, owner: str | None) -> None:
        self.name = name
        self.owner = owner
        super().__init__(
            f"schedule {name!r} is declared in settings or code (owner {owner!r}): change or remove it "
            "there; a worker starting without it deletes it"
        )


def _params(schedule: PeriodicJob) -> dict[str, Any]:
    if not isinstance(schedule, PeriodicJob):
        raise TypeError(f"expected PeriodicJob, got {type(schedule).__name__}")
    params = schedule.params()
    del params["now"]
    return params


def create_schedule(conn_or_url: Any, schedule: PeriodicJob) -> None:
    """Store a new database-only schedule; ``ValidationError`` on ``name`` if one of that name exists."""
    params = _params(schedule)
    rows = _run(conn_or_url, lambda d, _: d.fetch_all(sourced_query(d, "create_cron_job"), params))
    if not rows:
        raise ValidationError("name", f"a schedule named {schedule.name!r} already exists")


def _lock_database_schedule(driver: Any, name: str) -> None:
    rows = driver.fetch_all(sourced_query(driver, "lock_cron_job_source"), {"name": name})
    if not rows:
        raise ScheduleNotFound(name)
    if rows[0]["source"] == "declared":
        raise DeclaredSchedule(name, rows[0]["owner"])


def update_schedule(conn_or_url: Any, schedule: PeriodicJob) -> None:
    """Replace the definition of the database-only schedule ``schedule.name`` (its fire history is kept)."""
    params = _params(schedule)

    def work(driver: Any, _conn: Any) -> None:
        _lock_database_schedule(driver, schedule.name)
        driver.fetch_all(QUERIES["update_cron_job"], params)

    _run(conn_or_url, work)


def delete_schedule(conn_or_url: Any, name: str) -> None:
    """Delete the database-only schedule ``name``; ``DeclaredSchedule`` for one settings or code declare."""

    def work(driver: Any, _conn: Any) -> None:
        _lock_database_schedule(driver, name)
        driver.fetch_all(QUERIES["delete_cron_job"], {"name": name})

    _run(conn_or_url, work)
