"""Operate awa from a shell: migrate the schema, run a worker, inspect and act on jobs, queues and schedules."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import logging
import os
import sys
from typing import Any

from .admin_cli import JOB_ACTIONS, QUEUE_ACTIONS
from .cli_support import (
    LOG_FORMATS,
    LOG_LEVELS,
    UsageError,
    check_database_url,
    command_needed,
    configure_logging,
    describe_failure,
)
from .cli_support import database_url as _database_url
from .types import JobState

log = logging.getLogger("awa_bridge.cli")


def _cmd_migrate(ns: argparse.Namespace) -> int:
    from .migrations import migrate

    names = migrate(_database_url(ns.database_url), dry_run=ns.dry_run)
    if ns.dry_run:
        print("would apply:" if names else "nothing to apply: the schema is up to date")
        for name in names:
            print(f"  {name}")
    elif names:
        print(f"applied {len(names)} migration(s):")
        for name in names:
            print(f"  {name}")
    else:
        print("nothing to apply: the schema is up to date")
    return 0


def _load_client(target: str) -> Any:
    """``package.module:attribute`` → the Client object it names (of an ``awa_bridge.celery`` app: its ``client()``)."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"expected MODULE:CLIENT (for example myapp.jobs:client), got {target!r}")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise UsageError(f"no module named {module_name!r} (from {target}; run from the folder it is in)") from None
        raise UsageError(f"importing {module_name} failed: {type(exc).__name__}: {exc}") from exc
    except Exception as exc:
        log.debug("importing %s failed", module_name, exc_info=True)
        raise UsageError(f"importing {module_name} failed: {type(exc).__name__}: {exc}") from exc
    try:
        client = getattr(module, attribute)
    except AttributeError:
        raise UsageError(f"module {module_name!r} has no attribute {attribute!r}") from None
    celery_app = sys.modules.get("awa_bridge.celery.app")  # imported by the module when it made one
    if celery_app is not None and isinstance(client, celery_app.Awa):
        client = client.client()  # the app's tasks and beat schedule: what ``client = app.client()`` gives
    if not hasattr(client, "run") or not hasattr(client, "registry"):
        raise UsageError(f"{target} is not an awa_bridge.worker.Client (it is a {type(client).__name__!r} object)")
    return client


def _cmd_worker(ns: argparse.Namespace) -> int:
    from .worker.config import QueueConfig

    configure_logging(ns.log_level, ns.log_format, loggers=("",))
    if ns.database_url is not None:
        # Checked, then set before the import, so a module's ``Client()`` (which reads
        # $DATABASE_URL) builds with it; a URL written in the module gives way to it too.
        os.environ["DATABASE_URL"] = _database_url(ns.database_url)
    client = _load_client(ns.target)
    if ns.database_url is not None:
        client.database_url = ns.database_url
    check_database_url(client.database_url)
    queues = client.queue_configs([QueueConfig.parse(spec) for spec in ns.queue] if ns.queue else None)
    if ns.poll_interval is not None:
        queues = [dataclasses.replace(q, poll_interval=ns.poll_interval) for q in queues]
    client.run(queues)
    return 0


def _check_action(ns: argparse.Namespace, actions: tuple[str, ...]) -> None:
    """ACTION is checked here, not by argparse's ``choices``, so that a job id given as the ACTION
    (``jobs 11``) is one line saying how to show it; any other unknown one is argparse's usage error."""
    if ns.action in actions:
        return
    if ns.command == "jobs" and ns.action.isdigit():
        raise UsageError(f"to show job {ns.action}: python -m awa_bridge jobs --id {ns.action}")
    choices = ", ".join(repr(a) for a in actions)
    ns.command_parser.error(f"argument ACTION: invalid choice: {ns.action!r} (choose from {choices})")


def _cmd_jobs(ns: argparse.Namespace) -> int:
    from . import cli_core

    _check_action(ns, JOB_ACTIONS)
    url = _database_url(ns.database_url)
    if ns.action != "list":
        from .admin_cli import run_job_action

        return run_job_action(url, ns)
    if ns.id is not None:
        cli_core.show_job(url, ns.id, print)
        return 0
    cli_core.list_jobs(url, print, state=ns.state, queue=ns.queue, kind=ns.kind, limit=ns.limit)
    return 0


def _cmd_queues(ns: argparse.Namespace) -> int:
    from .admin_cli import run_queue_action

    _check_action(ns, QUEUE_ACTIONS)
    return run_queue_action(_database_url(ns.database_url), ns)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m awa_bridge", description=__doc__)  # plain text
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.set_defaults(func=command_needed("python -m awa_bridge", commands.choices))
    migrate = commands.add_parser(
        "migrate",
        help="apply the awa schema migrations",
        description="Apply the awa schema to a PostgreSQL database. Safe to run repeatedly and "
        "from several processes at once.",
    )
    migrate.add_argument("--database-url", help="PostgreSQL URL (default: $DATABASE_URL)")
    migrate.add_argument("--dry-run", action="store_true", help="print what would be applied, change nothing")
    migrate.set_defaults(func=_cmd_migrate)

    worker = commands.add_parser(
        "worker",
        help="run a worker for a Client defined in your code",
        description="Run the handlers registered on MODULE:CLIENT until SIGTERM or SIGINT, then "
        "drain gracefully. Without --queue, runs the queues its handlers were registered on.",
    )
    worker.add_argument("target", metavar="MODULE:CLIENT", help="where the Client lives, e.g. myapp.jobs:client")
    worker.add_argument(
        "--database-url",
        help="PostgreSQL URL, in place of the Client's own (default: the one the Client was given, else $DATABASE_URL)",
    )
    worker.add_argument(
        "--queue",
        action="append",
        metavar="NAME[:N][:OPTIONS]",
        help="a queue to run, with N workers and per-queue options as key=value,... (repeatable), e.g. "
        "email:20:deadline=60,executor=process; options: deadline, poll_interval, max_rate, burst, min_workers, "
        "weight, priority_aging, executor (thread|process), max_tasks_per_child",
    )
    worker.add_argument(
        "--poll-interval",
        type=float,
        metavar="SECONDS",
        help="how often every queue polls for work when no NOTIFY arrives (default: 1)",
    )
    worker.add_argument("--log-level", default="info", choices=LOG_LEVELS, help="default: info")
    worker.add_argument(
        "--log-format", default="text", choices=LOG_FORMATS, help="text lines (default) or one JSON object per line"
    )
    worker.set_defaults(func=_cmd_worker)

    jobs = commands.add_parser(
        "jobs",
        help="list jobs (newest first), show one, or retry / cancel / delete / run-now one or a set",
        description="Without ACTION: list jobs (filtered by --queue, --state, --kind) or show --id. "
        "retry|cancel|delete|run-now ID act on one job; without ID they act on every job matching "
        "--state / --kind / --queue, in batches of --batch-size (one statement each), and print a "
        "summary; Ctrl-C stops after the current batch. retry-failed [--kind K] [--queue Q] retries "
        "every failed job (see docs/howto/operations.md).",
    )
    jobs.add_argument("action", nargs="?", default="list", metavar="ACTION", help=", ".join(JOB_ACTIONS))
    jobs.add_argument("job_id", nargs="?", type=int, metavar="ID", help="the job an ACTION applies to")
    jobs.add_argument("--database-url", help="PostgreSQL URL (default: $DATABASE_URL)")
    jobs.add_argument("--id", type=int, help="show this job in full")
    jobs.add_argument("--queue")
    jobs.add_argument("--state", choices=[s.value for s in JobState])
    jobs.add_argument("--kind")
    jobs.add_argument("--limit", type=int, default=50)
    jobs.add_argument("--operator", help="who acts, recorded on each job's timeline (default cli:<user>)")
    jobs.add_argument(
        "--batch-size", type=int, default=1000, metavar="N", help="jobs changed per statement (default 1000)"
    )
    jobs.add_argument("--max-jobs", type=int, metavar="N", help="stop after visiting N jobs (default: no limit)")
    jobs.add_argument("--time-budget", type=float, metavar="SECONDS", help="stop after SECONDS (default: no limit)")
    jobs.set_defaults(func=_cmd_jobs, command_parser=jobs)

    queues = commands.add_parser(
        "queues",
        help="per-queue counts, lag of the oldest available job, pause state; pause / resume / stats",
        description="Without ACTION: list queues. pause|resume NAME stop or restart claiming on a queue; "
        "stats [NAME] the same table, for one queue with NAME (fast on large tables).",
    )
    queues.add_argument("action", nargs="?", default="list", metavar="ACTION", help=", ".join(QUEUE_ACTIONS))
    queues.add_argument("name", nargs="?", metavar="NAME", help="the queue an ACTION applies to")
    queues.add_argument("--paused-by", help="who pauses (recorded in awa.queue_meta; default cli:<user>)")
    queues.add_argument(
        "--create", action="store_true", help="pause a queue no job or worker has used yet (else refused as a typo)"
    )
    queues.add_argument("--database-url", help="PostgreSQL URL (default: $DATABASE_URL)")
    queues.set_defaults(func=_cmd_queues, command_parser=queues)

    from .cron_cli import add_parser as add_cron_parser

    add_cron_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        return int(ns.func(ns))
    except Exception as exc:
        # What a user can fix is one line and exit 2 (as argparse's own errors); a bug keeps its traceback.
        message = describe_failure(exc)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
