"""The admin actions of ``python -m awa_bridge jobs ...`` and ``... queues ...``.

``cli.py`` owns the parser; this module maps the parsed arguments onto
``cli_core`` (the actions the Django commands run too) on a database URL.
Errors are ``AwaError`` subclasses (``cli_support.UsageError`` among them),
which ``cli.main`` prints and exits 2 on.
"""

from __future__ import annotations

import argparse
import getpass
import signal

from . import admin, cli_core
from .errors import ValidationError

JOB_ACTIONS = ("list", "retry", "cancel", "delete", "run-now", "retry-failed")
QUEUE_ACTIONS = ("list", "pause", "resume", "stats")


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
    except ValidationError as exc:
        if exc.field not in _BOUND_FLAGS:
            raise
        raise ValidationError(_BOUND_FLAGS[exc.field], exc.message) from None  # the flag the user typed
    finally:
        signal.signal(signal.SIGINT, previous)
    print(result.summary())
    # A bound the user set (--max-jobs, --time-budget) that was reached is not an error; Ctrl-C is.
    return 1 if result.stopped == "interrupted" else 0


#: The bulk operations' arguments the CLI takes as flags, for naming them in an error.
_BOUND_FLAGS = {"batch_size": "--batch-size", "max_jobs": "--max-jobs", "time_budget": "--time-budget"}


def run_job_action(url: str, ns: argparse.Namespace) -> int:
    """``jobs retry|cancel|delete|run-now ID|--state S --kind K --queue Q`` and ``jobs retry-failed``."""
    action = ns.action
    if action == "retry-failed":
        if ns.job_id is not None:
            raise ValidationError("ID", "jobs retry-failed takes no job id; filter with --kind and --queue")
        cli_core.retry_failed(url, print, kind=ns.kind, queue=ns.queue)
        return 0
    if ns.job_id is None:
        return _run_set(url, ns)
    if ns.state is not None or ns.kind is not None or ns.queue is not None:
        raise ValidationError("ID", f"jobs {action} takes a job id or a filter (--state, --kind, --queue), not both")
    cli_core.job_action(url, action, ns.job_id, print, operator=operator_name(ns))
    return 0


def run_queue_action(url: str, ns: argparse.Namespace) -> int:
    """``queues pause|resume NAME``, and ``queues [stats] [NAME]`` (the listing is the fast stats query)."""
    action = ns.action
    if action in ("pause", "resume") and ns.name is None:
        raise ValidationError("NAME", f"queues {action} needs a queue name, e.g. `queues {action} email`")
    if action == "pause":
        paused_by = ns.paused_by or f"cli:{getpass.getuser()}"
        cli_core.pause_queue(url, ns.name, print, paused_by=paused_by, create=ns.create)
        return 0
    if action == "resume":
        cli_core.resume_queue(url, ns.name, print)
        return 0
    cli_core.queue_stats(url, print, ns.name)
    return 0
