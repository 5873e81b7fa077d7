"""What every shell front end shares: the database URL, one-line errors, tables, logging.

``python -m awa_bridge`` (cli.py, admin_cli.py, cron_cli.py) and the Django
management commands use these, so a mistake reads the same whichever command
the user typed: one line saying what is wrong and what to do, never a driver
traceback.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from .drivers.connect import scheme_problem, url_problem
from .drivers.errors import describe_connection_failure
from .errors import MIGRATE_HINT, AwaError, SchemaNotMigrated, missing_schema


class UsageError(AwaError):
    """A command-line argument that cannot work (printed as one line, exit 2)."""


def database_url(value: str | None) -> str:
    """``--database-url`` or ``$DATABASE_URL``, checked to be a PostgreSQL URL before anything connects."""
    url = value or os.environ.get("DATABASE_URL")
    if not url:
        raise UsageError("give --database-url URL or set DATABASE_URL")
    check_database_url(url)
    return url


def command_needed(command: str, subcommands: Mapping[str, Any]) -> Callable[[Any], int]:
    """The ``func`` of a command group typed without its subcommand (``cron``): a one-line
    ``UsageError`` naming the subcommands, not argparse's "required: <dest>"."""

    def missing(ns: Any) -> int:
        raise UsageError(f"{command} needs a command: {', '.join(subcommands)} (--help says more)")

    return missing


def check_database_url(url: str) -> None:
    """Raise ``UsageError`` naming what is wrong with ``url`` (scheme, syntax); it does not connect."""
    problem = scheme_problem(url)
    if problem is not None:
        raise UsageError(problem)
    problem = url_problem(url)
    if problem is not None:
        expected = "expected postgresql://USER@HOST:PORT/DBNAME"
        raise UsageError(f"the database URL is not valid ({problem}); {expected}")


def describe_failure(exc: BaseException, migrate_hint: str = MIGRATE_HINT) -> str | None:
    """One line for a failure a user can fix (no schema, no server, bad URL); ``None`` for a bug.

    ``migrate_hint`` is the advice for a missing schema: a Django command names its own
    ``manage.py migrate --database <alias>``."""
    if isinstance(exc, AwaError) and not isinstance(exc, SchemaNotMigrated):
        return str(exc)  # already says what is wrong (ForeignSchema may wrap a missing table on purpose)
    schema = exc if isinstance(exc, SchemaNotMigrated) else missing_schema(exc)
    if schema is not None:
        return f"{schema.problem}; {migrate_hint}"
    return describe_connection_failure(exc)


def print_table(
    rows: list[dict[str, Any]], columns: list[str], write: Callable[[str], Any] = print, empty: str = "(none)"
) -> None:
    """Columns padded to their widest cell, header first; ``empty`` alone when there are no rows."""
    if not rows:
        write(empty)
        return
    cells = [[cell(row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    write("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for r in cells:
        write("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.1f}"
    if hasattr(value, "isoformat"):
        return str(value.isoformat(timespec="seconds"))
    return str(value)


# Frames that belong to Python, installed packages or awa itself, not to the user's code.
_LIBRARY_FRAME = re.compile(r"(/site-packages/|/dist-packages/|/lib/python\d|/awa_bridge/|/awa_django/|<frozen )")
_FRAME = re.compile(r'^  File "(?P<path>[^"]+)", line \d+, in .*$')


def user_frames(traceback_text: str) -> str:
    """The frames of ``traceback_text`` in the user's own code, then the exception line.

    Falls back to the last frame when every frame is in Python or a library. The one
    ordering of a traceback for people: ``show`` here (``manage.py awa_jobs show``,
    ``python -m awa_bridge jobs --id``) and the Django admin's job page both open with it.
    """
    lines = traceback_text.rstrip().splitlines()
    if not lines:
        return ""
    frames: list[tuple[str, list[str]]] = []
    for line in lines:
        match = _FRAME.match(line)
        if match:
            frames.append((match["path"], [line]))
        elif frames and line.startswith("    "):
            frames[-1][1].append(line)
    exception = next((line for line in reversed(lines) if line and not line.startswith(" ")), lines[-1])
    mine = [f for f in frames if not _LIBRARY_FRAME.search(f[0])] or frames[-1:]
    return "\n".join([*(line for _, block in mine for line in block), exception])


def error_lines(errors: list[Any]) -> list[str]:
    """A job's ``errors`` entries (type, error, traceback, attempt, at) as readable lines.

    Each traceback as the admin's job page shows it: the user's own frames and the
    exception first (``user_frames``), then the full traceback, library frames included.
    """
    lines: list[str] = []
    for entry in errors:
        if not isinstance(entry, dict):
            lines.append(f"  {entry}")
            continue
        kind = entry.get("type") or "error"
        when = f"attempt {entry.get('attempt', '?')} at {entry.get('at', '?')}"
        lines.append(f"  {when}: {kind}: {entry.get('error', '')}")
        traceback = str(entry.get("traceback") or "").rstrip()
        if not traceback:
            continue
        first = user_frames(traceback)
        lines.extend("    " + line for line in first.splitlines())
        if first != traceback:  # the full traceback says more (the library's frames)
            lines.append("    full traceback:")
            lines.extend("      " + line for line in traceback.splitlines())
    return lines


# -- logging ---------------------------------------------------------------------------------------

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")
_RECORD_FIELDS = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the ``extra=`` fields, and the traceback."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_FIELDS and not key.startswith("_"):
                entry[key] = value
        # exc_text without exc_info: a traceback already formatted (outcomes.log_outcome)
        trace = record.exc_text or (self.formatException(record.exc_info) if record.exc_info else None)
        if trace:
            entry["traceback"] = trace
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure_logging(level: str, fmt: str = "text", loggers: tuple[str, ...] = ("awa_bridge",)) -> None:
    """Send the ``loggers`` to stderr at ``level`` in ``fmt`` (text lines or JSON lines)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in loggers:
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.setLevel(getattr(logging, level.upper()))
        logger.propagate = False
