"""Delete finished jobs past their retention, and job history (actions, attempts) past its own, in bounded batches."""

from __future__ import annotations

from typing import Any

from ...sql import QUERIES
from ..config import MAINTENANCE_BATCH


async def delete_finished(
    conn: Any, completed_retention: float, failed_retention: float, limit: int = MAINTENANCE_BATCH
) -> int:
    query = QUERIES["delete_finished"]
    params = {
        "completed_seconds": float(completed_retention),
        "failed_seconds": float(failed_retention),
        "limit": limit,
    }
    return len(await conn.fetch(query.numeric, *query.positional(params)))


async def prune_history(conn: Any, retention: float, limit: int = MAINTENANCE_BATCH) -> tuple[int, int]:
    """One batch of operator actions and one of attempt records older than ``retention``: how many of each."""
    params = {"retention_seconds": float(retention), "limit": limit}
    counts = []
    for name in ("prune_job_actions", "prune_job_attempts"):
        query = QUERIES[name]
        counts.append(len(await conn.fetch(query.numeric, *query.positional(params))))
    return counts[0], counts[1]
