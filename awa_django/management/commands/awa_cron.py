"""``manage.py awa_cron list|trigger|pause|resume|create|edit|delete``.

The CLI's cron actions (``awa_bridge.cli_core``, ``awa_bridge.cron_edit``) on the awa alias's connection.
"""

from __future__ import annotations

import getpass
from typing import Any

from awa_bridge import cli_core, cron, cron_edit
from awa_bridge.cron_cli import add_definition_arguments, schedule_from_options

from ...db import awa_alias, awa_connection
from ._base import AwaCommand


class Command(AwaCommand):
    help = (
        "Operate the periodic schedules in awa.cron_jobs (those of AWA['PERIODIC'] are stored there when a "
        "worker starts, and one removed from there is deleted at the next start). create / edit / delete work on "
        "database-only schedules. An unknown name or a bad value exits 1 and changes nothing."
    )

    def add_arguments(self, parser: Any) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        actions.add_parser("list", help="every schedule: expression, timezone, last enqueued, next fire, paused")
        trigger = actions.add_parser("trigger", help="enqueue one job from a schedule now (regular fires unaffected)")
        trigger.add_argument("name", metavar="NAME")
        pause = actions.add_parser("pause", help="stop firing a schedule")
        pause.add_argument("name", metavar="NAME")
        pause.add_argument("--by", help="who paused it (default: manage.py:<user>)")
        resume = actions.add_parser("resume", help="fire a schedule again (its missed_fire_policy covers the pause)")
        resume.add_argument("name", metavar="NAME")
        resume.add_argument("--skip-missed", action="store_true", help="skip the fires that fell due while paused")
        create = actions.add_parser("create", help="create a database-only schedule (--cron and --kind required)")
        create.add_argument("name", metavar="NAME")
        add_definition_arguments(create)
        edit = actions.add_parser("edit", help="change a database-only schedule (options not given keep their value)")
        edit.add_argument("name", metavar="NAME")
        add_definition_arguments(edit)
        delete = actions.add_parser("delete", help="delete a database-only schedule")
        delete.add_argument("name", metavar="NAME")

    def handle(self, *args: Any, **options: Any) -> None:
        from django.db import transaction

        # One transaction per operation: resume's row lock spans its two statements.
        with transaction.atomic(using=awa_alias()):
            self._run(options)

    def _run(self, options: dict[str, Any]) -> None:
        action = options["action"]
        if action == "list":
            cli_core.list_schedules(awa_connection(), self.stdout.write, self.stderr.write)
        elif action == "trigger":
            cli_core.trigger_schedule(awa_connection(), options["name"], self.stdout.write)
        elif action == "pause":
            paused_by = options["by"] or f"manage.py:{getpass.getuser()}"
            cli_core.pause_schedule(awa_connection(), options["name"], self.stdout.write, paused_by=paused_by)
        elif action == "resume":
            cli_core.resume_schedule(
                awa_connection(), options["name"], self.stdout.write, skip_missed=options["skip_missed"]
            )
        elif action == "create":
            cron_edit.create_schedule(awa_connection(), schedule_from_options(options["name"], options, None))
            self.stdout.write(f"schedule {options['name']} created (database-only)")
        elif action == "edit":
            current = cron.get_schedule(awa_connection(), options["name"])
            if current.source == "declared":
                raise cron_edit.DeclaredSchedule(current.name, current.owner)
            cron_edit.update_schedule(awa_connection(), schedule_from_options(options["name"], options, current))
            self.stdout.write(f"schedule {options['name']} updated")
        else:
            cron_edit.delete_schedule(awa_connection(), options["name"])
            self.stdout.write(f"schedule {options['name']} deleted")
