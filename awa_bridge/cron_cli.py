"""``python -m awa_bridge cron list|pause|resume|trigger``: operate periodic jobs from a shell."""

from __future__ import annotations

import argparse
from typing import Any

from . import cli_core, cron
from .cli_support import database_url


def _url(ns: argparse.Namespace) -> str:
    return database_url(ns.database_url)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if hasattr(value, "isoformat"):
        return value.isoformat(timespec="seconds")
    return str(value)


def _list(ns: argparse.Namespace) -> int:
    schedules = cron.list_schedules(_url(ns))
    if not schedules:
        print("(no schedules)")
        return 0
    columns = ["name", "cron_expr", "timezone", "kind", "queue", "missed_fire_policy"]
    header = [*columns, "paused", "last_enqueued_at", "next_fire_at"]
    cells = [
        [
            *(_cell(getattr(s, c)) for c in columns),
            f"yes (by {s.paused_by})" if s.paused and s.paused_by else ("yes" if s.paused else "no"),
            _cell(s.last_enqueued_at),
            _cell(s.next_fire_at),
        ]
        for s in schedules
    ]
    widths = [max(len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(header)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
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


def add_parser(commands: Any) -> None:
    """Add the ``cron`` command to the CLI's subparsers."""
    parser = commands.add_parser(
        "cron",
        help="list, pause, resume or trigger periodic jobs",
        description="Operate the schedules in awa.cron_jobs. An unknown name is an error and changes nothing.",
    )
    actions = parser.add_subparsers(dest="cron_command", required=True)

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
