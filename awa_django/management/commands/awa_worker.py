"""``manage.py awa_worker``: run the queues of ``AWA['QUEUES']`` until SIGTERM / SIGINT."""

from __future__ import annotations

import logging
from typing import Any

from django.core.management.base import CommandError

from awa_bridge import ValidationError
from awa_bridge.cli_support import LOG_FORMATS, LOG_LEVELS, configure_logging

from ...conf import get_settings
from ...worker import build_client, check_worker, parse_queue_overrides
from ._base import AwaCommand


class Command(AwaCommand):
    help = (
        "Run awa workers for the queues declared in settings.AWA['QUEUES'] (or those given with --queue). "
        "Handlers are the @awa_django.task functions (each app's tasks module and AWA['TASK_MODULES'] are "
        "imported) and the tasks of Django's Tasks framework on AwaBackend. AWA['PERIODIC'] schedules are "
        "stored in awa.cron_jobs at start. SIGTERM or SIGINT stops claiming, lets running jobs finish for "
        "up to AWA['WORKER']['drain_timeout'] seconds, releases the rest for a prompt retry, and exits 0. "
        "Bad settings or options exit 1 before anything runs."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--queue",
            "-q",
            action="append",
            default=[],
            metavar="NAME[:N][:OPTIONS]",
            help="run this queue instead of the configured ones, with N concurrent jobs (default: the queue's "
            "max_workers in AWA['QUEUES'], else 10) and per-queue options as key=value,... overriding "
            "AWA['QUEUES'] (e.g. email:20:deadline=60); repeat for several queues",
        )
        parser.add_argument(
            "--drain-timeout",
            type=float,
            default=None,
            metavar="SECONDS",
            help="how long running jobs may take to finish after SIGTERM (default: AWA['WORKER']['drain_timeout'])",
        )
        parser.add_argument(
            "--log-level",
            choices=LOG_LEVELS,
            help="of the awa_bridge and awa_django loggers (default: info; warning at -v 0, debug at -v 3)",
        )
        parser.add_argument(
            "--log-format",
            choices=LOG_FORMATS,
            help="text lines or one JSON object per line (default: text, unless settings.LOGGING set handlers)",
        )
        parser.add_argument(
            "--no-maintenance",
            action="store_true",
            help="never take the maintenance leader role (promotion, rescue, cron, cleanup) in this process",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        import dataclasses

        settings = get_settings()
        try:
            queues = parse_queue_overrides(options["queue"], settings) if options["queue"] else settings.queues
        except ValidationError as exc:
            raise CommandError(f"--queue: {exc.message}") from None
        config = settings.worker
        changes: dict[str, Any] = {}
        if options["drain_timeout"] is not None:
            changes["drain_timeout"] = options["drain_timeout"]
        if options["no_maintenance"]:
            changes["maintenance"] = False
        try:
            config = dataclasses.replace(config, **changes)
        except ValidationError as exc:
            raise CommandError(f"--drain-timeout: {exc.message}") from None
        self._logging(options["verbosity"], options["log_level"], options["log_format"])
        client = build_client(dataclasses.replace(settings, worker=config))
        check_worker(client, queues)  # its errors exit 1 before the banner below
        kinds = ", ".join(sorted(client.registry.handlers)) or "none yet (resolved by dotted path)"
        described = ", ".join(f"{q.name} ({q.max_workers})" for q in queues)
        if options["verbosity"] >= 1:
            self.stdout.write(f"awa worker on database {settings.database!r}: queues {described}")
            self.stdout.write(f"  task kinds: {kinds}")
            if client.schedules:
                self.stdout.write(f"  periodic: {', '.join(sorted(client.schedules))}")
            self.stdout.flush()
        client.run(queues)
        if options["verbosity"] >= 1:
            self.stdout.write("awa worker stopped")

    @staticmethod
    def _logging(verbosity: int, level: str | None, fmt: str | None) -> None:
        """Our loggers at ``level``; their handler is ours unless settings.LOGGING configured one (or --log-format)."""
        level = level or {0: "warning", 1: "info", 2: "info"}.get(verbosity, "debug")
        loggers = ("awa_bridge", "awa_django")
        configured = logging.getLogger().handlers or any(logging.getLogger(n).handlers for n in loggers)
        if fmt is not None or not configured:
            configure_logging(level, fmt or "text", loggers)
            return
        for name in loggers:
            logging.getLogger(name).setLevel(level.upper())
