"""Enqueue on Django's connection, inside the caller's ``transaction.atomic()``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import awa_bridge
from awa_bridge import InsertManyResult, Job, SchemaNotMigrated

from .db import awa_connection, migrate_command


def insert_job(args: Any, *, using: str | None = None, **opts: Any) -> Job:
    """Insert one job on ``connections[using]`` (default: ``AWA['DATABASE']``).

    Inside ``transaction.atomic(using=...)`` the job commits or rolls back
    with the ORM writes around it. ``args`` and ``opts`` are those of
    ``awa_bridge.insert_job`` (a dataclass, a pydantic model or a dict
    with ``kind=``; ``queue``, ``priority``, ``run_at``, ``unique`` ...).
    """
    with _migrate_hint(using):
        return awa_bridge.insert_job_sync(awa_connection(using), args, **opts)


def insert_many(jobs: Iterable[Any], *, using: str | None = None, **opts: Any) -> InsertManyResult:
    """Insert many jobs with COPY on Django's connection (psycopg 3 backend), in the current transaction."""
    with _migrate_hint(using):
        return awa_bridge.insert_many_sync(awa_connection(using), jobs, **opts)


@contextmanager
def _migrate_hint(using: str | None) -> Iterator[None]:
    """A missing schema names the ``manage.py migrate`` that installs it on this alias (the plain
    one never touches an alias other than ``default``)."""
    try:
        yield
    except SchemaNotMigrated as exc:
        raise SchemaNotMigrated(exc.problem, f"run `{migrate_command(using)}`") from exc
