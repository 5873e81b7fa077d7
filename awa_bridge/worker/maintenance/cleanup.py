"""Delete finished jobs past their retention, the claim records they no longer need, and job history
(actions, attempts) past its own, in bounded batches."""

from __future__ import annotations

from typing import Any

from ...drivers.asyncpg import as_asyncpg
from ...sql import QUERIES
from ..config import MAINTENANCE_BATCH


async def delete_finished(
    conn: Any, completed_retention: float, failed_retention: float, limit: int = MAINTENANCE_BATCH
) -> int:
    params = {
        "completed_seconds": float(completed_retention),
        "failed_seconds": float(failed_retention),
        "limit": limit,
    }
    return len(await as_asyncpg(conn).fetch(QUERIES["delete_finished"], params))


async def prune_claims(conn: Any, completed_retention: float, limit: int = MAINTENANCE_BATCH) -> int:
    """One batch of claim records (``awa.job_claims``) that no retained job still needs."""
    params = {"retention_seconds": float(completed_retention), "limit": limit}
    return len(await as_asyncpg(conn).fetch(QUERIES["prune_job_claims"], params))


async def prune_history(conn: Any, retention: float, limit: int = MAINTENANCE_BATCH) -> tuple[int, int]:
    """One batch of operator actions and one of attempt records older than ``retention``: how many of each."""
    params = {"retention_seconds": float(retention), "limit": limit}
    db = as_asyncpg(conn)
    actions = len(await db.fetch(QUERIES["prune_job_actions"], params))
    attempts = len(await db.fetch(QUERIES["prune_job_attempts"], params))
    return actions, attempts
