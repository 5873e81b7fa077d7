"""``manage.py awa_jobs list|show|retry|cancel|run-now|delete|retry-failed``.

retry / cancel / run-now / delete take job ids, or a filter for the set operations of
``awa_bridge.admin`` (``awa_jobs retry --state failed --kind K``); the operator (``--operator``,
default ``manage.py:<user>``) is recorded on each job's timeline.
"""

from __future__ import annotations

import getpass
import json
from typing import Any

from django.core.management.base import CommandError

from awa_bridge import admin

from ...db import awa_connection
from ...models import STATE_CHOICES, Job
from ._base import AwaCommand, cell


class Command(AwaCommand):
    help = (
        "Inspect and operate jobs in awa.jobs. Changes go through awa_bridge.admin's guarded statements "
        "(never Model.save()): an unknown id or a state that does not allow the action exits 1 and changes "
        "nothing."
    )

    def add_arguments(self, parser: Any) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        listing = actions.add_parser("list", help="newest jobs first, filtered by state, queue or kind")
        listing.add_argument("--state", choices=[value for value, _ in STATE_CHOICES])
        listing.add_argument("--queue")
        listing.add_argument("--kind")
        listing.add_argument("--limit", type=int, default=50, help="at most this many rows (default 50)")
        show = actions.add_parser("show", help="one job in full: args, metadata, progress, error history")
        show.add_argument("job_id", type=int, metavar="ID")
        for name, text in (
            ("retry", "make a failed, cancelled or retryable job available now, attempts reset"),
            ("cancel", "cancel a job that has not finished (a running handler sees job.cancelled)"),
            ("run-now", "make a scheduled or retryable job available now"),
            ("delete", "delete a job in any state but running"),
        ):
            sub = actions.add_parser(
                name,
                help=text,
                description=f"{text}. Without ID: every job matching --state / --kind / --queue, in batches "
                "(one statement each), with one summary line.",
            )
            sub.add_argument("job_ids", type=int, nargs="*", metavar="ID")
            sub.add_argument("--state", choices=[value for value, _ in STATE_CHOICES])
            sub.add_argument("--kind")
            sub.add_argument("--queue")
            sub.add_argument("--operator", help="who acts, on each job's timeline (default manage.py:<user>)")
        bulk = actions.add_parser("retry-failed", help="retry every failed job, optionally of one kind or queue")
        bulk.add_argument("--kind")
        bulk.add_argument("--queue")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "list":
            self._list(options)
        elif action == "show":
            self._show(options["job_id"])
        elif action == "retry-failed":
            retried, skipped = admin.retry_failed_report(awa_connection(), kind=options["kind"], queue=options["queue"])
            line = f"retried {retried} failed job(s)"
            if skipped:
                line += f"; {skipped} left failed: another job holds their unique key"
            self.stdout.write(line)
        elif not options["job_ids"]:
            self._set(action, options)
        else:
            operation = {
                "retry": admin.retry_job,
                "cancel": admin.cancel_job,
                "run-now": admin.run_now,
                "delete": admin.delete_job,
            }[action]
            if options["state"] or options["kind"] or options["queue"]:
                raise CommandError("give job ids or a filter (--state, --kind, --queue), not both")
            for job_id in options["job_ids"]:
                job = operation(awa_connection(), job_id, operator=_operator(options))
                done = "deleted" if action == "delete" else f"now {job.state}"
                self.stdout.write(f"job {job.id} ({job.kind}, queue {job.queue}): {done}")

    def _set(self, action: str, options: dict[str, Any]) -> None:
        if not (options["state"] or options["kind"] or options["queue"]):
            raise CommandError(f"{action} needs job ids or a filter (--state, --kind, --queue)")
        operation = {
            "retry": admin.retry_jobs,
            "cancel": admin.cancel_jobs,
            "run-now": admin.run_jobs_now,
            "delete": admin.delete_jobs,
        }[action]
        result = operation(
            awa_connection(),
            state=options["state"],
            kind=options["kind"],
            queue=options["queue"],
            operator=_operator(options),
        )
        self.stdout.write(result.summary())

    def _list(self, options: dict[str, Any]) -> None:
        if options["limit"] < 1:
            raise CommandError("--limit must be at least 1")
        jobs = Job.objects.using(awa_connection().alias).order_by("-id")
        for key in ("state", "queue", "kind"):
            if options[key]:
                jobs = jobs.filter(**{key: options[key]})
        rows = jobs.only("id", "kind", "queue", "state", "priority", "attempt", "max_attempts", "run_at", "created_at")
        self.table(
            [
                (j.id, j.kind, j.queue, j.state, j.priority, f"{j.attempt}/{j.max_attempts}", j.run_at, j.created_at)
                for j in rows[: options["limit"]]
            ],
            ["id", "kind", "queue", "state", "priority", "attempt", "run_at", "created_at"],
        )

    def _show(self, job_id: int) -> None:
        try:
            job = Job.objects.using(awa_connection().alias).get(id=job_id)
        except Job.DoesNotExist:
            raise CommandError(f"no job with id {job_id}") from None
        fields = [
            ("id", job.id),
            ("kind", job.kind),
            ("queue", job.queue),
            ("state", job.state),
            ("priority", job.priority),
            ("attempt", f"{job.attempt}/{job.max_attempts}"),
            ("run_at", job.run_at),
            ("created_at", job.created_at),
            ("attempted_at", job.attempted_at),
            ("finalized_at", job.finalized_at),
            ("tags", ", ".join(job.tags) or "-"),
        ]
        width = max(len(name) for name, _ in fields)
        for name, value in fields:
            self.stdout.write(f"{name.ljust(width)}  {cell(value)}")
        for name, value in (("args", job.args), ("metadata", job.metadata), ("progress", job.progress)):
            self.stdout.write(f"{name}:")
            self.stdout.write(_indent(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)))
        self.stdout.write(f"errors ({len(job.errors)}):")
        for error in job.errors:
            self.stdout.write(
                f"  attempt {error.get('attempt')} at {error.get('at')}: {error.get('type')}: {error.get('error')}"
            )
            if error.get("traceback"):
                self.stdout.write(_indent(error["traceback"].rstrip(), 4))


def _operator(options: dict[str, Any]) -> str:
    return str(options.get("operator") or f"manage.py:{getpass.getuser()}")


def _indent(text: str, spaces: int = 2) -> str:
    return "\n".join(" " * spaces + line for line in text.splitlines())
