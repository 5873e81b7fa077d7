"""The admin actions of ``python -m awa_bridge jobs ...`` and ``... queues ...``.

``cli.py`` owns the parser; this module runs the actions through
``awa_bridge.admin`` and prints one line (or a table) per action. Errors are
``AwaError`` subclasses, which ``cli.main`` prints and exits 2 on.
"""

from __future__ import annotations

import argparse
import getpass
import signal
from typing import Any

from . import admin
from .errors import ValidationError

JOB_ACTIONS = ("list", "retry", "cancel", "delete", "run-now", "retry-failed")
QUEUE_ACTIONS = ("list", "pause", "resume", "stats")

_AFTER = {
    "retry": "available now, attempts reset",
    "cancel": "cancelled",
    "run-now": "available now",
}


def _describe(job: Any) -> str:
    return f"job {job.id} ({job.kind}, queue {job.queue})"


def operator_name(ns: argparse.Namespace) -> str:
    """Who acts: ``--operator NAME``, else ``cli:<login>`` (recorded on each job's timeline)."""
    return str(ns.operator or f"cli:{getpass.getuser()}")


def _run_set(url: str, ns: argparse.Namespace) -> int:
    """``jobs retry|cancel|delete|run-now --state S --kind K --queue Q``: every matching job, in batches.

    Ctrl-C (SIGINT) stops after the batch in progress; what was done stays done
    and the summary says it stopped.
    """
    if ns.state is None and ns.kind is None and ns.queue is None:
        raise ValidationError(
            "ID", f"jobs {ns.action} needs a job id or a filter, e.g. `jobs {ns.action} 42` or `--state failed`"
        )
    operation = {
        "retry": admin.retry_jobs,
        "cancel": admin.cancel_jobs,
        "run-now": admin.run_jobs_now,
        "delete": admin.delete_jobs,
    }[ns.action]
    interrupted = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(signum))
    try:
        result = operation(
            url,
            state=ns.state,
            kind=ns.kind,
            queue=ns.queue,
            operator=operator_name(ns),
            batch_size=ns.batch_size,
            max_jobs=ns.max_jobs,
            time_budget=ns.time_budget,
            should_stop=lambda: bool(interrupted),
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    print(result.summary())
    return 0 if result.complete or result.stopped == "max_jobs" else 1


def run_job_action(url: str, ns: argparse.Namespace) -> int:
    """``jobs retry|cancel|delete|run-now ID|--state S --kind K --queue Q`` and ``jobs retry-failed``."""
    action = ns.action
    if action == "retry-failed":
        if ns.job_id is not None:
            raise ValidationError("ID", "jobs retry-failed takes no job id; filter with --kind and --queue")
        retried, skipped = admin.retry_failed_report(url, kind=ns.kind, queue=ns.queue)
        scope = " ".join(f"{k} {v!r}" for k, v in (("kind", ns.kind), ("queue", ns.queue)) if v) or "all"
        line = f"retried {retried} failed job(s) ({scope})"
        if skipped:
            line += f"; {skipped} left failed: another job holds their unique key"
        print(line)
        return 0
    if ns.job_id is None:
        return _run_set(url, ns)
    if ns.state is not None or ns.kind is not None or ns.queue is not None:
        raise ValidationError("ID", f"jobs {action} takes a job id or a filter (--state, --kind, --queue), not both")
    if action == "delete":
        job = admin.delete_job(url, ns.job_id, operator=operator_name(ns))
        print(f"{_describe(job)} deleted (it was {job.state})")
        return 0
    operation = {"retry": admin.retry_job, "cancel": admin.cancel_job, "run-now": admin.run_now}[action]
    job = operation(url, ns.job_id, operator=operator_name(ns))
    print(f"{_describe(job)}: {_AFTER[action]}")
    if action == "cancel":
        print("  a running handler sees job.cancelled at its next heartbeat; its late result is discarded")
    return 0


def run_queue_action(url: str, ns: argparse.Namespace) -> int:
    """``queues pause|resume NAME``, and ``queues [stats] [NAME]`` (the listing is the fast stats query)."""
    from .cli import _print_table

    action = ns.action
    if action in ("pause", "resume") and ns.name is None:
        raise ValidationError("NAME", f"queues {action} needs a queue name, e.g. `queues {action} email`")
    if action == "pause":
        admin.pause_queue(url, ns.name, paused_by=ns.paused_by or f"cli:{getpass.getuser()}")
        print(f"queue {ns.name} paused: workers stop claiming within one poll interval; running jobs finish")
        return 0
    if action == "resume":
        admin.resume_queue(url, ns.name)
        print(f"queue {ns.name} resumed")
        return 0
    stats = admin.queue_stats(url, ns.name)
    columns = ["queue", "paused", "available", "running", "scheduled", "retryable", "waiting_external", "failed"]
    columns += ["completed_last_hour", "lag_seconds"]
    _print_table([{c: getattr(s, c) for c in columns} for s in stats], columns)
    return 0
