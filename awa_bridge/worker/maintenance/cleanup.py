"""Delete finished jobs past their retention, the claim records they no longer need, and job history
(actions, attempts) past its own, in bounded batches."""

from __future__ import annotations

from typing import Any

from ...drivers.asyncpg import Asyncpg, as_asyncpg
from ...sql import QUERIES
from ..config import MAINTENANCE_BATCH


async def delete_finished(
    conn: Any, completed_retention: float, failed_retention: float, limit: int = MAINTENANCE_BATCH
) -> tuple[int, int]:
    """One batch of finished jobs past retention: how many it deleted and how many it picked.

    A job changed after the batch picked it (an operator retried it) is picked
    but not deleted: a batch that picked ``limit`` jobs is full, and more may
    wait, however many it deleted.
    """
    params = {
        "completed_seconds": float(completed_retention),
        "failed_seconds": float(failed_retention),
        "limit": limit,
    }
    row = await as_asyncpg(conn).fetch_one(QUERIES["delete_finished"], params)
    assert row is not None  # an aggregate: always one row
    return int(row["deleted"]), int(row["picked"])


async def prune_claims(conn: Any, completed_retention: float, limit: int = MAINTENANCE_BATCH) -> int:
    """One batch of claim records (``awa.job_claims``) that no retained job still needs."""
    params = {"retention_seconds": float(completed_retention), "limit": limit}
    return await _deleted(as_asyncpg(conn), "prune_job_claims", params)


async def prune_history(conn: Any, retention: float, limit: int = MAINTENANCE_BATCH) -> tuple[int, int]:
    """One batch of operator actions and one of attempt records older than ``retention``: how many of each."""
    params = {"retention_seconds": float(retention), "limit": limit}
    db = as_asyncpg(conn)
    actions = await _deleted(db, "prune_job_actions", params)
    attempts = await _deleted(db, "prune_job_attempts", params)
    return actions, attempts


async def _deleted(db: Asyncpg, query: str, params: dict[str, Any] | None = None) -> int:
    """Run one of the retention statements; how many rows it deleted (each returns ``deleted``)."""
    row = await db.fetch_one(QUERIES[query], params)
    return int(row["deleted"]) if row is not None else 0
