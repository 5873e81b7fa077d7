"""Shared bits of the awa management commands: awa errors become one-line ``CommandError``s.

Tables and output lines come from ``awa_bridge.cli_core``, as for ``python -m awa_bridge``.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from awa_bridge.cli_support import describe_failure


class AwaCommand(BaseCommand):
    """A command whose awa errors (validation, not found, invalid state, no schema) exit 1 with one line."""

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except CommandError:
            raise
        except Exception as exc:
            # The same one-line messages as `python -m awa_bridge` (an unmigrated
            # database says to run migrate); anything else is a bug and keeps its traceback.
            message = describe_failure(exc)
            if message is None:
                raise
            raise CommandError(message) from exc
