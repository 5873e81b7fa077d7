"""Operations on queues and jobs, shared by the CLI, the Django admin and SQLAlchemy apps.

Every function runs one guarded statement on a psycopg connection or URL.
"""

from __future__ import annotations

from typing import Any

from .enqueue import MAX_NAME_LENGTH
from .errors import ValidationError
from .sql import QUERIES


def _check_queue(queue: str) -> None:
    if not isinstance(queue, str) or not 1 <= len(queue) <= MAX_NAME_LENGTH:
        raise ValidationError("queue", f"must be a name of 1 to {MAX_NAME_LENGTH} characters, got {queue!r}")


def _run(conn_or_url: Any, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    import psycopg

    query = QUERIES[name].pyformat
    if isinstance(conn_or_url, str):
        with psycopg.connect(conn_or_url, autocommit=True) as conn:
            return conn.execute(query, params).fetchall()
    return conn_or_url.execute(query, params).fetchall()


def pause_queue(conn_or_url: Any, queue: str, paused_by: str | None = None) -> None:
    """Stop every worker from claiming on ``queue`` (within one poll interval). Running jobs finish."""
    _check_queue(queue)
    _run(conn_or_url, "pause_queue", {"queue": queue, "paused_by": paused_by})


def resume_queue(conn_or_url: Any, queue: str) -> None:
    """Let workers claim on ``queue`` again."""
    _check_queue(queue)
    _run(conn_or_url, "resume_queue", {"queue": queue})
