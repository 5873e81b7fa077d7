"""Refusing, up front, what cannot work on a database the real Awa (awa-pg) migrated.

awa-pg 0.6.9 keeps its jobs behind an ``awa.jobs`` view over its own
storage and has none of this package's helper functions, so the bridge's
worker would run jobs while its maintenance fails every second (no retries,
no scheduled jobs), and a unique bulk insert would hit awa-pg's unique
claims with a raw error that aborts the caller's transaction. Enqueueing
one job at a time (``insert_job``) works there and stays supported.

The check is one read (``awa_pg_schema``), so a refusal leaves the caller's
transaction usable.
"""

from __future__ import annotations

from typing import Any

from .errors import ForeignSchema
from .sql import QUERIES

WORKER_REFUSAL = (
    "this database was migrated by the real Awa (awa-pg): the awa_bridge worker cannot run its jobs "
    "correctly (its maintenance needs awa_bridge's schema); run awa-pg's own worker on it"
)
UNIQUE_BULK_REFUSAL = (
    "insert_many(unique=True) cannot skip duplicates on a database migrated by the real Awa (awa-pg); "
    "insert unique jobs one by one with insert_job (a duplicate raises UniqueConflict) or without unique"
)
AWA_PG_QUEUE_STORAGE = (
    "this database runs awa-pg's queue storage, which takes job changes only through awa-pg's own "
    "admin and runtime APIs: awa_bridge's admin operations are not supported on it"
)
ADMIN_WRITE_REFUSAL = (
    "awa.job_actions does not exist: either this database was migrated by the real Awa (awa-pg), where "
    "awa_bridge's admin operations that change a job are not supported (queue storage or not; they record "
    "each change in awa_bridge's own awa.job_actions): use awa-pg's own admin; or it lacks awa_bridge's "
    "migration v006: run `python -m awa_bridge migrate`"
)
ADMIN_REFUSAL = (
    "this database was migrated by the real Awa (awa-pg); the awa_django admin supports only "
    "awa_bridge's schema: use awa-pg's own tools for this database"
)


def check_sync(driver: Any, message: str) -> None:
    """Raise ``ForeignSchema(message)`` when the driver's database is awa-pg's."""
    if driver.fetch_all(QUERIES["awa_pg_schema"])[0]["present"]:
        raise ForeignSchema(message)


async def check_async(driver: Any, message: str) -> None:
    if (await driver.fetch_all(QUERIES["awa_pg_schema"]))[0]["present"]:
        raise ForeignSchema(message)
