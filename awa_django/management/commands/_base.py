"""Shared bits of the awa management commands.

* Django's common options (``-v``, ``--settings``, ``--traceback``, ...) work after a subcommand
  too (``awa_jobs list -v 0``), as every other Django command accepts them anywhere.
* awa errors become one-line ``CommandError``s; a missing schema names the ``migrate`` that
  installs it on the awa alias.

Tables and output lines come from ``awa_bridge.cli_core``, as for ``python -m awa_bridge``.
"""

from __future__ import annotations

import argparse
import copy
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from awa_bridge.cli_support import describe_failure

from ...db import migrate_command

# The dests of the options BaseCommand.create_parser adds to every command.
_COMMON_OPTIONS = {
    "version",
    "verbosity",
    "settings",
    "pythonpath",
    "traceback",
    "no_color",
    "force_color",
    "skip_checks",
}


class AwaCommand(BaseCommand):
    """A command whose awa errors (validation, not found, invalid state, no schema) exit 1 with one line."""

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> Any:
        """Each subcommand's parser also takes Django's common options.

        argparse hands everything after ``ACTION`` to the subcommand's parser, which would
        refuse ``--settings`` there. The copies default to ``SUPPRESS``, so a subparser sets
        an option only when it is given after the subcommand, overriding the value before it.
        """
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        common = [action for action in parser._actions if action.dest in _COMMON_OPTIONS]
        for group in parser._actions:
            if isinstance(group, argparse._SubParsersAction):
                for subparser in group.choices.values():
                    for action in common:
                        option = copy.copy(action)
                        option.default = argparse.SUPPRESS
                        subparser._add_action(option)
        return parser

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except CommandError:
            raise
        except Exception as exc:
            # The same one-line messages as `python -m awa_bridge` (an unmigrated
            # database says to run migrate); anything else is a bug and keeps its traceback.
            # The plain `migrate` never touches a second alias: the hint names the one to migrate.
            message = describe_failure(exc, migrate_hint=f"run `{migrate_command()}`")
            if message is None:
                raise
            raise CommandError(message) from exc
