"""The operator actions behind every shell front end, written once.

``python -m awa_bridge jobs|queues|cron`` and Django's ``manage.py
awa_jobs|awa_queues|awa_cron`` parse their own arguments, then call these
with a *target* (a database URL, or a connection the bridge supports: the
Django commands pass the awa alias's connection) and a ``write`` function for
the output lines. So both say the same thing for the same action, and a fix
lands in both. Errors are ``AwaError`` subclasses; each front end turns them
into its one-line error (exit 2 for the CLI, ``CommandError`` for Django).
The tables too (jobs, queue stats, schedules) are drawn here, once.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from . import admin, cron
from .cli_support import UsageError, cell, error_lines, print_table
from .drivers.connect import sync_driver_for
from .enqueue import row_to_job
from .errors import JobNotFound, ValidationError
from .sql import QUERIES
from .types import Job

Write = Callable[[str], None]

JOB_COLUMNS = ["id", "kind", "queue", "state", "priority", "attempt", "max_attempts", "run_at", "created_at"]
_AFTER = {
    "retry": "available now, attempts reset",
    "cancel": "cancelled",
    "run-now": "available now",
}


class _JobOperation(Protocol):
    def __call__(self, conn_or_url: Any, job_id: int, *, operator: str | None = None) -> Job: ...


_OPERATIONS: dict[str, _JobOperation] = {
    "retry": admin.retry_job,
    "cancel": admin.cancel_job,
    "run-now": admin.run_now,
    "delete": admin.delete_job,
}


def _fetch(target: Any, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    with sync_driver_for(target) as driver:
        return driver.fetch_all(QUERIES[query], params)


def describe(job: Job) -> str:
    return f"job {job.id} ({job.kind}, queue {job.queue})"


# -- jobs -------------------------------------------------------------------------------------------


def list_jobs(target: Any, write: Write, *, state: str | None, queue: str | None, kind: str | None, limit: int) -> None:
    """Newest first, filtered; one table."""
    if limit < 1:
        raise ValidationError("--limit", f"must be at least 1, got {limit}")
    rows = _fetch(target, "list_jobs", {"queue": queue, "state": state, "kind": kind, "limit": limit})
    print_table(rows, JOB_COLUMNS, write)


def show_job(target: Any, job_id: int, write: Write) -> None:
    """One job in full: its columns, args / metadata / progress as JSON, the error history as tracebacks."""
    rows = _fetch(target, "get_job", {"id": admin.check_job_id(job_id)})
    if not rows:
        raise JobNotFound(job_id)
    job = row_to_job(rows[0])
    sections = ("args", "metadata", "progress", "errors")
    fields = [(f.name, getattr(job, f.name)) for f in dataclasses.fields(job) if f.name not in sections]
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        shown = getattr(value, "value", value)  # enums by their value
        if hasattr(shown, "isoformat"):
            shown = shown.isoformat(timespec="seconds")
        write(f"{name.ljust(width)}  {'-' if shown is None else shown}")
    for name in ("args", "metadata", "progress"):
        write(f"{name}:")
        text = json.dumps(getattr(job, name), indent=2, sort_keys=True, ensure_ascii=False, default=str)
        write("\n".join("  " + line for line in text.splitlines()))
    write(f"errors ({len(job.errors)}):")
    for line in error_lines(job.errors):
        write(line)


def job_action(target: Any, action: str, job_id: int, write: Write, *, operator: str | None = None) -> Job:
    """``retry`` / ``cancel`` / ``run-now`` / ``delete`` one job: one guarded statement, one line.

    ``operator`` (who acts) is recorded on the job's timeline (``awa.job_actions``).
    """
    job = _OPERATIONS[action](target, job_id, operator=operator)
    if action == "delete":
        write(f"{describe(job)} deleted (it was {job.state})")
        return job
    write(f"{describe(job)}: {_AFTER[action]}")
    if action == "cancel" and _was_running(job):
        write("  a running handler sees job.cancelled at its next heartbeat; its late result is discarded")
    return job


def _was_running(cancelled: Job) -> bool:
    """Whether the job was running when cancelled: its last error record says so ("... while running")."""
    last = cancelled.errors[-1] if cancelled.errors else {}
    return isinstance(last, dict) and str(last.get("error", "")).endswith("while running")


def retry_failed(target: Any, write: Write, *, kind: str | None, queue: str | None) -> None:
    retried, skipped = admin.retry_failed_report(target, kind=kind, queue=queue)
    scope = " ".join(f"{k} {v!r}" for k, v in (("kind", kind), ("queue", queue)) if v) or "all"
    line = f"retried {retried} failed job(s) ({scope})"
    if skipped:
        line += f"; {skipped} left failed: another job holds their unique key"
    write(line)


# -- queues -----------------------------------------------------------------------------------------


def pause_queue(
    target: Any, name: str, write: Write, *, paused_by: str, create: bool, configured: Iterable[str] = ()
) -> None:
    """Pause a queue; a name nothing knows (no job, pause, worker, nor ``configured``) needs ``create``."""
    if not create:
        refuse_unknown_queue(target, name, configured, "; add --create to pause it before first use")
    admin.pause_queue(target, name, paused_by=paused_by)
    write(f"queue {name} paused: workers stop claiming within one poll interval; running jobs finish")


def refuse_unknown_queue(target: Any, name: str, configured: Iterable[str], hint: str = "") -> None:
    """``UsageError`` for a name no job, pause, worker (live, or its recorded throughput) nor ``configured``
    has used: a typo, most likely."""
    known = set(configured)
    if name not in known and not admin.queue_known(target, name):
        names = sorted(known | {s.queue for s in admin.queue_stats(target)})
        raise UsageError(
            f"unknown queue {name!r}: no job, pause or worker has used it (known: {', '.join(names) or 'none yet'})"
            + hint
        )


QUEUE_STATS_COLUMNS = ["queue", "paused", "available", "running", "scheduled", "retryable", "waiting_external"]
QUEUE_STATS_COLUMNS += ["failed", "completed_last_hour", "lag_seconds"]


def queue_stats(target: Any, write: Write, name: str | None = None, *, configured: Iterable[str] = ()) -> None:
    """One row per queue (or only ``name``): live jobs by state, failures, last hour's completions, lag.

    With ``configured`` (a Django project's ``AWA['QUEUES']``, which a Django user reads as the
    list of queues), every configured queue has its row, of zeros before its first job.
    """
    stats = {s.queue: s for s in admin.queue_stats(target, name)}
    if name is None:
        for missing in sorted(set(configured) - stats.keys()):
            [stats[missing]] = admin.queue_stats(target, missing)  # its row of zeros
    rows = [{c: getattr(stats[q], c) for c in QUEUE_STATS_COLUMNS} for q in sorted(stats)]
    print_table(rows, QUEUE_STATS_COLUMNS, write)


def resume_queue(target: Any, name: str, write: Write, *, configured: Iterable[str] = ()) -> None:
    """Resume a paused queue; a queue that was not paused is said so, an unknown name refused."""
    if admin.resume_queue(target, name):
        write(f"queue {name} resumed")
        return
    refuse_unknown_queue(target, name, configured)
    write(f"queue {name} was not paused; nothing to do")


# -- cron -------------------------------------------------------------------------------------------

SCHEDULE_COLUMNS = ["name", "source", "cron_expr", "timezone", "kind", "queue", "missed_fire_policy", "paused"]
SCHEDULE_COLUMNS += ["last_enqueued_at", "next_fire_at"]


def list_schedules(target: Any, write: Write, warn: Write) -> None:
    """Every schedule: its definition, whether (and by whom) it is paused, its last and next fire.

    On a database migrated by awa-pg nothing records where a schedule was
    declared: the source column is left out and ``warn`` (stderr) says why.
    """
    schedules = cron.list_schedules(target)
    columns = SCHEDULE_COLUMNS
    if schedules and schedules[0].source is None:
        columns = [c for c in SCHEDULE_COLUMNS if c != "source"]
        warn(cron.SOURCES_UNKNOWN)
    rows = []
    for schedule in schedules:
        row = {c: getattr(schedule, c) for c in columns}
        if schedule.paused and schedule.paused_by:
            row["paused"] = f"yes (by {schedule.paused_by})"
        rows.append(row)
    print_table(rows, columns, write, empty="(no schedules)")


def pause_schedule(target: Any, name: str, write: Write, *, paused_by: str | None) -> None:
    """Pause ``name``; one already paused is left as it is (its first pause's author and time kept) and said so."""
    current = cron.get_schedule(target, name)
    if current.paused_at is not None:
        by = f" by {current.paused_by}" if current.paused_by else ""
        write(f"schedule {name} was already paused{by} since {cell(current.paused_at)}; nothing to do")
        return
    cron.pause_schedule(target, name, paused_by=paused_by)
    write(f"schedule {name} paused")


def resume_schedule(target: Any, name: str, write: Write, *, skip_missed: bool) -> None:
    cron.resume_schedule(target, name, skip_missed=skip_missed)
    write(f"schedule {name} resumed" + (" (fires missed while paused skipped)" if skip_missed else ""))


def trigger_schedule(target: Any, name: str, write: Write) -> None:
    job = cron.trigger_schedule(target, name)
    write(f"schedule {name}: enqueued job {job.id} ({job.kind} on {job.queue})")
