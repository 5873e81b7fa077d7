"""``manage.py awa_queues stats|pause|resume``: the CLI's queue actions (``awa_bridge.cli_core``) on the awa alias."""

from __future__ import annotations

import getpass
from typing import Any

from awa_bridge import cli_core

from ...conf import get_settings
from ...db import awa_connection
from ._base import AwaCommand


class Command(AwaCommand):
    help = (
        "Queue statistics (per-state counts of live jobs, failed jobs, completions in the last hour, lag of "
        "the oldest available job, paused flag) and pause/resume. A paused queue is skipped by every worker "
        "within one poll interval; running jobs finish."
    )

    def add_arguments(self, parser: Any) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        stats = actions.add_parser("stats", help="one row per queue (or only NAME)")
        stats.add_argument("name", nargs="?", metavar="NAME")
        pause = actions.add_parser("pause", help="stop every worker from claiming on a queue (a known one)")
        pause.add_argument("name", metavar="NAME")
        pause.add_argument("--by", help="who paused it (default: manage.py:<user>)")
        pause.add_argument(
            "--create", action="store_true", help="pause a queue nothing has used yet (else refused as a typo)"
        )
        resume = actions.add_parser("resume", help="let workers claim on a queue again")
        resume.add_argument("name", metavar="NAME")

    def handle(self, *args: Any, **options: Any) -> None:
        action, name = options["action"], options["name"]
        configured = [q.name for q in get_settings().queues]  # AWA['QUEUES'] names are known
        if action == "stats":
            if name is not None:  # a row of zeros for a typo would read like an idle queue
                cli_core.refuse_unknown_queue(awa_connection(), name, configured)
            cli_core.queue_stats(awa_connection(), self.stdout.write, name, configured=configured)
        elif action == "pause":
            cli_core.pause_queue(
                awa_connection(),
                name,
                self.stdout.write,
                paused_by=options["by"] or f"manage.py:{getpass.getuser()}",
                create=options["create"],
                configured=configured,
            )
        else:
            cli_core.resume_queue(awa_connection(), name, self.stdout.write, configured=configured)
