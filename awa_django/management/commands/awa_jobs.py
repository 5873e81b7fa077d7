"""``manage.py awa_jobs list|show|retry|cancel|run-now|delete|retry-failed``.

The CLI's job actions (``awa_bridge.cli_core``, as ``python -m awa_bridge
jobs``) on the awa alias's connection; this command only parses its options.
retry / cancel / run-now / delete take job ids, or a filter for the set operations of
``awa_bridge.admin`` (``awa_jobs retry --state failed --kind K``); the operator (``--operator``,
default ``manage.py:<user>``) is recorded on each job's timeline.
"""

from __future__ import annotations

import getpass
from typing import Any

from django.core.management.base import CommandError
from django.db import transaction

from awa_bridge import admin, cli_core

from ...db import awa_alias, awa_connection
from ...models import STATE_CHOICES
from ._base import AwaCommand


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
            ("retry", f"make a {_either(admin.RETRYABLE_STATES)} job available now, attempts reset"),
            ("cancel", "cancel a job that has not finished (a running handler sees job.cancelled)"),
            ("run-now", f"make a {_either(admin.RUN_NOW_STATES)} job available now"),
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
        action, write, target = options["action"], self.stdout.write, awa_connection()
        if action == "list":
            filters = {key: options[key] for key in ("state", "queue", "kind", "limit")}
            cli_core.list_jobs(target, write, **filters)
        elif action == "show":
            cli_core.show_job(target, options["job_id"], write)
        elif action == "retry-failed":
            cli_core.retry_failed(target, write, kind=options["kind"], queue=options["queue"])
        elif not options["job_ids"]:
            self._set(action, options)
        else:
            if options["state"] or options["kind"] or options["queue"]:
                raise CommandError("give job ids or a filter (--state, --kind, --queue), not both")
            # All or nothing, as the docs say of an unknown id or a refused state: one transaction
            # on the awa alias, and the lines are printed only once every job has been acted on.
            done: list[str] = []
            with transaction.atomic(using=awa_alias()):
                for job_id in options["job_ids"]:
                    cli_core.job_action(target, action, job_id, done.append, operator=_operator(options))
            for line in done:
                write(line)

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


def _either(states: tuple[str, ...]) -> str:
    """``"failed, cancelled or retryable"``: the states an action accepts, from awa_bridge.admin's
    rules, so the help says what the action does (it once left out waiting_external)."""
    return f"{', '.join(states[:-1])} or {states[-1]}"


def _operator(options: dict[str, Any]) -> str:
    return str(options.get("operator") or f"manage.py:{getpass.getuser()}")
