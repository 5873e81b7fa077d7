"""The admin actions of ``python -m awa_bridge jobs ...`` and ``... queues ...``.

``cli.py`` owns the parser; this module runs the actions through
``awa_bridge.admin`` and prints one line (or a table) per action. Errors are
``AwaError`` subclasses (``cli_support.UsageError`` among them), which ``cli.main``
prints and exits 2 on.
"""

from __future__ import annotations

import argparse
import getpass
from typing import Any

from . import admin
from .cli_support import UsageError, print_table
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


def run_job_action(url: str, ns: argparse.Namespace) -> int:
    """``jobs retry|cancel|delete|run-now ID`` and ``jobs retry-failed [--kind K] [--queue Q]``."""
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
        raise ValidationError("ID", f"jobs {action} needs a job id, e.g. `jobs {action} 42`")
    if action == "delete":
        job = admin.delete_job(url, ns.job_id)
        print(f"{_describe(job)} deleted (it was {job.state})")
        return 0
    operation = {"retry": admin.retry_job, "cancel": admin.cancel_job, "run-now": admin.run_now}[action]
    job = operation(url, ns.job_id)
    print(f"{_describe(job)}: {_AFTER[action]}")
    if action == "cancel":
        print("  a running handler sees job.cancelled at its next heartbeat; its late result is discarded")
    return 0


def run_queue_action(url: str, ns: argparse.Namespace) -> int:
    """``queues pause|resume NAME``, and ``queues [stats] [NAME]`` (the listing is the fast stats query)."""
    action = ns.action
    if action in ("pause", "resume") and ns.name is None:
        raise ValidationError("NAME", f"queues {action} needs a queue name, e.g. `queues {action} email`")
    if action == "pause":
        _refuse_unknown(url, ns.name, ns.create)
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
    print_table([{c: getattr(s, c) for c in columns} for s in stats], columns)
    return 0


def _refuse_unknown(url: str, queue: str, create: bool) -> None:
    """A pause of a queue nothing uses is most often a typo: refuse it unless ``--create`` says it is meant."""
    if create or admin.queue_known(url, queue):
        return
    known = ", ".join(s.queue for s in admin.queue_stats(url)) or "none yet"
    raise UsageError(
        f"unknown queue {queue!r}: no job, pause or worker has used it (known: {known}); "
        "add --create to pause it before first use"
    )
