"""Shared bits of the awa management commands: errors → CommandError, tables, timestamps."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
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

    def table(self, rows: Sequence[Sequence[Any]], header: Sequence[str]) -> None:
        cells = [[cell(v) for v in row] for row in rows]
        widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(header)]
        self.stdout.write("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
        for row in cells:
            self.stdout.write("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)
