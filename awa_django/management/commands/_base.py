"""Shared bits of the awa management commands: errors → CommandError, tables, timestamps."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from awa_bridge import AwaError


class AwaCommand(BaseCommand):
    """A command whose awa errors (validation, not found, invalid state) exit 1 with their message."""

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except AwaError as exc:
            raise CommandError(str(exc)) from exc

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
