"""A job's life as one timeline, and tracebacks that open with the user's own code.

Everything comes from the job's row (created, run at, attempted, finalized,
the ``errors`` history the worker and the rescuers append to), from
``awa.job_actions`` (what operators did, and who) and from
``awa.job_claims`` and ``awa.job_attempts`` (which worker claimed each
attempt, and the snoozes), which the claim and finish statements write as they
run: no extra statement on the worker's hot path, one row per claim statement.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connections
from django.utils.dateparse import parse_datetime

from awa_bridge.drivers import detect_sync
from awa_bridge.sql import QUERIES

from .display import humanize_seconds

#: Error types written by the rescuers (not by the handler).
RESCUES = {
    "HeartbeatStale": "rescued: its worker stopped heartbeating",
    "DeadlineExceeded": "rescued: it ran past its deadline",
    "Superseded": "rescued: a newer attempt took over",
    "CallbackTimeout": "the external callback timed out",
}


@dataclass(frozen=True)
class Event:
    """One entry of the timeline."""

    at: datetime | None
    kind: str  # enqueued | scheduled | started | snoozed | error | rescue | operator | finished
    title: str
    detail: str = ""
    who: str | None = None
    traceback: str = ""


def _history(alias: str, relation: str, query: str, job_id: int) -> list[dict[str, Any]]:
    """The job's rows of ``relation`` (none on a database without it: one the real Awa migrated)."""
    from awa_bridge.dashboard import has_relation

    conn = connections[alias]
    if not has_relation(conn, relation):
        return []
    return detect_sync(conn).fetch_all(QUERIES[query], {"id": job_id})


def operator_actions(alias: str, job_id: int) -> list[dict[str, Any]]:
    """The job's rows of ``awa.job_actions``: what operators did to it, and who."""
    return _history(alias, "awa.job_actions", "list_job_actions", job_id)


def job_attempts(alias: str, job_id: int) -> list[dict[str, Any]]:
    """The job's attempts (``awa.job_attempts``, and ``awa.job_claims`` for the latest): the worker
    of each, and its snooze or hand-back (none before migration v009)."""
    return _history(alias, "awa.job_claims", "list_job_attempts", job_id)


def _when(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        return parse_datetime(value)
    return None


def _attempt_events(job: Any, attempts: list[dict[str, Any]]) -> list[Event]:
    """Each attempt's start with the worker that ran it, and the snooze or shutdown that handed it back.

    Without attempt rows (a job older than migration v009, or past the history
    retention) only the latest attempt's start is known, from the job's row.
    """
    if not attempts:
        if job.attempted_at is None:
            return []
        # A retry resets the attempt count: the row knows only the latest attempt's start.
        title = f"attempt {job.attempt} started, running" if job.state == "running" else "last attempt started"
        return [Event(job.attempted_at, "started", title)]
    events = []
    for row in attempts:
        running = job.state == "running" and row is attempts[-1]
        title = f"attempt {row['attempt']} started on {row['worker']}" + (", running" if running else "")
        events.append(Event(row["started_at"], "started", title))
        if row["snoozed_at"] is not None:
            wait = humanize_seconds(max((row["snoozed_until"] - row["snoozed_at"]).total_seconds(), 0.0))
            events.append(
                Event(
                    row["snoozed_at"],
                    "snoozed",
                    f"attempt {row['attempt']} snoozed for {wait}",
                    "the attempt is not spent",
                )
            )
        if row.get("released_at") is not None:
            events.append(
                Event(
                    row["released_at"],
                    "snoozed",
                    f"attempt {row['attempt']} handed back: its worker shut down",
                    "the attempt is not spent",
                )
            )
    return events


def job_timeline(job: Any, actions: list[dict[str, Any]], attempts: list[dict[str, Any]] | None = None) -> list[Event]:
    """The job's events, oldest first (operator actions carry who did them, attempts their worker)."""
    events = [Event(job.created_at, "enqueued", f"enqueued on queue {job.queue}")]
    if job.run_at and job.run_at > job.created_at and job.state == "scheduled":
        events.append(Event(job.run_at, "scheduled", "due to run"))
    cancels = {a["at"] for a in actions if a["action"] == "cancel"}
    for error in job.errors:
        kind = str(error.get("type", "Error"))
        at = _when(error.get("at"))
        attempt = error.get("attempt", "?")
        if kind == "AdminCancel" and cancels:
            continue  # the operator action below says it, with who
        if kind in RESCUES:
            events.append(Event(at, "rescue", f"attempt {attempt} {RESCUES[kind]}", str(error.get("error", ""))))
        else:
            events.append(
                Event(
                    at,
                    "error",
                    f"attempt {attempt} failed: {kind}",
                    str(error.get("error", "")),
                    traceback=str(error.get("traceback") or ""),
                )
            )
    for action in actions:
        label = str(action["action"]).replace("_", " ")
        events.append(
            Event(
                action["at"],
                "operator",
                f"{label} by an operator (it was {action['prior_state']})",
                who=action["operator"],
            )
        )
    events += _attempt_events(job, attempts or [])
    if job.finalized_at is not None:
        events.append(Event(job.finalized_at, "finished", f"finished: {job.state}"))
    return sorted(events, key=lambda e: (e.at is None, e.at or job.created_at))
