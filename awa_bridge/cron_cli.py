"""``python -m awa_bridge cron list|pause|resume|trigger|create|edit|delete``: periodic jobs from a shell.

``create`` / ``edit`` / ``delete`` work on database-only schedules (``awa_bridge.cron_edit``);
schedules declared in settings or code are changed where they are declared.
``manage.py awa_cron`` shares the definition options and their parsing.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from . import cli_core, cron, cron_edit
from .cli_support import UsageError, command_needed, database_url
from .errors import ValidationError

#: The options of ``create`` / ``edit``: (flag, dest, help); the dest is the PeriodicJob field
#: (``args_json`` → ``args``: Django's commands keep ``args`` for themselves).
DEFINITION_OPTIONS = (
    ("--cron", "cron_expr", "the cron expression (5 fields, 6 with seconds, or @hourly and the like)"),
    ("--timezone", "timezone", "an IANA timezone the expression is read in (default UTC)"),
    ("--kind", "kind", "the job kind to enqueue"),
    ("--queue", "queue", "the queue (default 'default')"),
    ("--args", "args_json", "the job's args as a JSON object (default {})"),
    ("--priority", "priority", "1 (highest) to 4 (default 2)"),
    ("--max-attempts", "max_attempts", "1 to 1000 (default 25)"),
    ("--missed-fire-policy", "missed_fire_policy", "coalesce (default) or catch_up"),
)
_INTEGERS = ("priority", "max_attempts")


def _field(dest: str) -> str:
    return "args" if dest == "args_json" else dest


def add_definition_arguments(parser: Any) -> None:
    """The ``--cron``, ``--timezone``, ... options of ``create`` and ``edit``."""
    for flag, dest, text in DEFINITION_OPTIONS:
        parser.add_argument(flag, dest=dest, help=text)


def schedule_from_options(name: str, options: dict[str, Any], current: cron.ScheduleInfo | None) -> cron.PeriodicJob:
    """The ``PeriodicJob`` the options describe (over ``current`` for an edit); ``ValidationError`` names the flag.

    An edit without any option is refused (``UsageError``): it would change nothing."""
    values: dict[str, Any] = {}
    if current is not None and all(options.get(dest) is None for _, dest, _ in DEFINITION_OPTIONS):
        flags = ", ".join(flag for flag, _, _ in DEFINITION_OPTIONS)
        raise UsageError(f"give at least one option to change ({flags}); schedule {name!r} is unchanged")
    if current is not None:
        values = {_field(dest): getattr(current, _field(dest)) for _, dest, _ in DEFINITION_OPTIONS}
        values.update(tags=list(current.tags), metadata=current.metadata)
    for flag, dest, _ in DEFINITION_OPTIONS:
        raw = options.get(dest)
        if raw is None:
            continue
        if dest == "args_json":
            try:
                raw = json.loads(raw)
            except ValueError as exc:
                raise ValidationError("--args", f"must be a JSON object: {exc}") from None
            if not isinstance(raw, dict):
                raise ValidationError("--args", f"must be a JSON object, got {type(raw).__name__}")
        elif dest in _INTEGERS:
            try:
                raw = int(raw)
            except ValueError:
                raise ValidationError(flag, f"must be an integer, got {raw!r}") from None
        values[_field(dest)] = raw
    if values.get("cron_expr") is None:
        raise ValidationError("--cron", "is required: the schedule's cron expression")
    if values.get("kind") is None:
        raise ValidationError("--kind", "is required: the kind of job the schedule enqueues")
    return cron.PeriodicJob(name, **values)


def _url(ns: argparse.Namespace) -> str:
    return database_url(ns.database_url)


def _list(ns: argparse.Namespace) -> int:
    cli_core.list_schedules(_url(ns), print, lambda line: print(line, file=sys.stderr))
    return 0


def _pause(ns: argparse.Namespace) -> int:
    cli_core.pause_schedule(_url(ns), ns.name, print, paused_by=ns.by)
    return 0


def _resume(ns: argparse.Namespace) -> int:
    cli_core.resume_schedule(_url(ns), ns.name, print, skip_missed=ns.skip_missed)
    return 0


def _trigger(ns: argparse.Namespace) -> int:
    cli_core.trigger_schedule(_url(ns), ns.name, print)
    return 0


def _create(ns: argparse.Namespace) -> int:
    cron_edit.create_schedule(_url(ns), schedule_from_options(ns.name, vars(ns), None))
    print(f"created schedule {ns.name} (database-only: edit or delete it with cron edit / cron delete)")
    return 0


def _edit(ns: argparse.Namespace) -> int:
    url = _url(ns)
    current = cron.get_schedule(url, ns.name)
    if current.source == "declared":
        raise cron_edit.DeclaredSchedule(ns.name, current.owner)
    cron_edit.update_schedule(url, schedule_from_options(ns.name, vars(ns), current))
    print(f"updated schedule {ns.name}")
    return 0


def _delete(ns: argparse.Namespace) -> int:
    cron_edit.delete_schedule(_url(ns), ns.name)
    print(f"deleted schedule {ns.name}")
    return 0


def add_parser(commands: Any) -> None:
    """Add the ``cron`` command to the CLI's subparsers."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "cron",
        help="list, pause, resume or trigger periodic jobs; create, edit or delete database-only ones",
        description="Operate the schedules in awa.cron_jobs. An unknown name is an error and changes nothing. "
        "Schedules declared in settings or code are changed there (a worker starting without one deletes it); "
        "create / edit / delete are for database-only schedules.",
    )
    actions = parser.add_subparsers(dest="cron_command", metavar="COMMAND")
    parser.set_defaults(func=command_needed("cron", actions.choices))

    def action(name: str, func: Any, help_text: str, with_name: bool = True) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help_text, description=help_text)
        if with_name:
            sub.add_argument("name", metavar="NAME", help="the schedule's name")
        sub.add_argument("--database-url", help="PostgreSQL URL (default: $DATABASE_URL)")
        sub.set_defaults(func=func)
        return sub

    action("list", _list, "every schedule with its state, last fire and next fire time", with_name=False)
    pause = action("pause", _pause, "stop firing a schedule (its last_enqueued_at is kept)")
    pause.add_argument("--by", help="who paused it (stored in paused_by)")
    resume = action("resume", _resume, "fire a schedule again, applying its missed_fire_policy to the pause")
    resume.add_argument("--skip-missed", action="store_true", help="skip the fires that fell due while it was paused")
    action("trigger", _trigger, "enqueue one job from a schedule now (its regular fires are unaffected)")
    create = action("create", _create, "create a database-only schedule (--cron and --kind required)")
    add_definition_arguments(create)
    edit = action("edit", _edit, "change a database-only schedule (options not given keep their value)")
    add_definition_arguments(edit)
    action("delete", _delete, "delete a database-only schedule")
